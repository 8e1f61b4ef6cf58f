"""Statistics over repeated runs and the columns derived from them.

Pure functions on numbers, so the arithmetic behind every column of ``bench`` tables is tested
on its own: median, min and max over runs, the spread flag, the columns every measured row
has (:func:`run_columns`), µs per request, µs added over the layer below, and the share of
the layer below's throughput that remains.

Rows are measured in interleaved rounds (:mod:`bench.rounds`), so two rows' runs of the same
round met about the same machine. What one row costs over another is therefore computed
round by round and then summarised (:func:`paired`): the median of the per-round figures,
with their min and max. When those rounds disagree on the sign of the difference, the run
cannot say which row is faster (:attr:`Paired.noisy`), and the reports say so in words
instead of printing the median as a fact.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
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
            "p99_ms": None, "errors": None, "errors_by_kind": None, "rss_peak_mb": None,
            "rounds": [], "cpu_us_per_request": None, "cpu_us_runs": []}


def run_columns(summaries: Sequence[RunSummary], rss_peak_bytes: int,
                rounds: Sequence[int] = (), cpu_us: Sequence[float | None] = ()
                ) -> dict[str, Any]:
    """The columns of a row's measured runs, in :func:`no_run_columns`' order.

    ``rps_median``, ``rps_runs``, ``rps_min``, ``rps_max`` (req/s); ``spread_pct`` and
    ``spread_flag`` (over :data:`SPREAD_LIMIT`); ``p50_ms``, ``p90_ms``, ``p99_ms`` (median
    over runs of each run's percentile, ms; None where no run reported it); ``errors`` (every
    kind over every run) and ``errors_by_kind``; ``rss_peak_mb`` (``rss_peak_bytes`` in 10^6
    bytes, None for 0); ``rounds`` (each run's round, parallel to ``rps_runs``: ``rounds``,
    or 0, 1, 2, ... when not given); ``cpu_us_runs`` (``cpu_us``: the server's CPU µs per
    request in each run) and ``cpu_us_per_request``, their median (None without any).

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
        "rounds": list(rounds) or list(range(len(rps))), "cpu_us_runs": list(cpu_us),
        "cpu_us_per_request": median([v for v in cpu_us if v is not None]),
    }


def us_per_request(rps: float) -> float | None:
    """Microseconds of server time per request, 1e6 / RPS (None when RPS is not positive)."""
    return 1e6 / rps if rps > 0 else None


@dataclass(frozen=True)
class Paired:
    """One row against another, round by round (module docstring).

    Attributes:
        rounds: how many rounds both rows completed.
        us_added: µs per request this row adds over the other in each round, summarised.
        pct_of_below: this row's RPS as a percentage of the other's in each round, summarised.
        noisy: the rounds disagree on the sign of ``us_added`` (one says faster, another
            slower), so this run cannot tell which row is faster.
    """

    rounds: int
    us_added: Spread
    pct_of_below: Spread
    noisy: bool


def paired(mine: Mapping[int, float], theirs: Mapping[int, float]) -> Paired | None:
    """Compare two rows' RPS by round (``{round: rps}`` each) in the rounds both completed
    with a positive RPS; None when there is no such round."""
    common = [r for r in sorted(mine) if mine[r] > 0 and theirs.get(r, 0.0) > 0]
    if not common:
        return None
    added = [1e6 / mine[r] - 1e6 / theirs[r] for r in common]
    pct = [100.0 * mine[r] / theirs[r] for r in common]
    return Paired(len(common), summarize(added), summarize(pct),
                  len(common) > 1 and min(added) < 0 < max(added))


def by_round(row: Mapping[str, Any]) -> dict[int, float]:
    """A results.json row's measured RPS keyed by round (``rounds`` and ``rps_runs``; files
    written before rounds existed pair their runs in order)."""
    runs = row.get("rps_runs") or []
    rounds = row.get("rounds") or range(len(runs))
    return dict(zip(rounds, runs, strict=False))


def no_comparison_columns() -> dict[str, Any]:
    """:func:`comparison_columns`' keys, all empty: a row compared with nothing."""
    return {"us_added": None, "us_added_min": None, "us_added_max": None,
            "pct_of_below": None, "pct_min": None, "pct_max": None, "pct_spread_flag": False,
            "rounds_compared": 0, "noisy": False}


def comparison_columns(row: Mapping[str, Any], below: Mapping[str, Any] | None
                       ) -> dict[str, Any]:
    """The columns comparing results.json row ``row`` with row ``below``, round by round
    (:func:`paired`): ``us_added`` (median µs per request added, with ``us_added_min`` and
    ``us_added_max``), ``pct_of_below`` (median % of the other's RPS, with ``pct_min``,
    ``pct_max``, and ``pct_spread_flag`` when they spread over :data:`SPREAD_LIMIT`),
    ``rounds_compared`` and ``noisy``; :func:`no_comparison_columns` when there is nothing to
    compare."""
    pair = paired(by_round(row), by_round(below)) if below is not None else None
    if pair is None:
        return no_comparison_columns()
    added, pct = pair.us_added, pair.pct_of_below
    return {"us_added": added.median, "us_added_min": added.minimum,
            "us_added_max": added.maximum, "pct_of_below": pct.median, "pct_min": pct.minimum,
            "pct_max": pct.maximum, "pct_spread_flag": pct.flagged,
            "rounds_compared": pair.rounds, "noisy": pair.noisy}
