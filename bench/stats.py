"""Statistics over repeated runs and the columns derived from them.

Pure functions on numbers, so the arithmetic behind every column of ``bench`` tables is tested
on its own: median, min and max over runs, the spread flag, the columns every measured row
has (:func:`run_columns`), µs per request, µs added over the layer below, and the share of
the layer below's throughput that remains.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.loadgen import RunSummary

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


def median(values: Sequence[float]) -> float | None:
    """The median of ``values``, None when there are none."""
    return summarize(values).median if values else None


def no_run_columns() -> dict[str, Any]:
    """:func:`run_columns`' keys, all empty: the columns of a row that failed or was skipped."""
    return {"rps_median": None, "rps_runs": [], "rps_min": None, "rps_max": None,
            "spread_pct": None, "spread_flag": False, "p50_ms": None, "p90_ms": None,
            "p99_ms": None, "errors": None, "errors_by_kind": None, "rss_peak_mb": None}


def run_columns(summaries: Sequence[RunSummary], rss_peak_bytes: int) -> dict[str, Any]:
    """The columns of a row's measured runs, in :func:`no_run_columns`' order.

    ``rps_median``, ``rps_runs``, ``rps_min``, ``rps_max`` (req/s); ``spread_pct`` and
    ``spread_flag`` (over :data:`SPREAD_LIMIT`); ``p50_ms``, ``p90_ms``, ``p99_ms`` (median
    over runs of each run's percentile, ms; None where no run reported it); ``errors`` (every
    kind over every run) and ``errors_by_kind``; ``rss_peak_mb`` (``rss_peak_bytes`` in 10^6
    bytes, None for 0).

    Raises:
        ValueError: ``summaries`` is empty.
    """
    rps = [s.rps for s in summaries]
    spread = summarize(rps)
    by_kind = {kind: sum(s.errors[kind] for s in summaries) for kind in summaries[0].errors}

    def latency_ms(key: str) -> float | None:
        value = median([v for s in summaries if (v := s.latency_us.get(key)) is not None])
        return value / 1000 if value is not None else None

    return {
        "rps_median": spread.median, "rps_runs": rps, "rps_min": spread.minimum,
        "rps_max": spread.maximum, "spread_pct": 100 * spread.spread,
        "spread_flag": spread.flagged, "p50_ms": latency_ms("p50"),
        "p90_ms": latency_ms("p90"), "p99_ms": latency_ms("p99"),
        "errors": sum(by_kind.values()), "errors_by_kind": by_kind,
        "rss_peak_mb": rss_peak_bytes / 1e6 if rss_peak_bytes else None,
    }


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
