"""The workshop kit (``lessons/workshop.md``): its commands run as printed, and its pins hold.

- ``make workshop-check`` ends with ``ready for the workshop``; the root-only commands
  (``sudo make workshop-tools``, ``sudo scripts/ensure-tools.sh ...``) install nothing that is
  missing after ``make test``'s own tool step (without ``sudo`` where the test runs as root
  and there is no sudo: a CI container).
- Offline: ``make wheelhouse`` here, then ``make venv OFFLINE=1`` and ``make workshop-check``
  in a copy of the repository with that wheelhouse and no ``.venv``, pip's index pointed at a
  closed port.
- ``constraints.txt`` pins every dependency ``pyproject.toml`` names (runtime and dev), and
  not the project itself, so ``make venv`` gives every student the same versions.
- The timetable adds up, with each exercise's minutes as its page gives them.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.support.pages import blocks, section

ROOT = Path(__file__).resolve().parent.parent


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


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


def test_timetable_adds_up_and_uses_each_pages_exercise_time() -> None:
    """Each day's clock times follow from the minutes column, every exercise is in a day or in
    a later lesson's session table, and its minutes are the ones its lesson page gives
    (``**Exercise 6: ...** (20 minutes)``)."""
    lessons = ROOT / "lessons"
    on_pages = {}
    for page in [*lessons.glob("0*.md"), *lessons.glob("1*.md")]:
        timed = re.findall(r"\*\*Exercise (\w+): [^*]+\*\* \((\d+) minutes\)",
                           page.read_text())
        if re.search(r"^## Exercises?$", page.read_text(), re.MULTILINE):
            assert timed, f"{page.name}: its exercise gives no '**Exercise N: ...** (M minutes)'"
        for number, minutes in timed:
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


# --- the page's commands, as printed -------------------------------------------------------------

PAGE = ROOT / "lessons" / "workshop.md"


def as_root(command: str) -> str:
    """The page's ``sudo ...`` as this machine runs it: as printed, or without ``sudo`` where
    this test already runs as root on a machine without sudo (a CI container)."""
    if command.startswith("sudo ") and os.geteuid() == 0 and shutil.which("sudo") is None:
        return command.removeprefix("sudo ")
    return command


def run_block(block: str, cwd: Path, timeout: float, env: dict[str, str] | None = None) -> str:
    """Run each line of a page's block in ``bash -e`` from ``cwd``; their output. On a
    timeout the whole process group goes (make, pip or apt-get under bash, not bash alone)."""
    script = "\n".join(as_root(line) for line in block.splitlines())
    with subprocess.Popen(["bash", "-e", "-c", script], cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True,
                          env={**os.environ, **(env or {})}) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
    assert process.returncode == 0, f"{block}\n{stdout}\n{stderr}"
    return stdout


def copy_of_the_checkout(to: Path) -> Path:
    """The files git tracks (and untracked ones it does not ignore), copied to ``to``, as a
    fresh clone would hold them."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.splitlines()
    for name in files:
        if (ROOT / name).is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, to / name)
    return to


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_setup_commands_run_as_printed() -> None:
    (check,) = blocks(section(PAGE, "Setup, for every student (no root)"), "sh")
    assert "ready for the workshop" in run_block(check, ROOT, timeout=120)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.skipif(os.geteuid() != 0, reason="root only, as the page says (sudo would ask)")
@pytest.mark.timeout(1260)
def test_root_only_commands_run_as_printed() -> None:
    """Each installs what is missing; on a machine where ``make test`` ran, nothing is."""
    (tools,) = blocks(section(PAGE, "Setup that needs root: the tools"), "sh")
    (lessons_10_11,) = blocks(section(PAGE, "Timetable: two full days"), "sh")
    for block in (tools, lessons_10_11):
        run_block(block, ROOT, timeout=600)
    for tool in ("wrk", "curl", "chromium", "h2load", "redis-server"):
        assert shutil.which(tool), tool


def venv_is_current() -> bool:
    """The checkout's ``.venv`` was made by make and is newer than what it is made from, so a
    make target run through a link to it installs nothing (and repoints nothing)."""
    stamp = ROOT / ".venv" / ".installed-stamp"
    return stamp.exists() and all(stamp.stat().st_mtime >= (ROOT / name).stat().st_mtime
                                  for name in ("pyproject.toml", "constraints.txt"))


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.skipif(not venv_is_current(),
                    reason="needs the checkout's .venv made by make and current (make test)")
@pytest.mark.timeout(820)
def test_offline_setup_runs_as_printed_with_no_index_reachable(tmp_path: Path) -> None:
    """The teacher's ``make wheelhouse`` in a copy of the checkout (so no wheelhouse/ is left
    in it), then the students' two commands in a second copy holding that wheelhouse and no
    ``.venv``, with pip's index pointed at a closed port: any download would fail the
    install. The copies, about 1 GB with the new venv, are removed at the end."""
    text = section(PAGE, "Offline: a classroom without internet")
    prepare, student = blocks(text, "sh")
    try:
        teacher = copy_of_the_checkout(tmp_path / "teacher")
        (teacher / ".venv").symlink_to(ROOT / ".venv")  # make's stamp is current: no install
        run_block(prepare, teacher, timeout=300)
        classroom = copy_of_the_checkout(tmp_path / "classroom")
        shutil.copytree(teacher / "wheelhouse", classroom / "wheelhouse")
        out = run_block(student, classroom, timeout=500, env={
            "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_NO_CACHE_DIR": "1"})
        assert "--no-index --find-links wheelhouse" in out and "ready for the workshop" in out
        assert (classroom / ".venv" / "bin" / "toyserve").exists()
    finally:
        for copy in ("teacher", "classroom"):
            shutil.rmtree(tmp_path / copy, ignore_errors=True)
