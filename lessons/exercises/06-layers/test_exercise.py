"""Checks for exercise 6 (the comparison columns of ``bench layers``, round by round). Run:
``make exercise N=6``.

Tests ``starter.py`` by default; ``EXERCISE_IMPL=solution`` tests the reference solution. The
last check recomputes the columns of the lesson's committed results file and compares them
with what ``bench layers`` wrote there (files written before rounds existed hold other
columns: there the comparison is with ``bench.stats``, which pairs their runs in order).
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
RESULTS = Path(__file__).resolve().parents[2] / "results" / "layers" / "results.json"


def load() -> ModuleType:
    """Import ``starter.py`` or ``solution.py`` from this directory as a fresh module."""
    spec = importlib.util.spec_from_file_location(f"exercise_06_{IMPL}", PATH)
    assert spec is not None and spec.loader is not None, f"cannot import {PATH}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def row(layer: str, server: str, runs: list[float], rounds: list[int] | None = None
        ) -> dict[str, Any]:
    """A results.json row: its runs' RPS, the round of each (0, 1, 2... unless given), and
    their median."""
    found = {"layer": layer, "server": server, "rps_runs": runs,
             "rps_median": sorted(runs)[len(runs) // 2] if runs else None}
    found["rounds"] = rounds if rounds is not None else list(range(len(runs)))
    return found


def compare(mine: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any] | None:
    return load().compare(mine, theirs)  # type: ignore[no-any-return]


# Round numbers, easy to check by hand: 1e6 / 40_000 = 25 µs, 1e6 / 50_000 = 20 µs.
def test_one_round() -> None:
    found = compare(row("asgi", "uvicorn", [40_000.0]), row("asyncio", "raw", [50_000.0]))
    assert found is not None, "one round in common: there is something to compare"
    assert found["us_added"] == pytest.approx(5.0), "µs added: 1e6 / mine - 1e6 / theirs"
    assert found["pct_of_below"] == pytest.approx(80.0), "% of below: 100 * mine / theirs"
    assert (found["us_added_min"], found["us_added_max"]) == pytest.approx((5.0, 5.0))
    assert (found["pct_min"], found["pct_max"]) == pytest.approx((80.0, 80.0))
    assert found["noisy"] is False


def test_each_round_against_the_same_round_then_the_median() -> None:
    # The machine ran at half speed in round 1, and below's round 2 was a lucky one. Round by
    # round, mine adds 5, 10 and 16.7 µs; its median run against below's median run would say
    # 33.3 - 20 = 13.3 µs, a figure no round measured.
    mine = row("asgi", "uvicorn", [40_000.0, 20_000.0, 30_000.0])
    theirs = row("asyncio", "raw", [50_000.0, 25_000.0, 60_000.0])
    found = compare(mine, theirs)
    assert found is not None
    assert found["us_added"] != pytest.approx(1e6 / 30_000 - 1e6 / 50_000), (
        "µs added of 13.3 is the median runs' difference: compare each round's run with the "
        "same round's run of the row below, then take the median of those differences (10.0)")
    assert found["us_added"] == pytest.approx(10.0), "the median of 5, 10 and 16.7 µs"
    assert (found["us_added_min"], found["us_added_max"]) == pytest.approx((5.0, 1e6 / 60_000))
    assert found["pct_of_below"] == pytest.approx(80.0), "the median of 80, 80 and 50 %"
    assert (found["pct_min"], found["pct_max"]) == pytest.approx((50.0, 80.0))


def test_runs_pair_by_their_round_not_their_place() -> None:
    # Round 1 failed for mine (a server that did not answer in time): its second run is
    # round 2's, and must meet below's round 2, not below's second run (round 1, slow).
    mine = row("asgi", "uvicorn", [40_000.0, 40_000.0], rounds=[0, 2])
    theirs = row("asyncio", "raw", [50_000.0, 10_000.0, 50_000.0])
    found = compare(mine, theirs)
    assert found is not None
    assert found["us_added_min"] == pytest.approx(5.0), (
        f"µs added down to {found['us_added_min']:+.1f}: pair runs by their round (the "
        "'rounds' list beside 'rps_runs'), not by their place: a round a row missed leaves "
        "no run in its list")
    assert found["us_added"] == pytest.approx(5.0) and found["noisy"] is False


def test_files_without_rounds_pair_their_runs_in_order() -> None:
    mine, theirs = row("asgi", "uvicorn", [40_000.0, 20_000.0]), row("asyncio", "raw",
                                                                      [50_000.0, 25_000.0])
    del mine["rounds"], theirs["rounds"]
    found = compare(mine, theirs)
    assert found is not None, "a file written before rounds existed: run i is round i"
    assert (found["us_added_min"], found["us_added_max"]) == pytest.approx((5.0, 10.0))


def test_rounds_that_disagree_on_the_sign_are_noise() -> None:
    # +0.6, -1.2 and +0.3 µs: one round says mine is faster, two say slower
    mine = row("asgi", "toy-raw", [40_000.0, 42_000.0, 41_000.0])
    theirs = row("asgi", "bare", [41_000.0, 40_000.0, 41_500.0])
    found = compare(mine, theirs)
    assert found is not None
    assert found["noisy"] is True, (
        "the rounds gave µs added of both signs: this run cannot say which row is faster, "
        "so noisy must be True")
    assert found["us_added_min"] < 0 < found["us_added_max"]
    steady = compare(row("asgi", "uvicorn", [40_000.0, 39_000.0]),
                     row("asgi", "bare", [41_000.0, 40_000.0]))
    assert steady is not None and steady["noisy"] is False, "all rounds agree: not noise"


def test_nothing_to_compare_is_none() -> None:
    assert compare(row("asgi", "uvicorn", [40_000.0], rounds=[1]),
                   row("asyncio", "raw", [50_000.0], rounds=[0])) is None, "no common round"
    assert compare(row("asgi", "uvicorn", []), row("asyncio", "raw", [50_000.0])) is None
    assert compare(row("asgi", "uvicorn", [40_000.0, 0.0]),
                   row("asyncio", "raw", [50_000.0, 50_000.0]))["us_added_max"] == (
        pytest.approx(5.0)), "a run with no RPS (0) is left out, not divided by"


def test_derive_compares_each_row_with_its_row_below() -> None:
    rows = [row("axum", "axum", [80_000.0]), row("asyncio", "raw", [100_000.0]),
            row("asgi", "bare", [80_000.0]), row("asgi", "uvicorn", [40_000.0]),
            row("starlette", "uvicorn", [20_000.0]), row("fastapi", "uvicorn", [10_000.0])]
    derived = {f"{r['layer']}/{r['server']}": r for r in load().derive(rows)}
    assert [r["below"] for r in derived.values()] == [
        None, None, "asyncio/raw", "asgi/bare", "asgi/uvicorn", "starlette/uvicorn"]
    assert derived["asgi/bare"]["us_added"] == pytest.approx(2.5)
    assert derived["fastapi/uvicorn"]["us_per_request"] == pytest.approx(100.0)
    assert derived["fastapi/uvicorn"]["pct_of_below"] == pytest.approx(50.0)
    assert derived["axum/axum"]["us_added"] is None and derived["axum/axum"]["noisy"] is False


def test_the_lessons_results_file_agrees() -> None:
    rows = json.loads(RESULTS.read_text())["rows"]
    named = {f"{r['layer']}/{r['server']}": r for r in rows}
    for mine, theirs in zip(load().derive(rows), rows, strict=True):
        where = (theirs["layer"], theirs["server"])
        assert mine["below"] == theirs["below"], where
        assert mine["us_per_request"] == pytest.approx(theirs["us_per_request"]), where
        below = named.get(theirs["below"]) if theirs["below"] else None
        expected = comparison_columns(theirs, below) if theirs["rps_median"] else {}
        if "rounds" in theirs:  # written with rounds: the file's own columns
            expected = {key: theirs[key] for key in (*load().COLUMNS, "noisy")}
        for key, value in expected.items():
            if key in mine:
                assert mine[key] == pytest.approx(value), (*where, key)
