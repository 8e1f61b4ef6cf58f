"""Exercise 6, solution: the comparison columns of ``bench layers``, round by round.

See ``starter.py`` for the task. Run it on a results file:
``.venv/bin/python lessons/exercises/06-layers/solution.py lessons/results/layers/results.json``.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

#: The comparison columns, as results.json names them; ``noisy`` besides.
COLUMNS = ("us_added", "us_added_min", "us_added_max", "pct_of_below", "pct_min", "pct_max")


# --8<-- [start:exercise]
def compare(mine: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any] | None:
    """``mine`` against ``theirs`` (two results.json rows), round by round: a dict with
    ``us_added``, ``us_added_min``, ``us_added_max`` (µs per request), ``pct_of_below``,
    ``pct_min``, ``pct_max`` (percent) and ``noisy`` (bool); None without a common round."""
    mine_by_round, theirs_by_round = by_round(mine), by_round(theirs)
    rounds = [r for r, rps in mine_by_round.items()
              if rps > 0 and theirs_by_round.get(r, 0.0) > 0]
    if not rounds:
        return None
    added = [1e6 / mine_by_round[r] - 1e6 / theirs_by_round[r] for r in rounds]
    pct = [100 * mine_by_round[r] / theirs_by_round[r] for r in rounds]
    return {"us_added": statistics.median(added), "us_added_min": min(added),
            "us_added_max": max(added), "pct_of_below": statistics.median(pct),
            "pct_min": min(pct), "pct_max": max(pct),
            "noisy": min(added) < 0 < max(added)}  # one round faster, another slower


def by_round(row: dict[str, Any]) -> dict[int, float]:
    """``row``'s RPS by round: ``rounds`` and ``rps_runs`` side by side, or run i as round i
    in a file written before rounds existed."""
    runs = row["rps_runs"]
    return dict(zip(row.get("rounds") or range(len(runs)), runs, strict=True))
# --8<-- [end:exercise]


# --8<-- [start:below]
#: For each layer: the layer of its row below, and whether that row must be on the same server.
BELOW = {"asgi": ("asyncio", False), "starlette": ("asgi", True), "fastapi": ("starlette", True),
         "wsgi": ("asyncio", False), "flask": ("wsgi", True)}
#: The server name of the baseline row that the other ``asgi`` rows are compared with.
BARE = "bare"


def below_of(row: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The row ``row`` is compared with, or None: an ``asgi`` row other than ``bare`` with the
    ``bare`` row when there is one; otherwise the first row of the layer ``BELOW`` names (on
    the same server when it says so)."""
    if row["layer"] == "asgi" and row["server"] != BARE:
        bare = next((r for r in rows if r["layer"] == "asgi" and r["server"] == BARE), None)
        if bare is not None:
            return bare
    if row["layer"] not in BELOW:
        return None
    layer, same_server = BELOW[row["layer"]]
    return next((r for r in rows if r["layer"] == layer
                 and (not same_server or r["server"] == row["server"])), None)
# --8<-- [end:below]


def derive(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per row: ``layer``, ``server``, ``below`` (``"layer/server"``),
    ``us_per_request`` (1e6 / the median RPS), :data:`COLUMNS` and ``noisy``, from
    ``compare`` with the row below; None (``noisy`` False) where they do not apply."""
    out = []
    for row in rows:
        below = below_of(row, rows)
        rps = row["rps_median"]
        compared = compare(row, below) if below is not None and rps else None
        out.append({
            "layer": row["layer"], "server": row["server"],
            "below": f"{below['layer']}/{below['server']}" if below is not None else None,
            "us_per_request": 1e6 / rps if rps else None,
            **(compared or {**dict.fromkeys(COLUMNS), "noisy": False}),
        })
    return out


def added_cell(row: dict[str, Any]) -> str:
    """The µs added, with the rounds' min…max; ``noise`` when they disagree on the sign."""
    if row["us_added"] is None:
        return "–"
    spread = f"({row['us_added_min']:+.1f}…{row['us_added_max']:+.1f})"
    if row["noisy"]:
        return f"noise {spread}"
    return f"{row['us_added']:+.1f} µs added {spread}"


def main(path: str) -> None:
    """Print the derived columns of the results.json at ``path``, one line per row."""
    for row in derive(json.loads(Path(path).read_text())["rows"]):
        rate = "–" if row["us_per_request"] is None else f"{row['us_per_request']:,.1f} µs/req"
        pct = "–" if row["pct_of_below"] is None else (
            f"{row['pct_of_below']:.1f} % of below ({row['pct_min']:.0f}–{row['pct_max']:.0f})")
        print(f"{row['layer']:<10} {row['server']:<14} {rate:>14}  {added_cell(row):<34}  {pct}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "lessons/results/layers/results.json")
