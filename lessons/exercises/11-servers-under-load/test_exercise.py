"""Checks for exercise 11 (ratios from ``bench servers``). Run: ``make exercise N=11``.

Tests ``starter.py`` by default; ``EXERCISE_IMPL=solution`` tests the reference solution. The
last checks run on the lesson's committed results file: your "% of uvicorn" must match the
column ``bench servers`` wrote (in a file written before rounds existed, which holds another
column, the same ratios from ``bench.stats``, which pairs runs in order), your body cost its
"µs/req" figures, and your published ratios the published figures' own.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from bench.stats import comparison_columns

IMPL = os.environ.get("EXERCISE_IMPL", "starter")
PATH = Path(__file__).with_name(f"{IMPL}.py")
ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "lessons" / "results" / "servers" / "results.json"
PUBLISHED = ROOT / "bench" / "published" / "servers.json"


def load() -> ModuleType:
    """Import ``starter.py`` or ``solution.py`` from this directory as a fresh module."""
    spec = importlib.util.spec_from_file_location(f"exercise_11_{IMPL}", PATH)
    assert spec is not None and spec.loader is not None, f"cannot import {PATH}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def row(endpoint: str, server: str, rps: float | None | list[float],
        rounds: list[int] | None = None) -> dict[str, Any]:
    """A results.json row: one run of ``rps`` (none for None), or the runs listed, in the
    rounds given (0, 1, 2... by default)."""
    runs = rps if isinstance(rps, list) else [] if rps is None else [rps]
    return {"endpoint": endpoint, "server": server,
            "rps_median": sorted(runs)[len(runs) // 2] if runs else None, "rps_runs": runs,
            "rounds": rounds if rounds is not None else list(range(len(runs)))}


# Round numbers: 1e6 / 4_000 = 250 µs, 1e6 / 1_000 = 1000 µs, so the long body adds 750 µs.
ROWS = [
    row("shortbody", "uvicorn", 4_000.0), row("shortbody", "daphne", 2_000.0),
    row("shortbody", "broken", None),
    row("longbody", "uvicorn", 1_000.0), row("longbody", "daphne", 500.0),
    row("longbody", "broken", 800.0),
]


def test_percent_of_the_base_on_the_same_endpoint() -> None:
    pct = load().percent_of(ROWS, "uvicorn")
    assert pct[("shortbody", "uvicorn")] == pytest.approx(100.0)
    assert pct[("shortbody", "daphne")] == pytest.approx(50.0)
    assert pct[("longbody", "daphne")] == pytest.approx(50.0)
    assert pct[("longbody", "broken")] == pytest.approx(80.0)
    assert pct[("shortbody", "broken")] is None
    assert len(pct) == len(ROWS)


def test_percent_of_is_the_median_of_the_rounds() -> None:
    # round by round daphne makes 50, 75 and 100 % of uvicorn; its median run (2,000) over
    # uvicorn's (3,000) would say 66.7 %, a ratio no round measured
    rows = [row("shortbody", "uvicorn", [4_000.0, 2_000.0, 3_000.0]),
            row("shortbody", "daphne", [2_000.0, 1_500.0, 3_000.0])]
    pct = load().percent_of(rows, "uvicorn")[("shortbody", "daphne")]
    assert pct != pytest.approx(100 * 2_000 / 3_000), (
        "66.7 % is the ratio of the median runs: compare each round's run with the base "
        "row's run of the same round (exercise 6), then take the median of those (75.0 %)")
    assert pct == pytest.approx(75.0)


def test_percent_of_pairs_runs_by_round() -> None:
    rows = [row("longbody", "uvicorn", [1_000.0, 200.0, 1_000.0]),
            row("longbody", "daphne", [500.0, 500.0], rounds=[0, 2])]  # missed round 1
    assert load().percent_of(rows, "uvicorn")[("longbody", "daphne")] == pytest.approx(50.0), (
        "pair runs by their round ('rounds'), not by their place in 'rps_runs'")


def test_percent_of_without_a_base_row_is_none() -> None:
    pct = load().percent_of([row("activities", "daphne", 100.0)], "uvicorn")
    assert pct == {("activities", "daphne"): None}


def test_body_cost_in_microseconds_and_megabytes_per_second() -> None:
    cost = load().body_cost(ROWS)
    assert cost["uvicorn"]["us_added"] == pytest.approx(750.0)
    assert cost["uvicorn"]["mb_per_s"] == pytest.approx(430_000 / 750.0)
    assert cost["daphne"]["us_added"] == pytest.approx(1500.0)
    assert cost["broken"] is None


def test_on_the_committed_results_the_ratios_match_the_table() -> None:
    data = json.loads(RESULTS.read_text())
    base = data["settings"]["server"]
    pct = load().percent_of(data["rows"], base)
    checked = 0
    bases = {r["endpoint"]: r for r in data["rows"] if r["server"] == base}
    for r in data["rows"]:
        if r["status"] != "ok" or r["server"] == base:
            continue
        expected = (r["pct_of_below"] if "rounds" in r  # the column bench servers wrote
                    else comparison_columns(r, bases.get(r["endpoint"]))["pct_of_below"])
        assert pct[(r["endpoint"], r["server"])] == pytest.approx(expected), (
            r["endpoint"], r["server"])
        checked += 1
    assert checked > 0


def test_on_the_committed_results_the_body_cost_matches_microseconds_per_request() -> None:
    data = json.loads(RESULTS.read_text())
    us = {(r["endpoint"], r["server"]): r["us_per_request"] for r in data["rows"]}
    cost = load().body_cost(data["rows"])
    for server, found in cost.items():
        if found is None:
            continue
        expected = us[("longbody", server)] - us[("shortbody", server)]
        assert found["us_added"] == pytest.approx(expected)


def test_the_published_ratios_from_the_papers_figures() -> None:
    published = json.loads(PUBLISHED.read_text())
    rows = [row(endpoint, server, float(figures["rps"]))
            for endpoint, block in published["endpoints"].items()
            for server, figures in block["rows"].items()]
    pct = load().percent_of(rows, "uvicorn")
    assert pct[("shortbody", "daphne")] == pytest.approx(100 * 3073 / 4253)
    assert pct[("longbody", "daphne")] == pytest.approx(100 * 1039 / 2460)
