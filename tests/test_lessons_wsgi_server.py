"""Lesson 7 (a WSGI server): its step programs run, show the problems they say, and the page's
"Run it" commands run as printed.

- Each step under ``lessons/code/07-wsgi-server/`` is started on a free port
  (``tests.test_lessons.step``) and sent real requests: raw sockets where the lesson is about
  connections and threads, httpx for the rest.
- The concurrency claims are read from the kernel's state, never from timing: when the fast
  (or the new) client's answer is complete, is the slow answer already in our socket buffer,
  or the idle connection already closed? That cannot race (see
  ``tests.test_lessons.slow_state_when_fast_is_done``).
- The ramp: step 3b puts back a deadline, a limit and flow control's bound, each with the
  hostile client that motivates it (``tests/support/hostile_clients.py``), run against step 3,
  which it defeats, and step 3b, which bounds it.
- The commands of the page's "Run it" section, and the toy-wsgi command, are cut out of
  ``lessons/07-wsgi-server.md`` and run with the port and ``.venv/bin/`` swapped for this
  test's (``tests.support.pages``): the page cannot print a command that no longer works.
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx
import pytest

from apps.user import SAMPLE_BODY
from bench.process import ServerProcess, free_port
from tests.support import pages
from tests.support.hostile_clients import SMALL_BUFFER, stall, trickle
from tests.support.pages import blocks, run_tab, started
from tests.test_lessons import (
    LESSONS,
    ROOT,
    TIMEOUT,
    connect,
    exchange,
    read_response,
    read_to_close,
    slow_state_when_fast_is_done,
    split,
    step,
)

PAGE = LESSONS / "07-wsgi-server.md"
STEPS = "07-wsgi-server"


def idle_state_when_new_client_is_answered(server: ServerProcess, idle: int) -> str:
    """Open ``idle`` keep-alive connections (one request each, then silence), then a new
    client's request; once its answer is complete, say whether some idle connection had
    already been closed by the server (``"closed"``: the new client waited for a thread that
    an idle connection held) or all are still open (``"open"``: idle connections hold none)."""
    with ExitStack() as stack:
        quiet = [stack.enter_context(connect(server)) for _ in range(idle)]
        for sock in quiet:
            sock.sendall(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
            assert split(read_response(sock))[0] == 200
        answer = exchange(server, b"GET /new HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert answer.endswith(b"GET /new: 0 body bytes\n"), answer
        states = []
        for sock in quiet:
            sock.setblocking(False)
            try:
                states.append("closed" if sock.recv(1) == b"" else "data")
            except BlockingIOError:
                states.append("open")
        assert "data" not in states, states
        return "closed" if "closed" in states else "open"


# --- the steps -------------------------------------------------------------------------------


def test_step1_serves_environ_and_body_and_closes() -> None:
    with step(f"{STEPS}/step1_blocking.py") as server:
        answer = httpx.post(f"{server.url}/echo?x=1", content=b"some bytes", timeout=TIMEOUT)
        assert (answer.status_code, answer.text) == (200, "POST /echo: 10 body bytes\n")
        assert answer.headers["connection"] == "close"
        big = b"x" * 300_000  # many recv() calls; wsgi.input gets exactly these bytes
        answer = httpx.post(f"{server.url}/big", content=big, timeout=TIMEOUT)
        assert answer.text == "POST /big: 300000 body bytes\n"
        # one request per connection: a second request in the same write is never answered
        both = exchange(server, b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
                                b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
        assert both.count(b"HTTP/1.1 200 OK") == 1 and both.endswith(b"GET /a: 0 body bytes\n")


def test_step1_one_slow_request_holds_everyone() -> None:
    with step(f"{STEPS}/step1_blocking.py", env={"SLOW_SECONDS": "1"}) as server:
        assert slow_state_when_fast_is_done(server) == "complete"


def test_step2_threads_let_fast_pass_slow_and_keep_connections_alive() -> None:
    with step(f"{STEPS}/step2_threads.py", env={"SLOW_SECONDS": "1.5"}) as server:
        assert slow_state_when_fast_is_done(server) == "pending"
        with connect(server) as sock:
            for path in ("/one", "/two"):
                sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                status, headers, body = split(read_response(sock))
                assert (status, headers["connection"]) == (200, "keep-alive")
                assert body == f"GET {path}: 0 body bytes\n".encode()


def test_step2_an_idle_keep_alive_connection_holds_a_thread() -> None:
    env = {"THREADS": "2", "KEEP_ALIVE_SECONDS": "1"}
    with step(f"{STEPS}/step2_threads.py", env=env) as server:
        # two idle connections hold both threads: the new client waits for one to time out
        assert idle_state_when_new_client_is_answered(server, idle=2) == "closed"


def test_step3_idle_connections_hold_no_thread() -> None:
    env = {"THREADS": "2", "KEEP_ALIVE_SECONDS": "5"}
    with step(f"{STEPS}/step3_selector.py", env=env) as server:
        assert idle_state_when_new_client_is_answered(server, idle=4) == "open"


def test_step3_hands_connections_back_and_answers_pipelined_requests() -> None:
    env = {"THREADS": "2", "SLOW_SECONDS": "1.5"}
    with step(f"{STEPS}/step3_selector.py", env=env) as server:
        assert slow_state_when_fast_is_done(server) == "pending"
        with connect(server) as sock:
            for path in ("/one", "/two", "/three"):  # back to the selector after each
                sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                assert split(read_response(sock))[2] == f"GET {path}: 0 body bytes\n".encode()
            sock.sendall(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
                         b"GET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            tail = read_to_close(sock)
        assert tail.count(b"HTTP/1.1 200 OK") == 2
        assert b"POST /a: 5 body bytes\n" in tail and tail.endswith(b"GET /b: 0 body bytes\n")


def test_step3_closes_an_idle_connection_after_its_deadline() -> None:
    with step(f"{STEPS}/step3_selector.py", env={"KEEP_ALIVE_SECONDS": "0.3"}) as server:
        with connect(server) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert split(read_response(sock))[0] == 200
            assert sock.recv(65536) == b""  # closed by the main thread, not a pool thread


# --- the ramp: step 3b bounds what step 3 leaves open ------------------------------------------

#: How long a hostile client waits on step 3 to see that nothing bounds it, seconds: past step
#: 3b's 1-second bounds with room to spare, well short of step 3's 10-second socket timeout.
UNBOUNDED_WAIT = 2.5
BOUNDED = {"REQUEST_SECONDS": "1", "SEND_SECONDS": "1"}
ANSWER_WAIT = 5.0  # seconds a client waits for step 3b's answer (it stops at the answer)


@contextmanager
def step3_with_big(env: dict[str, str]) -> Iterator[ServerProcess]:
    """Step 3's server with step 3b's app (step 1's, plus ``/big``): step 3 itself has no
    response large enough to outlast the kernel's buffers."""
    port = free_port()
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import step3_selector, step3b_bounded;"
            " step3_selector.serve(step3b_bounded.app, int(sys.argv[2]))")
    argv = [sys.executable, "-c", code, str(ROOT / "lessons" / "code" / STEPS), str(port)]
    with ServerProcess(argv, port=port, cwd=ROOT, env=env) as server:
        yield server


