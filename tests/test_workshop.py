"""The workshop kit: ``make workshop-check`` passes here, and the offline install is wired.

- ``scripts/workshop_check.py`` (what ``make workshop-check`` runs) reports every check ok.
- ``constraints.txt`` pins every dependency ``pyproject.toml`` names (runtime and dev), and
  not the project itself, so ``make venv`` gives every student the same versions.
- ``make -n venv OFFLINE=1`` installs from ``wheelhouse/`` only, with the pins.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_workshop_check_passes() -> None:
    result = subprocess.run([sys.executable, "scripts/workshop_check.py"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAIL" not in result.stdout and "ready for the workshop" in result.stdout


def test_constraints_pin_every_dependency_but_the_project() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        name, sep, version = line.partition("==")
        assert sep and version, f"not an exact pin: {line!r}"
        pins[canonical(name)] = version
    assert "toyservers" not in pins
    for spec in map(Requirement, wanted):
        if spec.marker is not None and not spec.marker.evaluate():
            continue
        name = canonical(spec.name)
        assert name in pins, f"{name} is not pinned: run make constraints"
        assert spec.specifier.contains(pins[name], prereleases=True), (
            f"{name}=={pins[name]} does not satisfy {spec}: run make constraints")


def test_offline_venv_installs_from_the_wheelhouse_with_the_pins() -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    result = subprocess.run(["make", "-n", "-B", "venv", "OFFLINE=1"], cwd=ROOT,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    install = [line for line in result.stdout.splitlines() if "pip install" in line]
    assert install == [".venv/bin/python -m pip install -q --no-index --find-links wheelhouse "
                       "-c constraints.txt -e '.[dev]'"], result.stdout


def test_timetable_adds_up_and_uses_each_pages_exercise_time() -> None:
    """Each day's clock times follow from the minutes column, every exercise is in a day or in
    a later lesson's session table, and its minutes are the ones its lesson page gives
    (``**Exercise 6: ...** (20 minutes)``)."""
    lessons = ROOT / "lessons"
    on_pages = {}
    for page in [*lessons.glob("0*.md"), *lessons.glob("1*.md")]:
        for number, minutes in re.findall(r"\*\*Exercise (\w+): [^*]+\*\* \((\d+) minutes\)",
                                          page.read_text()):
            on_pages[number] = int(minutes)
    assert {"1", "3b", "6", "10", "12"} <= set(on_pages), on_pages
    guide = (lessons / "workshop.md").read_text()
    days = re.findall(r"^### Day .*?\n\n(\|.*?)\n\n", guide, re.MULTILINE | re.DOTALL)
    assert len(days) == 2, "two full days"
    seen = set()
    for table in days:
        rows = re.findall(r"^\| (\d\d):(\d\d) \| (\d+) \| (.*?) \|$", table, re.MULTILINE)
        assert len(rows) >= 10, table
        clock = int(rows[0][0]) * 60 + int(rows[0][1])
        for hours, mins, minutes, block in rows:
            assert int(hours) * 60 + int(mins) == clock, f"{hours}:{mins} {block}: off"
            clock += int(minutes)
            exercise = re.match(r"Exercise (\w+):", block)
            if exercise and exercise.group(1) in on_pages:
                seen.add(exercise.group(1))
                assert int(minutes) == on_pages[exercise.group(1)], (
                    f"{block}: {minutes} min here, {on_pages[exercise.group(1)]} on its page")
        assert clock >= 16 * 60 + 30, "a full day"
    # lessons past the two days have a session table of their own: | Exercise 9 | 20 | ... |
    for number, minutes in re.findall(r"^\| Exercise (\w+) \| (\d+) \|", guide, re.MULTILINE):
        if number in on_pages:
            seen.add(number)
            assert int(minutes) == on_pages[number], (
                f"Exercise {number}: {minutes} min in its session table,"
                f" {on_pages[number]} on its page")
    assert seen == set(on_pages), f"exercises missing from the timetable: {set(on_pages) - seen}"
