"""Lessons 4 (sans-IO) and 5 (speed): their step programs run, and the state diagram is true.

- Steps that print (no sockets) run as subprocesses; their output is checked line by line.
- Steps that serve are started on a free port (``tests.test_lessons.step``) and sent real
  requests: raw sockets for framing and malformed input, httpx for the rest.
- ``lessons/diagrams/h11-server-states.md`` must be what ``state_diagram.py`` generates from
  h11's tables today, and the moves it adds from h11's code (not its tables) must be what a
  live ``h11.Connection`` does.
- The ramp: each lesson's step 2c puts back a deadline, a limit and flow control. Each comes
  with the hostile client that motivates it (``tests/support/hostile_clients.py``), run against
  step 2b, which it defeats, and step 2c, which bounds it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from types import ModuleType
from typing import Any

import h11
import httpx
import pytest
from h11 import _state

from apps.user import SAMPLE_BODY
from tests.support.hostile_clients import load, stall, trickle, unread_download
from tests.test_lessons import (
    CODE,
    ROOT,
    TIMEOUT,
    connect,
    exchange,
    read_response,
    read_to_close,
    split,
    step,
    wait_for_log,
)


def run_script(relpath: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CODE / relpath), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


# --- lesson 4: sans-IO -----------------------------------------------------------------------


def test_sansio_step1_prints_events_and_states_without_a_socket() -> None:
    result = run_script("04-sans-io/step1_events.py")
    assert result.returncode == 0, result.stderr
    lines = [line.strip() for line in result.stdout.splitlines()]
    assert lines[0] == "start: client=IDLE server=IDLE"
    # the first piece ends mid-header: h11 waits
    assert lines[1:4] == ["feed b'POST /users HTTP/1.1\\r\\nHost: exa'", "-> NEED_DATA",
                          "client=IDLE server=IDLE"]
    assert any(line.startswith("-> Request(method=b'POST'") for line in lines)
    data_events = [line for line in lines if line.startswith("-> Data(")]
    assert [e.split("b'")[1].split("'")[0] for e in data_events] == ["hel", "lo"]
    assert "client=DONE server=DONE" in lines
    assert ("bytes to write: b'HTTP/1.1 200 OK\\r\\nContent-Type: text/plain\\r\\n"
            "Content-Length: 7\\r\\n\\r\\nthanks\\n'") in lines
    assert "next cycle: client=IDLE server=IDLE" in lines
    assert lines[-1].startswith("RemoteProtocolError: ") and lines[-1].endswith("(answer 400)")


def test_sansio_step2_blocking_server_keeps_alive_and_lets_h11_refuse() -> None:
    with step("04-sans-io/step2_blocking.py") as server:
        answer = httpx.post(f"{server.url}/x?y=1", content=b"hello", timeout=TIMEOUT)
        assert (answer.status_code, answer.text) == (200, "POST /x?y=1: 5 bytes\n")
        with connect(server) as sock:
            sock.sendall(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
            assert split(read_response(sock))[2] == b"GET /a: 0 bytes\n"
            chunked = (b"PUT /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                       b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
            sock.sendall(chunked + b"GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            tail = read_to_close(sock)  # both answers, then the server closes
        assert tail.count(b"HTTP/1.1 200 OK") == 2
        assert b"PUT /b: 5 bytes\n" in tail and tail.endswith(b"GET /c: 0 bytes\n")
        assert b"Connection: close" in tail
        status, headers, _ = split(exchange(server, b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n"))
        assert status == 400
        assert split(exchange(server, b"GET / HTTP/1.0\r\n\r\n"))[1]["connection"] == "close"


def test_sansio_step2b_asyncio_h11_server_keeps_alive_pipelines_and_refuses() -> None:
    body = SAMPLE_BODY
    post = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    with step("04-sans-io/step2b_asyncio.py") as server:
        with httpx.Client(base_url=server.url, timeout=TIMEOUT) as client:
            for _ in range(2):  # one kept-alive connection
                answer = client.post("/", content=body)
                assert answer.json() == {"id": 1, "name": "user", "email": "user@email.com"}
            assert client.get("/").status_code == 405
        with connect(server) as sock:  # two requests in one write: answered in order
            sock.sendall(post + b"GET /missing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            both = read_to_close(sock)
        assert both.count(b"HTTP/1.1 200 ") == 1 and both.count(b"HTTP/1.1 404 ") == 1
        assert both.index(b" 200 ") < both.index(b" 404 ")
        assert split(exchange(server, b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n"))[0] == 400
        # one connection's slow client holds nobody: a half-sent request, then another client
        with connect(server) as half:
            half.sendall(post[:20])
            answer = httpx.post(server.url + "/", content=body, timeout=TIMEOUT)
            assert answer.status_code == 200


# --- the ramp: step 2c bounds what step 2b leaves open ------------------------------------------

#: Short bounds for the step 2c servers, so the hostile clients wait seconds, not minutes.
BOUNDED = {"REQUEST_SECONDS": "1", "KEEP_ALIVE_SECONDS": "1"}
#: How long a hostile client waits on a step 2b server to see that nothing bounds it, seconds:
#: past step 2c's 1-second deadline with room to spare.
UNBOUNDED_WAIT = 2.0
#: How long a hostile client waits for step 2c's answer, seconds: it stops at the answer, so
#: only a loaded machine spends more than the 1-second deadline.
ANSWER_WAIT = 5.0
HALF_HEAD = b"GET / HTTP/1.1\r\nHost: x\r\nX-Trickle: "  # a head that is never finished
RAMP = [("04-sans-io", "step2b_asyncio.py", "step2c_bounded.py"),
        ("05-speed", "step2b_asgi.py", "step2c_bounded.py")]


@pytest.mark.parametrize(("lesson", "before", "after"), RAMP, ids=["lesson4", "lesson5"])
def test_step2c_answers_a_stalled_or_trickled_head_with_408(lesson: str, before: str,
                                                           after: str) -> None:
    """Slowloris: step 2b waits for ever on a half-sent head, and bytes sent one by one keep it
    waiting; step 2c's deadline runs from the first byte, whatever comes after it."""
    with step(f"{lesson}/{before}") as server:
        outcome = stall((server.host, server.port), HALF_HEAD, UNBOUNDED_WAIT)
        assert (outcome.data, outcome.closed) == (b"", False)
    with step(f"{lesson}/{after}", env=BOUNDED) as server:
        address = (server.host, server.port)
        assert stall(address, HALF_HEAD, ANSWER_WAIT).status == 408
        trickled = trickle(address, HALF_HEAD + b"v" * 100, 0.1, ANSWER_WAIT)
        assert trickled.status == 408 and trickled.closed
        silent = stall(address, b"", ANSWER_WAIT)  # idle: closed without a word
        assert (silent.data, silent.closed) == (b"", True)


