"""Cutting commands out of the lesson pages and running them as a student would.

A page's commands are written for a fresh clone after its setup step (``make venv``): they
call ``.venv/bin/python``, ``.venv/bin/toyserve`` and so on by path, on port 8000. The tests
run them from the repository's root with two substitutions (``localize``): ``.venv/bin/``
becomes the directory of the interpreter running the tests, and ``8000`` a free port.

- ``section``: the text of one ``## Title`` section of a page.
- ``blocks``: its fenced code blocks of one language, de-indented (tabs indent them).
- ``tabs``: the ``=== "name"`` tabs of a section, each with its command block and the
  expected-output block (```` ```text ````) that follows it, if any.
- ``started``: a page's one-line server command, running on a free port.
- ``run_tab``: a shell or Python block run to completion; its standard output.
- ``check_tabs``: every tab of a section run against a server, each checked against the
  output the page shows.
- ``check_server_section``: a section of one server command, one client block and the output
  it shows, run and compared.
- ``changed_lines``: the ``hl_lines`` a page must give a step listing that is an earlier step
  changed, so that the highlighted lines are the ones that differ, however the files change.
- ``same_output``: a page's expected output against what the command printed, with the
  parts that change from run to run (``Date`` values, curl's version) made equal.
"""

from __future__ import annotations

import ast
import difflib
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.process import ServerProcess, free_port

ROOT = Path(__file__).resolve().parent.parent.parent
BIN = Path(sys.executable).parent  # what .venv/bin/ is in a fresh clone


def section(page: Path, title: str) -> str:
    """The text of ``page``'s ``## <title>`` section (to the next one, or the end)."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", page.read_text(),
                      re.S | re.M)
    assert match, f"no '## {title}' section in {page.name}"
    return match.group(1)


def blocks(text: str, language: str) -> list[str]:
    """The fenced code blocks of ``language`` in ``text``, de-indented (tabs indent them)."""
    found = []
    for indent, body in re.findall(rf"^( *)```{language}\n(.*?)^\1```", text, re.S | re.M):
        found.append(dedent(body, len(indent)))
    return found


@dataclass
class Tab:
    """One ``=== "name"`` tab: its command block and the output the page says it prints."""

    name: str
    language: str  # "sh" or "python"
    code: str
    expected: str | None  # the ```text block after the code, if the page shows one


def tabs(text: str) -> dict[str, Tab]:
    """The content tabs in ``text`` by name (``curl``, ``httpx``, ``raw socket``)."""
    found = {}
    parts = re.split(r'^=== "([^"]+)"\n', text, flags=re.M)
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        fences = re.findall(r"^( *)```(\w+)[^\n]*\n(.*?)^\1```", body, re.S | re.M)
        code = [(lang, b) for _, lang, b in fences if lang in ("sh", "python")]
        assert code, f"tab {name!r} has no command"
        language, source = code[0]
        indent = re.match(r" *", source).group(0)  # type: ignore[union-attr]
        expected = [b for _, lang, b in fences if lang == "text"]
        found[name] = Tab(name, language, dedent(source, len(indent)),
                          dedent(expected[0], len(indent)) if expected else None)
    return found


def dedent(text: str, width: int) -> str:
    """``text`` without the first ``width`` characters of each line (blank lines kept)."""
    return "".join(line[width:] if line.strip() else "\n"
                   for line in text.splitlines(keepends=True))


def localize(command: str, port: int) -> str:
    """The command as a fresh clone would run it, on this test's port and interpreter."""
    return command.replace(".venv/bin/", f"{BIN}/").replace("8000", str(port))


@contextmanager
def started(command: str, env: dict[str, str] | None = None) -> Iterator[ServerProcess]:
    """Start the page's server command (one line, port 8000) on a free port."""
    port = free_port()
    argv = shlex.split(localize(command.strip(), port))
    while "=" in argv[0]:  # a leading VAR=value, as a shell takes it; the test's env wins
        name, _, value = argv.pop(0).partition("=")
        env = {name: value, **(env or {})}
    with ServerProcess(argv, port=port, cwd=ROOT, env=env) as server:
        yield server


def run_tab(language: str, code: str, port: int, returncode: int = 0,
            env: dict[str, str] | None = None) -> str:
    """Run a shell (``bash -e``) or Python block against ``port``; its standard output."""
    argv = ["bash", "-e", "-c"] if language == "sh" else [sys.executable, "-c"]
    result = subprocess.run([*argv, localize(code, port)], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, env=env)
    assert result.returncode == returncode, result.stdout + result.stderr
    return result.stdout


def check_tabs(text: str, port: int, slack: dict[str, str] | None = None) -> dict[str, str]:
    """Run every tab of ``text`` against ``port``; check each against its shown output.

    ``slack`` replaces text in the commands before they run: only a human-scale ``sleep``
    that lets one background curl connect before the next, lengthened so that a loaded CI
    machine, slow to start curl, keeps the order the page describes.
    """
    printed = {}
    for tab in tabs(text).values():
        code = tab.code
        for old, new in (slack or {}).items():
            code = code.replace(old, new)
        printed[tab.name] = out = run_tab(tab.language, code, port)
        if tab.expected is not None:
            same_output(tab.expected, out)
    return printed


def check_server_section(page: Path, title: str) -> None:
    """Run the section's server command, then its client block against it, and assert the
    client prints the ``text`` block the section shows (its only sh and text blocks)."""
    text = section(page, title)
    server_command, client = blocks(text, "sh")
    (shown,) = blocks(text, "text")
    with started(server_command) as server:
        same_output(shown, run_tab("sh", client, server.port))


_VARYING = [
    (re.compile(r"(?im)^(date: ).*$"), r"\1<date>"),
    (re.compile(r"curl/[\d.]+"), "curl/<version>"),
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:<port>"),
]


def normalize(text: str) -> str:
    """``text`` with what changes from run to run replaced, trailing spaces and CRs gone."""
    for pattern, replacement in _VARYING:
        text = pattern.sub(replacement, text)
    return "\n".join(line.rstrip("\r ") for line in text.strip("\n").splitlines())


def same_output(expected: str, printed: str) -> None:
    """Assert the page's expected output is what the command printed (see ``normalize``)."""
    assert normalize(printed) == normalize(expected), (
        f"the page shows:\n{expected}\nthe command printed:\n{printed}")


def changed_lines(old: Path, new: Path) -> str:
    """The lines of code in ``new`` that differ from ``old``, as an ``hl_lines`` value
    (``"3 7-9"``, 1-based, numbered as the page shows the file: pymdownx.snippets drops the
    section-marker lines): replaced or inserted lines, compared without indentation, not
    counting blank lines or the module docstring (which always differs)."""
    def shown(path: Path) -> list[str]:  # as the page shows it: snippets drops section markers
        return [line for line in path.read_text().splitlines()
                if not re.fullmatch(r"\s*# --8<-- \[(start|end):\w+\]\s*", line)]

    before = [line.strip() for line in shown(old)]
    after = shown(new)
    docstring_end = ast.parse(new.read_text()).body[0].end_lineno or 0  # before any marker
    matcher = difflib.SequenceMatcher(None, before, [line.strip() for line in after],
                                      autojunk=False)
    numbers = [j + 1 for tag, _, _, j1, j2 in matcher.get_opcodes() if tag != "equal"
               for j in range(j1, j2) if j + 1 > docstring_end and after[j].strip()]
    spans: list[list[int]] = []
    for number in numbers:
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    return " ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in spans)