def test_step3b_answers_a_trickled_request_with_408() -> None:
    """Slowloris: step 3's socket timeout starts again at every byte, so a byte now and then
    holds a pool thread for ever; step 3b's deadline runs from the request's first byte."""
    request = b"GET / HTTP/1.1\r\nHost: x\r\nX-Trickle: " + b"v" * 100
    with step(f"{STEPS}/step3_selector.py") as server:
        outcome = trickle((server.host, server.port), request, 0.2, UNBOUNDED_WAIT)
        assert (outcome.data, outcome.closed) == (b"", False)
    with step(f"{STEPS}/step3b_bounded.py", env=BOUNDED) as server:
        outcome = trickle((server.host, server.port), request, 0.2, ANSWER_WAIT)
        assert outcome.status == 408 and outcome.closed


def test_step3b_refuses_a_body_past_its_limit_before_reading_it() -> None:
    huge = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (1 << 40)
    with step(f"{STEPS}/step3_selector.py") as server:
        outcome = stall((server.host, server.port), huge + b"x" * 100_000, UNBOUNDED_WAIT)
        assert (outcome.data, outcome.closed) == (b"", False)  # still reading the terabyte
    with step(f"{STEPS}/step3b_bounded.py") as server:  # MAX_BODY: 1 MiB
        outcome = stall((server.host, server.port), huge, ANSWER_WAIT)
        assert outcome.status == 413 and outcome.closed
        answer = httpx.post(f"{server.url}/echo", content=b"x" * 1000, timeout=TIMEOUT)
        assert answer.text == "POST /echo: 1000 body bytes\n"


