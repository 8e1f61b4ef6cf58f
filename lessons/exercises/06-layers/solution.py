"""Exercise 6, solution: the derived columns of ``bench layers``, from a results.json.

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

A value that cannot be computed (no RPS, no below, a below without RPS) is None. Run it on a results
file:
``.venv/bin/python lessons/exercises/06-layers/solution.py lessons/results/layers/results.json``.
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
    out = []
    for row in rows:
        rps = row["rps_median"]
        below = None
        if row["layer"] == "asgi" and row["server"] != BARE:
            below = next((other for other in rows
                          if other["layer"] == "asgi" and other["server"] == BARE), None)
        if below is None and row["layer"] in BELOW:
            layer, same_server = BELOW[row["layer"]]
            below = next((other for other in rows if other["layer"] == layer
                          and (not same_server or other["server"] == row["server"])), None)
        below_rps = below["rps_median"] if below is not None else None
        mine = 1e6 / rps if rps else None
        theirs = 1e6 / below_rps if below_rps else None
        out.append({
            "layer": row["layer"], "server": row["server"], "us_per_request": mine,
            "below": f"{below['layer']}/{below['server']}" if below is not None else None,
            "us_added": mine - theirs if mine is not None and theirs is not None else None,
            "pct_of_below": 100 * rps / below_rps if rps and below_rps else None,
        })
    return out
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
