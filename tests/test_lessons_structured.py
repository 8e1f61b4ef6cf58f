"""Lesson 9 (structured concurrency): its step programs run, behave alike on every I/O model,
and the page's "Run it" commands run as printed.

- Each step under ``lessons/code/09-structured-concurrency/`` is started on a free port (the
  anyio ones on asyncio and on trio) and put through the same checks: keep-alive, pipelining
  in order while the app is slow, chunked bodies, h11's 400, the idle deadline, a slow
  request that does not hold a fast one back, and the bytes of the page's transcript.
- A client that leaves while the app runs: steps 1 and 3 cancel the app (their log says so).
- Concurrency is read from the kernel's state, never from timing
  (``tests.test_lessons.slow_state_when_fast_is_done``); every wait polls with a deadline.
- The commands of the page's "Run it" section are cut out of
  ``lessons/09-structured-concurrency.md`` and run with the port and ``.venv/bin/`` swapped
  for this test's (``tests.test_lessons_wsgi_server``).
"""

from __future__ import annotations

import re
import shutil
import sys

import httpx
import pytest

from bench.process import ServerProcess, free_port
from tests.test_lessons import (
    CODE,
    LESSONS,
    ROOT,
    TIMEOUT,
    TRANSCRIPT_CASES,
    connect,
    exchange,
    read_response,
    read_to_close,
    render,
    slow_state_when_fast_is_done,
    split,
    wait_for_log,
    without_date,
)
from tests.test_lessons_wsgi_server import blocks, run_tab, started

PAGE = LESSONS / "09-structured-concurrency.md"
STEPS = "09-structured-concurrency"
TRANSCRIPT = "09-anyio-keepalive.txt"
ENV = {"SLOW_SECONDS": "1", "IDLE_SECONDS": "0.5"}


def start(name: str, backend: str | None, env: dict[str, str]) -> ServerProcess:
    """``lessons/code/09-structured-concurrency/<name> PORT [backend]``, not yet started."""
    port = free_port()
    argv = [sys.executable, str(CODE / STEPS / name), str(port), *([backend] if backend else [])]
    return ServerProcess(argv, port=port, cwd=ROOT, env=env)


def check_the_same_server(server: ServerProcess) -> None:
    """What every step does alike: the I/O model changes, the bytes on the wire do not."""
    answer = httpx.post(f"{server.url}/x?y=1", content=b"hello", timeout=TIMEOUT)
    assert (answer.status_code, answer.text) == (200, "POST /x?y=1: 5 bytes\n")
    with connect(server) as sock:
        sock.sendall(b"PUT /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        assert split(read_response(sock))[2] == b"PUT /a: 5 bytes\n"
        # pipelined behind a slow app: the second request waits, the answers keep their order
        sock.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"GET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        tail = read_to_close(sock)
    assert tail.startswith(b"HTTP/1.1 200 OK") and tail.count(b"HTTP/1.1 200 OK") == 2
    assert tail.index(b"GET /slow: 0 bytes\n") < tail.index(b"GET /next: 0 bytes\n")
    assert b"Connection: close" in tail
    assert split(exchange(server, b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n"))[0] == 400
    assert split(exchange(server, b"GET / HTTP/1.0\r\n\r\n"))[1]["connection"] == "close"
    with connect(server) as sock:  # idle past IDLE_SECONDS: the server closes
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert split(read_response(sock))[0] == 200
        assert sock.recv(65536) == b""
    assert slow_state_when_fast_is_done(server) == "pending"
    relpath, script = TRANSCRIPT_CASES[TRANSCRIPT]
    expected = (ROOT / "lessons" / "transcripts" / TRANSCRIPT).read_text()
    assert without_date(render(script(server))) == without_date(expected)


def leave_during_slow(server: ServerProcess) -> None:
    """Ask for /slow and hang up before the answer; the app must be cancelled."""
    with connect(server) as sock:
        sock.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
    wait_for_log(server, "cancelled GET /slow: the client left")


CASES = [("step1_protocol.py", None), ("step2_anyio.py", "trio"),
         ("step3_task_group.py", "asyncio"), ("step3_task_group.py", "trio")]


@pytest.mark.parametrize(("name", "backend"), CASES, ids=[f"{n[:5]}-{b}" for n, b in CASES])
def test_every_step_is_the_same_server(name: str, backend: str | None) -> None:
    with start(name, backend, ENV) as server:
        check_the_same_server(server)
        if backend is not None:
            assert f"running on {backend}" in server.log_tail(5)


@pytest.mark.parametrize(("name", "backend"), [CASES[0], CASES[3]], ids=["step1", "step3-trio"])
def test_a_client_that_leaves_cancels_its_app(name: str, backend: str | None) -> None:
    # with a minute to wait, the line can only come from a cancellation
    with start(name, backend, {"SLOW_SECONDS": "60"}) as server:
        leave_during_slow(server)


def test_the_page_includes_the_transcript() -> None:
    assert f'--8<-- "lessons/transcripts/{TRANSCRIPT}"' in PAGE.read_text()


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_run_it_commands_run_as_printed() -> None:
    match = re.search(r"^## Run it\n(.*?)(?=^## |\Z)", PAGE.read_text(), re.S | re.M)
    assert match, f"no '## Run it' section in {PAGE.name}"
    server_command, curl, step3_command, step3_curl = blocks(match.group(1), "sh")
    httpx_tab, raw_tab = blocks(match.group(1), "python")
    assert server_command.strip().endswith(" trio")
    with started(server_command, env={"SLOW_SECONDS": "1.5"}) as server:
        wait_for_log(server, "running on trio")
        out = run_tab("sh", curl, server.port)
        assert out.splitlines() == ["POST /echo: 5 bytes", "POST /chunked: 3 bytes",
                                    "GET /again: 0 bytes", "GET /slow: 0 bytes"]
        out = run_tab("python", httpx_tab, server.port)
        assert out.splitlines() == [f"POST /users/{i}: {i} bytes" for i in range(3)]
        out = run_tab("python", raw_tab, server.port)
        assert out.count("HTTP/1.1 200 OK") == 2
        assert out.index("GET /slow: 0 bytes") < out.index("GET /next: 0 bytes")
    with started(step3_command, env={"SLOW_SECONDS": "60"}) as server:
        assert run_tab("sh", step3_curl, server.port) == "curl gave up\n"
        wait_for_log(server, "cancelled GET /slow: the client left")