def test_step3b_drops_a_client_that_stops_reading() -> None:
    """One thread; a client asks for 64 MiB and reads nothing. Step 3's thread waits in
    ``sendall`` for its whole 10-second timeout, and the next client with it; step 3b gives
    each piece SEND_SECONDS, drops the stalled client and answers the next."""
    def next_client_while_one_stalls(server: ServerProcess, wait: float) -> int | None:
        with socket.socket() as stalled:
            stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_BUFFER)
            stalled.connect((server.host, server.port))
            stalled.sendall(b"GET /big?mib=64 HTTP/1.1\r\nHost: x\r\n\r\n")
            return stall((server.host, server.port),
                         b"GET /fast HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                         wait).status

    with step3_with_big({"THREADS": "1"}) as server:
        assert next_client_while_one_stalls(server, UNBOUNDED_WAIT) is None  # its one thread
    with step(f"{STEPS}/step3b_bounded.py", env={"THREADS": "1", **BOUNDED}) as server:
        assert next_client_while_one_stalls(server, ANSWER_WAIT) == 200
        assert len(httpx.get(f"{server.url}/big?mib=8", timeout=TIMEOUT).content) == 8 << 20


def test_step4_toy_wsgi_runs_flask_unchanged() -> None:
    with step(f"{STEPS}/step4_toy_wsgi.py") as server, \
            httpx.Client(base_url=server.url, timeout=TIMEOUT) as client:
        for _ in range(3):  # one kept-alive connection
            answer = client.post("/", content=SAMPLE_BODY,
                                 headers={"Content-Type": "application/json"})
            assert answer.status_code == 200 and answer.json() == json.loads(SAMPLE_BODY)
        assert client.post("/", content=b"{").status_code == 400
        assert client.get("/").status_code == 405  # Flask's own answers
        assert client.get("/missing").status_code == 404
        chunked = client.post("/", content=iter([SAMPLE_BODY[:10], SAMPLE_BODY[10:]]))
        assert chunked.json() == json.loads(SAMPLE_BODY)  # de-chunked by toy-wsgi


def test_step5_flask_under_uvicorn_through_the_adapter() -> None:
    with step(f"{STEPS}/step5_wsgi_under_asgi.py") as server, \
            httpx.Client(base_url=server.url, timeout=TIMEOUT) as client:
        answer = client.post("/", content=SAMPLE_BODY)
        assert answer.status_code == 200 and answer.json() == json.loads(SAMPLE_BODY)
        assert answer.headers["content-type"] == "application/json"
        pieces = client.post("/", content=iter([SAMPLE_BODY[:7], SAMPLE_BODY[7:]]))
        assert pieces.json() == json.loads(SAMPLE_BODY)  # several http.request messages
        assert client.post("/", content=b"{").status_code == 400
        assert client.get("/missing").status_code == 404


def test_step5_adapter_streams_and_closes_the_result() -> None:
    """The adapter alone, driven by hand: head with the first non-empty chunk, close()."""
    import asyncio
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "lesson7_step5", ROOT / "lessons" / "code" / STEPS / "step5_wsgi_under_asgi.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    closed: list[bool] = []

    class Body:
        def __iter__(self) -> Iterator[bytes]:
            yield b""
            yield b"a"
            yield b"b"

        def close(self) -> None:
            closed.append(True)

    def app(environ: dict[str, object], start_response: object) -> Body:
        data = environ["wsgi.input"].read()  # type: ignore[attr-defined]
        assert data == b"hello world"
        start_response("201 Created", [("X-Test", "yes")])  # type: ignore[operator]
        return Body()

    async def main() -> list[dict[str, object]]:
        incoming = [{"type": "http.request", "body": b"hello ", "more_body": True},
                    {"type": "http.request", "body": b"world", "more_body": False}]
        sent: list[dict[str, object]] = []

        async def receive() -> dict[str, object]:
            return incoming.pop(0)

        async def send(message: dict[str, object]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/", "query_string": b"",
                 "http_version": "1.1", "headers": [], "root_path": ""}
        await module.WSGIAdapter(app, threads=1)(scope, receive, send)
        return sent

    sent = asyncio.run(main())
    assert [m["type"] for m in sent] == ["http.response.start", *["http.response.body"] * 3]
    assert sent[0]["status"] == 201 and sent[0]["headers"] == [(b"x-test", b"yes")]
    assert [m["body"] for m in sent[1:]] == [b"a", b"b", b""]
    assert closed == [True]


# --- the page's commands -------------------------------------------------------------------


def section(title: str) -> str:
    """The text of this page's ``## <title>`` section."""
    return pages.section(PAGE, title)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_run_it_commands_run_as_printed() -> None:
    text = section("Run it")
    server_command, curl = blocks(text, "sh")
    httpx_tab, raw_tab = blocks(text, "python")
    env = {"SLOW_SECONDS": "2", "KEEP_ALIVE_SECONDS": "1"}  # slow enough to finish last
    with started(server_command, env=env) as server:
        out = run_tab("sh", curl, server.port)
        assert out.splitlines() == ["GET /fast: 0 body bytes", "POST /echo: 10 body bytes",
                                    "GET /hello: 0 body bytes", "GET /slow: 0 body bytes"]
        out = run_tab("python", httpx_tab, server.port)
        assert out.splitlines() == [*(f"GET /client/{i}: 0 body bytes" for i in range(6)),
                                    "GET /one-more: 0 body bytes"]
        out = run_tab("python", raw_tab, server.port)
        assert "POST /echo: 5 body bytes" in out
        assert out.rstrip().endswith("GET /next: 0 body bytes")
        assert out.count("HTTP/1.1 200 OK") == 2


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_step3b_commands_run_as_printed() -> None:
    pages.check_server_section(PAGE, "Step 3b: a deadline, a limit, and a bound on a stalled send")


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_toy_wsgi_commands_run_as_printed() -> None:
    server_command, curl = blocks(section("toy-wsgi: the same design, grown up"), "sh")
    with started(server_command) as server:
        out = run_tab("sh", curl, server.port)
        assert json.loads(out.splitlines()[0]) == {"id": 1, "name": "ada",
                                                    "email": "ada@example.com"}
        assert "HTTP/1.1 404" in out


def test_try_the_real_models_command_runs_as_printed() -> None:
    (server_command,) = blocks(section("Try the real models"), "sh")
    (httpx_tab,) = blocks(section("Run it"), "python")[:1]
    with started(server_command) as server:
        out = run_tab("python", httpx_tab, server.port)
        assert out.splitlines() == [*(f"GET /client/{i}: 0 body bytes" for i in range(6)),
                                    "GET /one-more: 0 body bytes"]
        answer = httpx.get(f"{server.url}/x", timeout=TIMEOUT)
        assert answer.headers["connection"] == "close"  # sync: one request per connection
