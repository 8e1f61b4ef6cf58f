"""The "Test your own server" page: its commands run as printed, and print what it shows.

Each ``sh`` block of ``lessons/test-your-own-server.md`` is a pytest run with ``--own-server``
(``tests/support/own_server.py``) against a lesson's step server. It runs here as printed,
from the repository's root with ``.venv/bin/`` swapped for this interpreter's folder
(``tests.support.pages``), in a pytest of its own. What the page shows after it must be what
it printed: the summary line (its time aside), or, where the page trims the output, each line
it shows. The fix the page makes (step 6) must change exactly the outcomes the page names.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.support.pages import ROOT, blocks, localize, section
from tests.test_h2spec import H2SPEC
from tests.test_lessons import LESSONS

pytestmark = pytest.mark.slow  # each test runs one or two of the page's pytest runs: 5-25 s

PAGE = LESSONS / "test-your-own-server.md"
RUN_TIMEOUT = 120  # seconds one of the page's pytest runs may take (the corpus: about 10)
#: The cases the page says step 6's fix turns from failing to passing.
FIXED = {"field_nul_in_value", "field_bare_cr_in_value", "field_bare_lf", "field_ctl_in_value",
         "field_del_in_value", "te_vertical_tab"}


def run(command: str) -> str:
    """Run one of the page's commands as printed (a pytest run: exit status 0 or 1, for
    failing tests); its output."""
    done = subprocess.run(["bash", "-c", localize(command, 0)], cwd=ROOT, capture_output=True,
                          text=True, timeout=RUN_TIMEOUT)
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 2+: usage or internal error
    return done.stdout


def without_time(line: str) -> str:
    """A pytest summary line without its duration (``in 7.68s`` -> ``in <time>``)."""
    return re.sub(r" in [\d.]+s( \([\d:]+\))?$", " in <time>", line.strip())


def shows(printed: str, shown: str) -> None:
    """Each line the page shows is a line the command printed (durations aside)."""
    lines = {without_time(line) for line in printed.splitlines()}
    for line in shown.strip().splitlines():
        assert without_time(line) in lines, f"the page shows {line!r}; the run printed:\n{printed}"


def failed(printed: str) -> set[str]:
    """The corpus case (or test) names of the FAILED lines of pytest's short summary."""
    return {m.group(1) or m.group(2) for m in
            re.finditer(r"^FAILED \S+::\w+\[own-(\w+)\]|^FAILED \S+::(\w+)\[own\]", printed,
                        re.M)}


def test_hostile_corpus_commands_run_as_printed() -> None:
    text = section(PAGE, "The hostile corpus")
    whole, one = blocks(text, "sh")
    summary, trimmed = blocks(text, "text")
    printed = run(whole)
    assert without_time(printed.strip().splitlines()[-1]) == without_time(summary)
    shows(run(one), trimmed)


def test_fix_one_changes_the_outcomes_the_page_names() -> None:
    (before,) = blocks(section(PAGE, "The hostile corpus"), "sh")[:1]
    (after,) = blocks(section(PAGE, "Fix one"), "sh")
    (summary,) = blocks(section(PAGE, "Fix one"), "text")
    failing_before = failed(run(before))
    printed = run(after)
    assert without_time(printed.strip().splitlines()[-1]) == without_time(summary)
    failing_after = failed(printed)
    assert failing_before - failing_after == FIXED
    assert failing_after <= failing_before, "the fix broke something that passed"
    assert all(name in PAGE.read_text() for name in ("te_vertical_tab", "field_"))


def test_conformance_suite_command_runs_as_printed() -> None:
    text = section(PAGE, "The conformance suite")
    (command,) = blocks(text, "sh")
    (summary,) = blocks(text, "text")
    printed = run(command)
    assert without_time(printed.strip().splitlines()[-1]) == without_time(summary)


@pytest.mark.skipif(H2SPEC is None, reason="h2spec is not installed: make h2spec (needs Go)")
def test_h2spec_commands_run_as_printed() -> None:
    text = section(PAGE, "h2spec")
    commands, shown = blocks(text, "sh"), blocks(text, "text")
    assert len(commands) == len(shown) == 2
    for command, lines in zip(commands, shown, strict=True):
        shows(run(command), lines)