def test_lesson4_step2c_refuses_a_body_past_its_limit_before_reading_it() -> None:
    """Step 2b reads any body it is announced; step 2c answers 413 to the head alone."""
    huge = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (1 << 40)
    with step("04-sans-io/step2b_asyncio.py") as server:
        outcome = stall((server.host, server.port), huge + b"x" * 100_000, UNBOUNDED_WAIT)
        assert (outcome.data, outcome.closed) == (b"", False)  # still reading the terabyte
    with step("04-sans-io/step2c_bounded.py", env={"MAX_BODY": "1000"}) as server:
        outcome = stall((server.host, server.port), huge, ANSWER_WAIT)
        assert outcome.status == 413 and outcome.closed
        chunked = (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"800\r\n" + b"x" * 2048 + b"\r\n")  # no length announced: counted
        assert stall((server.host, server.port), chunked, ANSWER_WAIT).status == 413
        assert httpx.post(server.url + "/", content=SAMPLE_BODY,
                          timeout=TIMEOUT).status_code == 200


def test_lesson5_step2c_refuses_a_head_past_its_limit() -> None:
    """llhttp has no limit on a head: step 2b keeps taking fields; step 2c answers 431."""
    fields = b"".join(b"X-Field-%d: %s\r\n" % (i, b"v" * 100) for i in range(400))  # 43 KB
    with step("05-speed/step2b_asgi.py") as server:
        flood = HALF_HEAD + b"v\r\n" + fields * 20
        outcome = stall((server.host, server.port), flood, UNBOUNDED_WAIT)
        assert (outcome.data, outcome.closed) == (b"", False)  # 870 KB in, and waiting
    with step("05-speed/step2c_bounded.py") as server:  # MAX_HEAD: 16 KiB
        outcome = stall((server.host, server.port), HALF_HEAD + b"v\r\n" + fields, ANSWER_WAIT)
        assert outcome.status == 431 and outcome.closed
        assert httpx.post(server.url + "/", content=SAMPLE_BODY,
                          timeout=TIMEOUT).status_code == 200


