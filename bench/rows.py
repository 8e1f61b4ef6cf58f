"""One row of a table of servers under wrk: what to run, what came out, its results.json entry.

``bench layers`` measures rows of layers, ``bench servers`` rows of endpoints and ``bench
load`` rows of load levels; all three describe a row the same way (:class:`RowPlan`), keep
what the harness measured beside it (:class:`RowResult`) and write the same keys for it
(:func:`row_json`), so one table reader serves the three results files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.rounds import Measurement
from bench.stats import (
    comparison_columns,
    no_comparison_columns,
    no_run_columns,
    run_columns,
    us_per_request,
)


@dataclass(frozen=True)
class RowPlan:
    """One row to measure: a layer, the server under it, and the app (``module:attr``).

    ``layer`` is the row's first column (a layer, an endpoint, a load level); ``interface``
    is the app's (``"asgi"``, ``"wsgi"``, or None for axum and asyncio, which have none);
    ``spec`` the registry name when it differs from ``server`` (a worker model's row, e.g.
    ``gunicorn-gthread``); ``threads`` the app threads asked of the server, if any.
    """

    layer: str
    server: str
    app: str
    description: str
    interface: str | None = "asgi"
    spec: str | None = None
    threads: int | None = None


@dataclass
class RowResult:
    """A measured (or failed, or skipped) row before its derived columns are computed: the
    plan and what the harness measured for it."""

    plan: RowPlan
    measurement: Measurement


def row_json(result: RowResult, below: dict[str, Any] | None) -> dict[str, Any]:
    """The ``rows`` entry of results.json for one row, compared with ``below`` (another
    row's entry) or with nothing.

    Keys: ``layer``, ``server``, ``interface`` (``"asgi"``, ``"wsgi"``, None for axum and
    asyncio), ``threads`` (app threads asked of the server, else None), ``description``,
    ``app``, ``status``, ``error``, ``log_tail``, ``command``; the measured runs' columns
    (:func:`measured_columns`); ``us_per_request`` (1e6 / median RPS); the columns comparing
    it with ``below`` round by round (:func:`bench.stats.comparison_columns`: ``us_added``,
    ``pct_of_below``, their min and max, ``noisy``) and ``below`` (``"layer/server"``), None
    where they do not apply; ``runs`` (every run, warm-ups included).
    """
    plan, measurement = result.plan, result.measurement
    row: dict[str, Any] = {
        "layer": plan.layer, "server": plan.server, "interface": plan.interface,
        "threads": plan.threads, "description": plan.description,
        "app": plan.app, "status": measurement.status, "error": measurement.error,
        "log_tail": measurement.log_tail, "command": measurement.command,
        **no_run_columns(), "us_per_request": None, **no_comparison_columns(),
        "below": f"{below['layer']}/{below['server']}" if below else None,
        "runs": [run.to_json() for run in measurement.runs],
    }
    if measurement.status != "ok" or not measurement.measured:
        return row
    row.update(measured_columns(measurement))
    row["us_per_request"] = us_per_request(row["rps_median"])
    row.update(comparison_columns(row, below))
    return row


def measured_columns(measurement: Measurement) -> dict[str, Any]:
    """The columns of a measurement's completed measured runs
    (:func:`bench.stats.run_columns`: ``rps_median``, ``rps_runs``, ``rps_min``, ``rps_max``,
    ``spread_pct``, ``spread_flag``, ``p50_ms``, ``p90_ms``, ``p99_ms``, ``errors``,
    ``errors_by_kind``, ``rss_peak_mb``, ``rounds``, ``cpu_us_per_request``, ``cpu_us_runs``).

    Raises:
        ValueError: it has no completed measured run.
    """
    runs = measurement.measured_runs
    return run_columns(measurement.measured, measurement.rss_peak_bytes,
                       [r.round if r.round is not None else i for i, r in enumerate(runs)],
                       [r.cpu_us_per_request for r in runs])
