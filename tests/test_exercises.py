"""Each workshop exercise's test passes on its solution and fails on its starter.

``make exercise N=<n>`` runs ``lessons/exercises/<nn>-*/test_exercise.py`` against the starter,
where the student fills the gap. This proves the test can tell the two apart: it runs in a
subprocess with ``EXERCISE_IMPL=solution`` (must pass) and ``EXERCISE_IMPL=starter`` (must
report failing tests, not crash in collection).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = sorted(p.parent for p in (ROOT / "lessons" / "exercises").glob("*/test_exercise.py"))


def run_exercise(directory: Path, impl: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(directory)],
        cwd=ROOT, env={**os.environ, "EXERCISE_IMPL": impl}, capture_output=True, text=True,
        timeout=120,
    )


def test_there_is_an_exercise_per_written_lesson() -> None:
    names = [p.name for p in EXERCISES]
    assert len(names) >= 3, names
    assert all(re.match(r"\d\d[a-z]?-", n) for n in names), names
    # numbered as their pages (03b-event-loop sits between 3 and 4; a lesson still being
    # written on its own branch leaves a gap in both)
    pages = [p.name for p in (ROOT / "lessons").glob("*.md") if re.match(r"\d\d[a-z]?-", p.name)]
    assert sorted(n.split("-")[0] for n in names) == sorted(p.split("-")[0] for p in pages), (
        names, pages)
    for directory in EXERCISES:
        assert (directory / "starter.py").is_file() and (directory / "solution.py").is_file()


@pytest.mark.parametrize("directory", EXERCISES, ids=[p.name for p in EXERCISES])
def test_solution_passes(directory: Path) -> None:
    result = run_exercise(directory, "solution")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("directory", EXERCISES, ids=[p.name for p in EXERCISES])
def test_starter_fails_with_failing_tests(directory: Path) -> None:
    result = run_exercise(directory, "starter")
    assert result.returncode == 1, result.stdout + result.stderr  # 1: tests ran and failed
    assert "NotImplementedError" in result.stdout, "the failures should point at the gap"


def test_make_exercise_prints_one_line_per_failing_check() -> None:
    # what `make exercise N=1` runs: its pytest options come from the Makefile's
    # PYTEST_ADDOPTS for that target, read here instead of running make (which would build
    # .venv first)
    makefile = (ROOT / "Makefile").read_text()
    addopts = makefile.split("exercise: export PYTEST_ADDOPTS := ", 1)[1].splitlines()[0]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", str(ROOT / "lessons/exercises/01-bytes"),
         "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "EXERCISE_IMPL": "starter", "PYTEST_ADDOPTS": addopts})
    lines = result.stdout.splitlines()
    failing = [line for line in lines if ": " in line and line.startswith("test_")]
    assert result.returncode == 1 and len(failing) >= 10, result.stdout
    assert len(lines) <= len(failing) + 5, result.stdout  # no tracebacks around them
    assert ("test_two_chunks: NotImplementedError: exercise 1: decode the chunked body in "
            "read_chunked()") in lines
