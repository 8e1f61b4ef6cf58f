"""Statistics over repeated runs and the columns derived from them.

Pure functions on numbers, so the arithmetic behind every column of ``bench`` tables is tested
on its own: median, min and max over runs, the spread flag, µs per request, µs added over the
layer below, and the share of the layer below's throughput that remains.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: Runs whose (max - min) / median exceeds this fraction are flagged as unstable.
SPREAD_LIMIT = 0.10


@dataclass(frozen=True)
class Spread:
    """Median, minimum and maximum of a series of runs, and how far apart they are.

    Attributes:
        median, minimum, maximum: in the unit of the runs.
        spread: (maximum - minimum) / median, a fraction (0.0 for one run or a zero median).
        flagged: ``spread`` > :data:`SPREAD_LIMIT`.
    """

    median: float
    minimum: float
    maximum: float
    spread: float
    flagged: bool


def summarize(values: Sequence[float], limit: float = SPREAD_LIMIT) -> Spread:
    """The :class:`Spread` of ``values``.

    Raises:
        ValueError: ``values`` is empty.
    """
    if not values:
        raise ValueError("no runs to summarize")
    median = float(statistics.median(values))
    low, high = float(min(values)), float(max(values))
    spread = (high - low) / median if median > 0 else 0.0
    return Spread(median, low, high, spread, spread > limit)


def us_per_request(rps: float) -> float | None:
    """Microseconds of server time per request, 1e6 / RPS (None when RPS is not positive)."""
    return 1e6 / rps if rps > 0 else None


def us_added(rps: float, below_rps: float | None) -> float | None:
    """Microseconds per request this layer adds over the one below (None without a below)."""
    mine, theirs = us_per_request(rps), us_per_request(below_rps or 0.0)
    if mine is None or theirs is None:
        return None
    return mine - theirs


def pct_of_below(rps: float, below_rps: float | None) -> float | None:
    """This layer's RPS as a percentage of the layer below's (the published "decay" column).

    100 means no cost; 44.5 means 55.5 % of the throughput was lost. None without a below.
    """
    if below_rps is None or below_rps <= 0:
        return None
    return 100.0 * rps / below_rps
