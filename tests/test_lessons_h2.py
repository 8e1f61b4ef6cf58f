"""Lesson 10 (HTTP/2): its step server answers over h2c, and its frame transcript is current.

- ``lessons/code/10-http2/step1_server.py`` runs as a subprocess; httpx (HTTP/2 only, prior
  knowledge) and curl (``--http2-prior-knowledge``, the page's command) talk to it; a body
  bigger than the 65,535-byte initial window goes through both ways, so flow control works.
- ``lessons/code/10-http2/frames.py`` runs against it and its output must equal the committed
  ``lessons/transcripts/10-h2-frames.txt``; regenerate with ``UPDATE_TRANSCRIPTS=1 pytest
  tests/test_lessons_h2.py``.
- The page's numbers come from ``lessons/results/h2``, a committed ``bench h2`` run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bench.process import ServerProcess, free_port
from tests.support.pages import blocks, run_tab, same_output, section, started, tabs

ROOT = Path(__file__).resolve().parent.parent
CODE = ROOT / "lessons" / "code" / "10-http2"
TRANSCRIPT = ROOT / "lessons" / "transcripts" / "10-h2-frames.txt"
PAGE = ROOT / "lessons" / "10-http2.md"
TIMEOUT = 10.0


def step_server() -> ServerProcess:
    port = free_port()
    return ServerProcess([sys.executable, str(CODE / "step1_server.py"), str(port)], port=port,
                         cwd=ROOT)


def test_step1_server_speaks_http2_with_prior_knowledge() -> None:
    with step_server() as server, httpx.Client(http1=False, http2=True,
                                                timeout=TIMEOUT) as client:
        hello = client.get(f"http://127.0.0.1:{server.port}/")
        assert hello.http_version == "HTTP/2" and hello.text == "hello over HTTP/2\n"
        body = os.urandom(300_000)  # > the initial window: needs WINDOW_UPDATEs both ways
        echoed = client.post(f"http://127.0.0.1:{server.port}/echo", content=body)
        assert echoed.status_code == 200 and echoed.content == body
        assert client.get(f"http://127.0.0.1:{server.port}/nope").status_code == 404


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_run_it_commands_run_as_printed() -> None:
    text = section(PAGE, "Run it")
    head, tail = text.split("===", 1)[0], text.split("toy-h2 also takes", 1)[1]
    (step1,), (toy_h2, upgrade), (shown,) = blocks(head, "sh"), blocks(tail, "sh"), \
        blocks(tail, "text")
    run_it = tabs(text)  # the last tab's text runs to the end: use only its code
    with started(step1) as server:
        same_output(run_it["curl"].expected or "", run_tab("sh", run_it["curl"].code, server.port))
        assert run_tab("python", run_it["httpx"].code, server.port) == "HTTP/2 300000\n"
        assert run_tab("sh", run_it["frames"].code, server.port) == TRANSCRIPT.read_text()
    with started(toy_h2) as server:
        same_output(shown, run_tab("sh", upgrade, server.port))  # upgraded: HTTP/2


def test_frame_transcript_matches_what_frames_py_prints() -> None:
    with step_server() as server:
        out = subprocess.run([sys.executable, str(CODE / "frames.py"), str(server.port)],
                             capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    captured = out.stdout
    if os.environ.get("UPDATE_TRANSCRIPTS") == "1":
        TRANSCRIPT.write_text(captured)
    assert TRANSCRIPT.exists(), f"{TRANSCRIPT} is missing: run with UPDATE_TRANSCRIPTS=1"
    assert TRANSCRIPT.read_text() == captured, (
        f"{TRANSCRIPT.name} is stale: rerun with UPDATE_TRANSCRIPTS=1 and review the diff")
    assert "HEADERS       stream=3" in captured and "GOAWAY" in captured


def test_the_pages_figures_come_from_the_committed_results() -> None:
    text = PAGE.read_text()
    assert '--8<-- "lessons/results/h2/results.md"' in text and "results/h2/h2.png" in text
    data = json.loads((ROOT / "lessons" / "results" / "h2" / "results.json").read_text())
    assert data["experiment"] == "h2" and data["rows"]
    assert "bench h2" in " ".join(data["command"])
    # no hand-typed throughput on the page: figures with "requests/s" or "req/s" are banned
    assert not re.search(r"\d[\d,.]*\s*(requests/s|req/s|RPS)", text), "a typed figure"
