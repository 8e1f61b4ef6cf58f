"""Exercise 11, a plausible wrong answer: the ratio of the two rows' medians.

``100 * rps_median / base_rps_median`` is the ratio of two runs that, on a machine whose
speed drifts, may come from different rounds: a row's median run and the base's median run
need not have met the same machine. ``bench servers`` compares each round's run with the base
row's run of the same round and reports the median of those ratios, as exercise 6 does.
``EXERCISE_IMPL=wrong make exercise N=11`` shows what a student who wrote it reads;
``tests/test_exercises.py`` checks that it fails with this hint:

Fails: test_percent_of_is_the_median_of_the_rounds: AssertionError: 66.7 % is the ratio of
"""
from __future__ import annotations

import json
import statistics  # noqa: F401  (for your percent_of)
import sys
from pathlib import Path
from typing import Any

#: The long body's size, bytes (``apps/servers_app.py``'s LONG_BODY).
LONG_BODY_BYTES = 430_000


# --8<-- [start:exercise]
def percent_of(rows: list[dict[str, Any]], base: str) -> dict[tuple[str, str], float | None]:
    """For each row, its RPS as a % of ``base``'s RPS on the same endpoint: the median over
    the rounds both rows ran."""
    base_rps = {r["endpoint"]: r["rps_median"] for r in rows if r["server"] == base}
    out: dict[tuple[str, str], float | None] = {}
    for row in rows:
        mine, theirs = row["rps_median"], base_rps.get(row["endpoint"])
        out[(row["endpoint"], row["server"])] = (
            100.0 * mine / theirs if mine and theirs else None)
    return out


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
