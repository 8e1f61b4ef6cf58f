"""Exercise 6, starter: the derived columns of ``bench layers``, from a results.json.

``derive(rows)`` takes the ``rows`` of a ``bench layers`` results.json (each with ``layer``,
``server`` and ``rps_median``, requests per second, or None for a failed row) and returns, for
each row in order, what the table shows beside the RPS:

- ``us_per_request``: microseconds of server time per request, ``1e6 / rps``;
- ``below``: the row this one is compared with, as ``"layer/server"``: the ``asgi`` row of
  the ``bare`` baseline with the ``asyncio`` row, any other ``asgi`` row with the ``bare`` row
  (with the ``asyncio`` row when there is no ``bare`` row), a ``starlette`` row with the
  ``asgi`` row of the same server, a ``fastapi`` row with the ``starlette`` row of the same
  server; other rows have none;
- ``us_added``: this row's µs per request minus its below's;
- ``pct_of_below``: this row's RPS as a percentage of its below's (the published "decay").

A value that cannot be computed (no RPS, no below, a below without RPS) is None.

YOUR TASK: write the body of ``derive`` below (look for "EXERCISE"). Check your work with
``make exercise N=6``; the failures tell you what is still wrong. Then run it on a results file:
``.venv/bin/python lessons/exercises/06-layers/starter.py lessons/results/layers/results.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

#: For each layer, the layer below it and whether the below must be on the same server.
BELOW = {"asgi": ("asyncio", False), "starlette": ("asgi", True), "fastapi": ("starlette", True)}
#: The server name of the baseline row that the other ``asgi`` rows are compared with.
BARE = "bare"


# --8<-- [start:exercise]
def derive(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per row: ``layer``, ``server``, ``us_per_request``, ``below``, ``us_added``,
    ``pct_of_below`` (µs, µs, percent; None where they do not apply)."""
    # ---- EXERCISE: replace the line below with your code. ----------------------------------
    # Hints: 1e6 / rps is µs per request; an asgi row other than bare looks for the bare row
    # first; else find the below with BELOW (the first row of that layer, on the same server
    # when BELOW says so); a failed row has rps_median None.
    raise NotImplementedError("exercise 6: write derive()")
# --8<-- [end:exercise]


def main(path: str) -> None:
    """Print the derived columns of the results.json at ``path``."""
    rows = json.loads(Path(path).read_text())["rows"]
    for row in derive(rows):
        cells = [f"{row['layer']:<10} {row['server']:<14}"]
        for key, unit in (("us_per_request", " µs/req"), ("us_added", " µs added"),
                          ("pct_of_below", " % of below")):
            value = row[key]
            cells.append("–" if value is None else f"{value:,.1f}{unit}")
        print("  ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "lessons/results/layers/results.json")
