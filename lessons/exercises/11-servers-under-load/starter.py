"""Exercise 11, starter: compare ratios, ours and the published ones, from a results.json.

A ``bench servers`` results.json holds one row per (endpoint, server), each with
``endpoint``, ``server``, ``rps_median`` (requests per second, None for a failed row), and
its runs as exercise 6 knows them: ``rps_runs`` and ``rounds`` (the round of each run; files
written before rounds existed have none, and their runs pair in order). Absolute figures do
not travel between machines; ratios measured in one run do. Write:

- ``percent_of(rows, base)``: for each row, keyed ``(endpoint, server)``, its RPS as a
  percentage of the ``base`` server's RPS on the same endpoint (the table's "% of uvicorn"
  column), computed as exercise 6 computes "% of below": in each round both rows ran with a
  positive RPS, this row's run against the base row's run of the same round; then the median
  of those rounds. None when there is no such round. It works on the published figures too,
  given rows in the same shape (one run each).
- ``body_cost(rows)``: for each server, what the 430 KB body costs over the 22-byte one,
  from the two rows' median RPS: ``us_added``, microseconds per request (``1e6 / rps_long -
  1e6 / rps_short``: with the server pinned to one busy core, 1e6 / RPS is the server time
  of one request), and ``mb_per_s``, the body bytes per second of that extra time
  (``430_000 / us_added``, which is bytes per µs, i.e. 10^6 bytes per second). None for a
  server without both rows.

YOUR TASK: write both bodies below (look for "EXERCISE"). Check your work with
``make exercise N=11``; the failures say what is still wrong. Then run it on a results file:
``.venv/bin/python lessons/exercises/11-servers-under-load/starter.py
lessons/results/servers/results.json``.
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
    # ---- EXERCISE: replace the line below with your code. ----------------------------------
    # Hints: find each endpoint's base row first; exercise 6's round-by-round pairing
    # (a {round: rps} map per row) gives one ratio per common round.
    raise NotImplementedError("EXERCISE: percent_of")


def body_cost(rows: list[dict[str, Any]]) -> dict[str, dict[str, float] | None]:
    """For each server, what the 430 KB body costs over the 22-byte one: ``us_added`` (µs
    per request) and ``mb_per_s`` (10^6 bytes of body the server writes per second of that
    extra time)."""
    raise NotImplementedError("EXERCISE: body_cost")
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