@pytest.mark.parametrize(("lesson", "before", "after"), RAMP, ids=["lesson4", "lesson5"])
def test_step2c_send_waits_for_a_client_that_reads_nothing(lesson: str, before: str,
                                                          after: str) -> None:
    """A 32 MiB response to a client that reads nothing: step 2b's app sends it all at once,
    into the server's memory; step 2c's waits, its buffer held near the 64 KiB high-water mark
    (the rest sits in the kernel's socket buffers, a few MiB at most on Linux)."""
    chunks = 512  # of 64 KiB
    name = "H11Protocol" if lesson == "04-sans-io" else "HttpToolsProtocol"
    unbounded = unread_download(getattr(load(CODE / lesson / before), name), chunks)
    assert unbounded.sent == chunks and unbounded.peak_buffer > 16 << 20, unbounded
    bounded = unread_download(getattr(load(CODE / lesson / after), name), chunks)
    assert bounded.sent < chunks // 4 and bounded.peak_buffer <= 256 << 10, bounded


def test_sansio_step3_runs_toy_h11_on_the_user_endpoint() -> None:
    with step("04-sans-io/step3_toy_h11.py") as server:
        answer = httpx.post(server.url + "/", content=SAMPLE_BODY, timeout=TIMEOUT)
        assert answer.status_code == 200
        assert answer.json() == {"id": 1, "name": "user", "email": "user@email.com"}
        assert httpx.post(server.url + "/", content=b"{", timeout=TIMEOUT).status_code == 400
        assert httpx.get(server.url + "/", timeout=TIMEOUT).status_code == 405


