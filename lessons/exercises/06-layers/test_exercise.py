"""Checks for exercise 6 (the derived columns of ``bench layers``). Run: ``make exercise N=6``.

Tests ``starter.py`` by default; ``EXERCISE_IMPL=solution`` tests the reference solution. The
last check recomputes the columns of the lesson's committed results file and compares them
with what ``bench layers`` wrote there.
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


def row(layer: str, server: str, rps: float | None) -> dict[str, Any]:
    return {"layer": layer, "server": server, "rps_median": rps}


# Round numbers so the expected values are easy to check by hand: 1e6 / 40_000 = 25 µs.
ROWS = [
    row("axum", "axum", 80_000.0),
    row("asyncio", "raw", 100_000.0),
    row("asgi", "uvicorn", 40_000.0),
    row("asgi", "toy-httptools", 50_000.0),
    row("starlette", "uvicorn", 25_000.0),
    row("fastapi", "uvicorn", 10_000.0),
]


def by_name(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"{r['layer']}/{r['server']}": r for r in load().derive(rows)}


def test_microseconds_per_request() -> None:
    derived = by_name(ROWS)
    assert derived["asyncio/raw"]["us_per_request"] == pytest.approx(10.0)
    assert derived["asgi/uvicorn"]["us_per_request"] == pytest.approx(25.0)
    assert derived["fastapi/uvicorn"]["us_per_request"] == pytest.approx(100.0)


def test_each_layer_is_compared_with_the_one_below() -> None:
    derived = by_name(ROWS)
    assert [derived[name]["below"] for name in derived] == [
        None, None, "asyncio/raw", "asyncio/raw", "asgi/uvicorn", "starlette/uvicorn"]
    assert derived["asgi/uvicorn"]["us_added"] == pytest.approx(15.0)
    assert derived["asgi/toy-httptools"]["us_added"] == pytest.approx(10.0)
    assert derived["starlette/uvicorn"]["us_added"] == pytest.approx(15.0)
    assert derived["fastapi/uvicorn"]["us_added"] == pytest.approx(60.0)
    assert derived["asgi/uvicorn"]["pct_of_below"] == pytest.approx(40.0)
    assert derived["fastapi/uvicorn"]["pct_of_below"] == pytest.approx(40.0)
    assert derived["axum/axum"]["us_added"] is None and derived["axum/axum"]["pct_of_below"] is None


def test_starlette_compares_with_the_asgi_row_of_its_own_server() -> None:
    rows = [row("asyncio", "raw", 100_000.0), row("asgi", "toy-httptools", 50_000.0),
            row("asgi", "uvicorn", 40_000.0), row("starlette", "uvicorn", 20_000.0)]
    derived = by_name(rows)
    assert derived["starlette/uvicorn"]["below"] == "asgi/uvicorn"
    assert derived["starlette/uvicorn"]["pct_of_below"] == pytest.approx(50.0)


def test_asgi_rows_compare_with_the_bare_row_and_bare_with_asyncio() -> None:
    rows = [row("asyncio", "raw", 100_000.0), row("asgi", "bare", 80_000.0),
            row("asgi", "uvicorn", 40_000.0), row("starlette", "uvicorn", 20_000.0)]
    derived = by_name(rows)
    assert derived["asgi/bare"]["below"] == "asyncio/raw"
    assert derived["asgi/bare"]["us_added"] == pytest.approx(2.5)
    assert derived["asgi/uvicorn"]["below"] == "asgi/bare"
    assert derived["asgi/uvicorn"]["us_added"] == pytest.approx(12.5)
    assert derived["asgi/uvicorn"]["pct_of_below"] == pytest.approx(50.0)
    assert derived["starlette/uvicorn"]["below"] == "asgi/uvicorn"


def test_a_failed_row_has_no_figures_and_leaves_the_row_above_without_a_comparison() -> None:
    rows = [row("asyncio", "raw", 100_000.0), row("asgi", "uvicorn", None),
            row("starlette", "uvicorn", 20_000.0)]
    derived = by_name(rows)
    assert derived["asgi/uvicorn"] == {"layer": "asgi", "server": "uvicorn",
                                       "us_per_request": None, "below": "asyncio/raw",
                                       "us_added": None, "pct_of_below": None}
    assert derived["starlette/uvicorn"]["us_per_request"] == pytest.approx(50.0)
    assert derived["starlette/uvicorn"]["us_added"] is None


def test_the_lessons_results_file_agrees() -> None:
    rows = json.loads(RESULTS.read_text())["rows"]
    for mine, theirs in zip(load().derive(rows), rows, strict=True):
        for key in ("us_per_request", "us_added", "pct_of_below", "below"):
            expected = theirs[key]
            if isinstance(expected, float):
                assert mine[key] == pytest.approx(expected), (theirs["layer"], key)
            else:
                assert mine[key] == expected, (theirs["layer"], theirs["server"], key)
