"""Exercise 11, starter: compare ratios, ours and the published ones, from a results.json.

A ``bench servers`` results.json holds one row per (endpoint, server), each with
``endpoint``, ``server`` and ``rps_median`` (requests per second, None for a failed row).
Absolute figures do not travel between machines; ratios measured in one run do. Write:

- ``percent_of(rows, base)``: for each row, keyed ``(endpoint, server)``, its RPS as a
  percentage of the ``base`` server's RPS on the same endpoint (the table's "% of uvicorn"
  column); None when either RPS is missing or zero. It works on the published figures too,
  given rows in the same shape.
- ``body_cost(rows)``: for each server, what the 430 KB body costs over the 22-byte one,
  from the two rows' RPS: ``us_added``, microseconds per request (``1e6 / rps_long -
  1e6 / rps_short``: with the server pinned to one busy core, 1e6 / RPS is the server time
  of one request), and ``mb_per_s``, the body bytes per second of that extra time
  (``430_000 / us_added``, which is bytes per µs, i.e. 10^6 bytes per second). None for a
  server without both rows.

YOUR TASK: write both bodies below (look for "EXERCISE"). Check your work with
``make exercise N=11``; the failures say what is still wrong. Then run it on a results file:
``python starter.py lessons/results/servers/results.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

#: The long body's size, bytes (``apps/servers_app.py``'s LONG_BODY).
LONG_BODY_BYTES = 430_000


# --8<-- [start:exercise]
def percent_of(rows: list[dict[str, Any]], base: str) -> dict[tuple[str, str], float | None]:
    """For each row, its RPS as a % of ``base``'s RPS on the same endpoint."""
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
