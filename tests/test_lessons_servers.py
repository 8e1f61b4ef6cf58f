"""Lesson 11 (servers under load): its commands run as printed, and its results are the ones
its commands wrote.

"Run it" starts ``lessons/code/11-servers/serve_servers_app.py`` (a throwaway redis-server
and uvicorn) and runs the page's curl and wrk lines against it; the ``bench`` commands the
page says made its tables must be the commands recorded in the committed results files; the
byte transcript "On the wire" shows is what the server sends (``UPDATE_TRANSCRIPTS=1``
rewrites it).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import sys

import jwt
import pytest

from apps import servers_app
from bench.process import ServerProcess, free_port
from tests.support import pages
from tests.support.pages import ROOT, blocks, run_tab, started
from tests.test_lessons import render, without_date

PAGE = ROOT / "lessons" / "11-servers-under-load.md"


def section(title: str) -> str:
    """The text of the page's ``## title`` section."""
    return pages.section(PAGE, title)


@pytest.mark.skipif(not all(shutil.which(t) for t in ("curl", "wrk", "redis-server")),
                    reason="needs curl, wrk and redis-server (make test installs them)")
def test_run_it_commands_run_as_printed() -> None:
    server_command, client = blocks(section("Run it"), "sh")
    with started(server_command) as server:
        out = run_tab("sh", client, server.port)
    lines = out.splitlines()
    assert lines[0] == "short body from bench"
    assert lines[1].strip() == "430000"
    assert lines[2].startswith('{"user":{"id":"1","username":"user1"')
    assert lines[3] == "401"
    assert "Requests/sec" in out and "Non-2xx" not in out


@pytest.mark.parametrize("name", ["servers", "load"])
def test_the_pages_bench_commands_made_its_results(name: str) -> None:
    """"The commands" prints what the committed results recorded, without the ``--output
    lessons/results/...`` that ``make lesson-results`` adds (a reader's run writes under
    ``results/``)."""
    commands = [shlex.split(line) for line in blocks(section("The commands"), "sh")[0]
                .splitlines() if line.startswith(f".venv/bin/bench {name} ")]
    assert len(commands) == 1
    data = json.loads((ROOT / "lessons" / "results" / name / "results.json").read_text())
    recorded = data["command"][1:]
    output = recorded.index("--output")
    assert recorded[output + 1] == f"lessons/results/{name}"
    assert recorded[:output] + recorded[output + 2:] == commands[0][1:]
    assert data["git"] is not None
    assert all(row["status"] in ("ok", "skipped") for row in data["rows"])


# --- the transcript on the page ------------------------------------------------------------------

TRANSCRIPT = ROOT / "lessons" / "transcripts" / "11-activities.txt"
#: A token that never changes (exp in 2100), so the transcript is stable; HS256 is deterministic.
FIXED_TOKEN_CLAIMS = {"sub": "user1", "exp": 4102444800}


def read_to_close(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.skipif(shutil.which("redis-server") is None,
                    reason="redis-server is not installed (make test installs it)")
def test_transcript_matches_what_the_server_sends() -> None:
    token = jwt.encode(FIXED_TOKEN_CLAIMS, servers_app.secret(), algorithm=servers_app.ALGORITHM)
    requests = [
        f"GET /api/activities HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        "Connection: close\r\n\r\n".encode(),
        b"GET /api/activities HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    ]
    port = free_port()
    argv = [sys.executable, str(ROOT / "lessons" / "code" / "11-servers" /
                                "serve_servers_app.py"), str(port)]
    parts: list[tuple[str, bytes]] = []
    with ServerProcess(argv, port=port, cwd=ROOT):
        for request in requests:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(request)
                parts += [("client", request), ("server", read_to_close(sock))]
    captured = render(parts)
    if os.environ.get("UPDATE_TRANSCRIPTS") == "1":
        TRANSCRIPT.write_text(captured)
    assert TRANSCRIPT.exists(), f"{TRANSCRIPT} is missing: run with UPDATE_TRANSCRIPTS=1"
    assert without_date(TRANSCRIPT.read_text()) == without_date(captured), (
        f"{TRANSCRIPT.name} is stale: rerun with UPDATE_TRANSCRIPTS=1 and review the diff")
