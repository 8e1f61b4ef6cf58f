"""Exercise 11, solution: compare ratios, ours and the published ones, from a results.json.

See ``starter.py`` for the task. Run it on a results file:
``.venv/bin/python lessons/exercises/11-servers-under-load/solution.py
lessons/results/servers/results.json``.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

#: The long body's size, bytes (``apps/servers_app.py``'s LONG_BODY).
LONG_BODY_BYTES = 430_000


# --8<-- [start:exercise]
def percent_of(rows: list[dict[str, Any]], base: str) -> dict[tuple[str, str], float | None]:
    """For each row, its RPS as a % of ``base``'s RPS on the same endpoint: the median over
    the rounds both rows ran."""
    base_runs = {r["endpoint"]: by_round(r) for r in rows if r["server"] == base}
    out: dict[tuple[str, str], float | None] = {}
    for row in rows:
        mine, theirs = by_round(row), base_runs.get(row["endpoint"], {})
        ratios = [100.0 * rps / theirs[r] for r, rps in mine.items()
                  if rps > 0 and theirs.get(r, 0.0) > 0]
        out[(row["endpoint"], row["server"])] = statistics.median(ratios) if ratios else None
    return out


def by_round(row: dict[str, Any]) -> dict[int, float]:
    """``row``'s RPS by round (exercise 6): ``rounds`` beside ``rps_runs``, or in order."""
    runs = row["rps_runs"]
    return dict(zip(row.get("rounds") or range(len(runs)), runs, strict=True))


def body_cost(rows: list[dict[str, Any]]) -> dict[str, dict[str, float] | None]:
    """For each server, what the 430 KB body costs over the 22-byte one: ``us_added`` (µs
    per request) and ``mb_per_s`` (10^6 bytes of body the server writes per second of that
    extra time)."""
    rps: dict[str, dict[str, float | None]] = {}
    for row in rows:
        rps.setdefault(row["server"], {})[row["endpoint"]] = row["rps_median"]
    out: dict[str, dict[str, float] | None] = {}
    for server, by_endpoint in rps.items():
        short, long = by_endpoint.get("shortbody"), by_endpoint.get("longbody")
        if not short or not long:
            out[server] = None
            continue
        added = 1e6 / long - 1e6 / short
        out[server] = {"us_added": added,
                       "mb_per_s": LONG_BODY_BYTES / added if added > 0 else float("inf")}
    return out
# --8<-- [end:exercise]


def main(path: str) -> None:
    """Print both for a ``bench servers`` results.json."""
    data = json.loads(Path(path).read_text())
    base = data["settings"]["server"]
    for (endpoint, server), pct in percent_of(data["rows"], base).items():
        print(f"{endpoint:10} {server:14} {'–' if pct is None else f'{pct:5.0f} %'}")
    for server, cost in body_cost(data["rows"]).items():
        if cost is None:
            continue
        speed = "no time left: noise" if cost["us_added"] <= 0 else f"{cost['mb_per_s']:,.0f} MB/s"
        print(f"{server:14} {cost['us_added']:+.0f} µs for 430 KB: {speed}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "lessons/results/servers/results.json")
