"""Exercise 6, starter: the comparison columns of ``bench layers``, round by round.

``bench layers`` measures its rows in interleaved rounds: round 0 runs wrk once against every
row, then round 1 does, and so on, so two rows' runs of the same round met about the same
machine, and a machine that slows down halfway slows both. A row of results.json keeps each
measured run's requests per second in ``rps_runs`` and, in ``rounds``, the round each run
belongs to (parallel lists; a run that failed leaves its round out). Files written before
rounds existed have no ``rounds``: pair their runs in order (run ``i`` is round ``i``).

``compare(mine, theirs)`` compares two such rows: in each round where both ran with a
positive RPS, the µs per request ``mine`` adds over ``theirs`` (``1e6 / mine - 1e6 /
theirs``) and ``mine``'s RPS as a percentage of ``theirs``; then, over those rounds, the
median, the min and the max of each, and ``noisy``: the rounds disagree on the sign of the µs
added (one round says ``mine`` is slower, another that it is faster), so this run cannot say
which row is faster. It returns None when no round has both.

``derive(rows)`` (written for you) gives each row its row below (``below_of``: the rules are
on the lesson page), its µs per request, and ``compare``'s columns against its below; ``main``
prints them, ``noise`` where the rounds disagree on the sign.

YOUR TASK: write ``compare`` below (look for "EXERCISE"). Check your work with
``make exercise N=6``; the failures tell you what is still wrong. Then run it on a results
file: ``.venv/bin/python lessons/exercises/06-layers/starter.py
lessons/results/layers/results.json``.
"""

from __future__ import annotations

import json
import statistics  # noqa: F401  (for your compare)
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
    # ---- EXERCISE: replace the line below with your code. ----------------------------------
    # Hints: first map each row's rounds to its RPS ({round: rps}), from ``rounds`` and
    # ``rps_runs`` (or run i is round i). Compare only the rounds both rows have, with a
    # positive RPS on both sides. statistics.median, min and max summarise a list.
    raise NotImplementedError("exercise 6: write compare()")
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
