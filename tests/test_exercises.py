"""Each workshop exercise's test passes on its solution, fails on its starter, and fails a
plausible wrong answer with a hint.

``make exercise N=<n>`` runs ``lessons/exercises/<nn>-*/test_exercise.py`` against the starter,
where the student fills the gap. This proves the test can tell them apart: it runs in a
subprocess with ``EXERCISE_IMPL=solution`` (must pass), ``EXERCISE_IMPL=starter`` (must
report failing tests, not crash in collection) and ``EXERCISE_IMPL=wrong``: ``wrong.py`` is
the starter with its gap filled the way a student who skipped the thinking would fill it, and
its docstring's ``Fails:`` lines are what ``make exercise`` must print for it, so the student
who writes that answer reads why it is wrong.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = sorted(p.parent for p in (ROOT / "lessons" / "exercises").glob("*/test_exercise.py"))


def make_exercise_options() -> str:
    """The pytest options ``make exercise`` runs with (the Makefile's PYTEST_ADDOPTS for that
    target), read here instead of running make (which would build .venv first)."""
    makefile = (ROOT / "Makefile").read_text()
    return makefile.split("exercise: export PYTEST_ADDOPTS := ", 1)[1].splitlines()[0]


def run_exercise(directory: Path, impl: str, *, as_make_does: bool = False
                 ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EXERCISE_IMPL": impl}
    if as_make_does:
        env["PYTEST_ADDOPTS"] = make_exercise_options()
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(directory)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
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
        for name in ("starter.py", "solution.py", "wrong.py"):
            assert (directory / name).is_file(), directory / name


@pytest.mark.parametrize("directory", EXERCISES, ids=[p.name for p in EXERCISES])
def test_solution_passes(directory: Path) -> None:
    result = run_exercise(directory, "solution")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("directory", EXERCISES, ids=[p.name for p in EXERCISES])
def test_starter_fails_with_failing_tests(directory: Path) -> None:
    result = run_exercise(directory, "starter")
    assert result.returncode == 1, result.stdout + result.stderr  # 1: tests ran and failed
    assert "NotImplementedError" in result.stdout, "the failures should point at the gap"


SECTION = re.compile(r"# --8<-- \[start:exercise\]\n.*?# --8<-- \[end:exercise\]", re.S)


def outside_the_gap(path: Path) -> str:
    """``path``'s text without its module docstring and its ``exercise`` section(s)."""
    text = path.read_text()
    docstring = ast.parse(text).body[0]
    assert isinstance(docstring, ast.Expr), f"{path} opens with no docstring"
    rest = "".join(text.splitlines(keepends=True)[docstring.end_lineno:])
    return SECTION.sub("<gap>", rest)


@pytest.mark.parametrize("directory", EXERCISES, ids=[p.name for p in EXERCISES])
def test_the_wrong_answer_is_the_starter_with_its_gap_filled(directory: Path) -> None:
    assert outside_the_gap(directory / "wrong.py") == outside_the_gap(directory / "starter.py")


@pytest.mark.parametrize("directory", EXERCISES, ids=[p.name for p in EXERCISES])
def test_a_plausible_wrong_answer_fails_with_its_hint(directory: Path) -> None:
    expected = re.findall(r"^Fails: (.+)$", (directory / "wrong.py").read_text(), re.M)
    assert expected, "wrong.py's docstring names no 'Fails: <check>: <hint>' line"
    result = run_exercise(directory, "wrong", as_make_does=True)
    assert result.returncode == 1, result.stdout + result.stderr  # checks ran, some failed
    assert "NotImplementedError" not in result.stdout, "wrong.py must fill the gap"
    lines = result.stdout.splitlines()
    for hint in expected:
        assert any(line.startswith(hint) for line in lines), (hint, result.stdout)


def test_make_exercise_prints_one_line_per_failing_check() -> None:
    result = run_exercise(ROOT / "lessons/exercises/01-bytes", "starter", as_make_does=True)
    lines = result.stdout.splitlines()
    failing = [line for line in lines if ": " in line and line.startswith("test_")]
    assert result.returncode == 1 and len(failing) >= 10, result.stdout
    assert len(lines) <= len(failing) + 5, result.stdout  # no tracebacks around them
    assert ("test_two_chunks: NotImplementedError: exercise 1: decode the chunked body in "
            "read_chunked()") in lines
