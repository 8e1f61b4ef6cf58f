"""Checks for exercise 12 (predict the bench workers table). Run: ``make exercise N=12``.

Tests ``starter.py`` by default; ``EXERCISE_IMPL=solution`` tests the reference solution. The
last check recomputes the predicted column of the lesson's committed results file from the
inputs it records (fib(25)'s CPU time, the delay, the cores) and compares.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

IMPL = os.environ.get("EXERCISE_IMPL", "starter")
PATH = Path(__file__).with_name(f"{IMPL}.py")
RESULTS = Path(__file__).resolve().parents[2] / "results" / "workers" / "results.json"


def load() -> ModuleType:
    """Import ``starter.py`` or ``solution.py`` from this directory as a fresh module."""
    spec = importlib.util.spec_from_file_location(f"exercise_12_{IMPL}", PATH)
    assert spec is not None and spec.loader is not None, f"cannot import {PATH}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# Round numbers: c = 20 ms of CPU, d = 180 ms of waiting, so c + d = 0.2 s. The last column
# is what the failure message says: the reasoning that gives the expected figure.
CASES = [
    ("sync", 4, 10, 2, 4 / 0.2, "four requests in flight (one per sync worker), each 0.2 s"),
    ("sync", 4, 2, 2, 2 / 0.2, "only two connections, so only two requests in flight"),
    ("gthread", 4, 10, 2, 10 / 0.2, "16 threads but 10 connections: 10 in flight, 50 RPS, "
     "under the 2 cores' 2 / c = 100"),
    ("gthread", 1, 10, 2, 4 / 0.2, "one worker of 4 threads: 4 in flight"),
    ("gevent", 4, 100, 2, 2 / 0.02, "100 in flight would be 500 RPS, but each process "
     "computes on one core at a time and 2 cores give 2 / c = 100"),
    ("async", 1, 100, 2, 1 / 0.02, "one process computes on one core at a time: 1 / c"),
    ("async", 4, 100, 1, 1 / 0.02, "four processes on one core compute on one: 1 / c"),
]


@pytest.mark.parametrize(("model", "workers", "connections", "cores", "expected", "why"), CASES,
                         ids=[f"{m}-{w}w-{n}c-{k}cores" for m, w, n, k, _, _ in CASES])
def test_predict(model: str, workers: int, connections: int, cores: int,
                 expected: float, why: str) -> None:
    got = load().predict(model, workers=workers, threads=4, connections=connections,
                         cpu_s=0.02, wait_s=0.18, cores=cores)
    assert math.isclose(got, expected), (
        f"{model}, {workers} worker(s), {connections} connections, {cores} core(s): got "
        f"{got:g}, expected {expected:g}: {why}")


def test_predict_agrees_with_the_committed_results() -> None:
    data = json.loads(RESULTS.read_text())
    p, s = data["prediction"], data["settings"]
    predict = load().predict
    for row in data["rows"]:
        got = predict(row["model"], workers=row["workers"], threads=s["worker_threads"],
                      connections=row["connections"], cpu_s=p["cpu_s"], wait_s=p["wait_s"],
                      cores=p["cores"])
        assert math.isclose(got, row["predicted_rps"]), (row["row"], row["connections"], got)
