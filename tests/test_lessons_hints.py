"""Lesson 10's section on Early Hints and trailers: its transcript is current, its commands run.

- ``lessons/code/10-http2/hints_trailers.py`` runs against its own app on toy-httptools and
  its output must equal the committed ``lessons/transcripts/10-hints-trailers.txt``;
  regenerate with ``UPDATE_TRANSCRIPTS=1 pytest tests/test_lessons_hints.py``.
- The section's commands (the server, curl ``--raw`` and ``-v``, the script) run as printed
  and print what the page shows.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.support.pages import ROOT, blocks, run_tab, same_output, section, started

PAGE = ROOT / "lessons" / "10-http2.md"
SCRIPT = ROOT / "lessons" / "code" / "10-http2" / "hints_trailers.py"
TRANSCRIPT = ROOT / "lessons" / "transcripts" / "10-hints-trailers.txt"
TIMEOUT = 10.0


def test_transcript_matches_what_the_script_prints() -> None:
    server_command = blocks(section(PAGE, "Early Hints and trailers, on the wire"), "sh")[0]
    with started(server_command) as server:
        out = subprocess.run([sys.executable, str(SCRIPT), str(server.port)],
                             capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    if os.environ.get("UPDATE_TRANSCRIPTS") == "1":
        TRANSCRIPT.write_text(out.stdout)
    assert TRANSCRIPT.exists(), f"{TRANSCRIPT} is missing: run with UPDATE_TRANSCRIPTS=1"
    assert TRANSCRIPT.read_text() == out.stdout, (
        f"{TRANSCRIPT.name} is stale: rerun with UPDATE_TRANSCRIPTS=1 and review the diff")
    # the two 103s come first; the last chunk, then the trailer section, end the response
    assert out.stdout.count("HTTP/1.1 103 Early Hints") == 2
    assert out.stdout.index("103 Early Hints") < out.stdout.index("HTTP/1.1 200 OK")
    assert out.stdout.rstrip().endswith(
        "0\\r\\n\n    server-timing: app;dur=1.5\\r\\n\n    \\r\\n")


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_commands_run_as_printed() -> None:
    text = section(PAGE, "Early Hints and trailers, on the wire")
    server_command, curls, script = blocks(text, "sh")
    (shown,) = blocks(text, "text")[1:]  # the first text block is the transcript's snippet
    with started(server_command) as server:
        same_output(shown, run_tab("sh", curls, server.port))
        assert run_tab("sh", script, server.port) == TRANSCRIPT.read_text()