def test_state_diagram_matches_h11s_tables() -> None:
    result = run_script("04-sans-io/state_diagram.py", "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def load_diagram_module() -> Any:
    """``lessons/code/04-sans-io/state_diagram.py`` as a module (it is no package)."""
    spec = importlib.util.spec_from_file_location(
        "state_diagram", CODE / "04-sans-io" / "state_diagram.py")
    assert spec is not None and spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_state_diagram_draws_every_table_entry() -> None:
    module = load_diagram_module()
    text = (ROOT / "lessons" / "diagrams" / "h11-server-states.md").read_text()
    for state, moves in _state.EVENT_TRIGGERED_TRANSITIONS[h11.SERVER].items():
        for key, target in moves.items():
            label = module.event_label(key)
            edge = [line for line in text.splitlines()
                    if line.strip().startswith(f"{state.__name__} --> {target.__name__}:")]
            assert edge and label in edge[0], (state, key, target)


def finished_cycle(*extra_headers: tuple[str, str]) -> h11.Connection:
    """A server connection after one GET and its response, both sides as far as they go."""
    conn = h11.Connection(our_role=h11.SERVER)
    head = b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(
        f"{name}: {value}\r\n".encode() for name, value in extra_headers) + b"\r\n"
    conn.receive_data(head)
    assert type(conn.next_event()) is h11.Request
    assert type(conn.next_event()) is h11.EndOfMessage
    conn.send(h11.Response(status_code=204, headers=[]))
    conn.send(h11.EndOfMessage())
    return conn


@pytest.mark.parametrize("index", [0, 1])
def test_the_moves_drawn_from_h11s_code_are_what_h11_does(index: int) -> None:
    module = load_diagram_module()
    source, target, _ = module.CODE_TRANSITIONS[index]
    if target is h11.IDLE:  # start_next_cycle from DONE
        conn = finished_cycle()
        assert conn.our_state is source
        conn.start_next_cycle()
    else:  # keep-alive off: DONE becomes MUST_CLOSE
        conn = finished_cycle(("Connection", "close"))
    assert conn.our_state is target
    assert len(module.CODE_TRANSITIONS) == 2


# --- lesson 5: speed -------------------------------------------------------------------------


def test_speed_step1_prints_callbacks_in_wire_order() -> None:
    result = run_script("05-speed/step1_callbacks.py")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    calls = [line.split("(")[0] for line in lines if not line.startswith("---")]
    first = ["on_message_begin", "on_url", "on_url", "on_header", "on_header",
             "on_headers_complete", "on_body", "on_body", "on_message_complete"]
    assert calls[:len(first)] == first
    assert "on_url(b'/use')" in lines and "on_url(b'rs?id=7')" in lines
    assert [line for line in lines if line.startswith("on_body")] == [
        "on_body(b'he')", "on_body(b'llo')", "on_body(b'abc')", "on_body(b'de')"]
    assert calls.count("on_message_complete") == 2
    assert lines[-1].startswith("HttpParserError: ")


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_speed_step2_serves_on_either_loop(loop: str) -> None:
    with step("05-speed/step2_loops.py", env={"LOOP": loop}) as server:
        wait_for_log(server, "serving on")
        with httpx.Client(base_url=server.url, timeout=TIMEOUT) as client:
            answers = [client.post(f"/{i}", content=b"x" * i) for i in range(3)]
        assert [a.text for a in answers] == [f"POST /{i}: {i} bytes\n" for i in range(3)]
        expected = "uvloop.Loop" if loop == "uvloop" else "asyncio."
        assert answers[0].headers["x-loop"].startswith(expected)
        assert expected in server.log_tail(5)
        closed = exchange(server, b"GET /q?a=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert split(closed)[2] == b"GET /q?a=1: 0 bytes\n"
        assert split(exchange(server, b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n"))[0] == 400


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_speed_step3_runs_toy_httptools_on_the_user_endpoint(loop: str) -> None:
    with step("05-speed/step3_toy_httptools.py", env={"LOOP": loop}) as server:
        answer = httpx.post(server.url + "/", content=SAMPLE_BODY, timeout=TIMEOUT)
        assert answer.status_code == 200
        assert answer.json() == {"id": 1, "name": "user", "email": "user@email.com"}
        assert httpx.get(server.url + "/nope", timeout=TIMEOUT).status_code == 404


def test_speed_step2b_httptools_asgi_server_keeps_alive_pipelines_and_refuses() -> None:
    body = SAMPLE_BODY
    post = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    with step("05-speed/step2b_asgi.py") as server:
        with httpx.Client(base_url=server.url, timeout=TIMEOUT) as client:
            for _ in range(2):  # one kept-alive connection
                answer = client.post("/", content=body)
                assert answer.json() == {"id": 1, "name": "user", "email": "user@email.com"}
            assert client.get("/").status_code == 405
            streamed = client.post("/", content=iter([body[:10], body[10:]]))  # chunked
            assert streamed.status_code == 200
        with connect(server) as sock:  # three requests in one write: answered in order
            sock.sendall(post + post + b"GET /missing HTTP/1.1\r\nHost: x\r\n"
                                       b"Connection: close\r\n\r\n")
            answers = read_to_close(sock)
        assert answers.count(b"HTTP/1.1 200 OK") == 2 and answers.count(b"HTTP/1.1 404 ") == 1
        assert answers.rindex(b" 200 ") < answers.index(b" 404 ")
        assert answers.endswith(b'{"error": "not found"}')
        assert split(exchange(server, b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n"))[0] == 400
        with connect(server) as half:  # a half-sent request holds nobody
            half.sendall(post[:20])
            assert httpx.post(server.url + "/", content=body, timeout=TIMEOUT).status_code == 200


def test_speed_step2b_frames_a_body_without_content_length_as_chunks() -> None:
    path = CODE / "05-speed" / "step2b_asgi.py"
    spec = importlib.util.spec_from_file_location("lesson5_step2b", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ab", "more_body": True})
        await send({"type": "http.response.body", "body": b"cd"})

    async def main() -> bytes:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: module.HttpToolsProtocol(app), "127.0.0.1", 0)
        async with server:
            port = server.sockets[0].getsockname()[1]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = await asyncio.wait_for(reader.read(), TIMEOUT)
            writer.close()
            return answer

    answer = asyncio.run(main())
    assert answer == (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n"
                      b"\r\n2\r\nab\r\n2\r\ncd\r\n0\r\n\r\n")
