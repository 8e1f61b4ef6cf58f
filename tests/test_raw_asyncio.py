"""toy-raw (toyservers/raw_asyncio.py): the server around the hand-written HTTP/1.1 parser
(whose own tests are in test_http1_parser.py).

Two levels: the protocol object on a mock transport and a fake clock (keep-alive, deadlines,
pipelining and backpressure become deterministic); and the real server on 127.0.0.1 port 0 with
httpx, raw sockets, curl and wrk.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.support.echo_app import app as echo_app
from tests.support.mock import FakeClockLoop, MockTransport
from toyservers import http1
from toyservers._server import ServerState
from toyservers.asgi import ClientDisconnected
from toyservers.config import Config
from toyservers.raw_asyncio import HIGH_WATER_LIMIT, RawHTTPProtocol, serve

# --- the protocol on a mock transport and a fake clock -----------------------------------------

App = Callable[..., Any]


class Harness:
    """A RawHTTPProtocol on a MockTransport, driven step by step on a FakeClockLoop."""

    def __init__(self, loop: FakeClockLoop, app: App, **config: Any) -> None:
        self.loop = loop
        self.state = ServerState(app, Config(**config), {"db": "ok"})
        self.protocol = self.connect()
        self.transport: MockTransport = self.protocol.transport  # type: ignore[assignment]

    def connect(self) -> RawHTTPProtocol:
        """Another connection to the same server (made inside the loop, as asyncio does)."""
        async def make() -> RawHTTPProtocol:
            return RawHTTPProtocol(self.state)
        protocol = self.loop.run_until_complete(make())
        protocol.connection_made(MockTransport())
        return protocol

    def spin(self, rounds: int = 20) -> None:
        for _ in range(rounds):
            self.loop.run_until_complete(asyncio.sleep(0))

    def push(self, data: bytes) -> None:
        """Deliver ``data`` on the loop, as the transport does; run nothing yet."""
        self.loop.call_soon(self.protocol.data_received, data)

    def feed(self, data: bytes) -> bytes:
        self.push(data)
        self.spin()
        return self.transport.take()

    def advance(self, seconds: float) -> None:
        self.loop.advance(seconds)
        self.spin()


@pytest.fixture
def loop() -> Iterator[FakeClockLoop]:
    loop = FakeClockLoop()
    yield loop
    for task in asyncio.all_tasks(loop):
        task.cancel()
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()


async def hello_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello"})


GET = b"GET /p HTTP/1.1\r\nHost: x\r\n\r\n"


def split_response(data: bytes) -> tuple[bytes, dict[bytes, bytes], bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    fields = dict(line.split(b": ", 1) for line in lines)
    return status, {k.lower(): v for k, v in fields.items()}, body


def test_response_gets_length_date_server_and_stays_open(loop: FakeClockLoop) -> None:
    h = Harness(loop, hello_app)
    status, fields, body = split_response(h.feed(GET))
    assert status == b"HTTP/1.1 200 OK"
    assert fields[b"content-length"] == b"5" and body == b"hello"
    assert b"date" in fields and fields[b"server"] == b"toyservers"
    assert b"connection" not in fields and not h.transport.closed


def test_scope_is_complete(loop: FakeClockLoop) -> None:
    scopes: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scopes.append(scope)
        await hello_app(scope, receive, send)

    h = Harness(loop, app, root_path="/mnt")
    h.feed(b"GET /caf%C3%A9/x%2Fy?q=%20 HTTP/1.0\r\nHost: h\r\nX-A: 1\r\n\r\n")
    scope = scopes[0]
    assert scope["type"] == "http" and scope["asgi"] == {"version": "3.0", "spec_version": "2.4"}
    assert scope["http_version"] == "1.0" and scope["method"] == "GET"
    assert scope["scheme"] == "http"
    assert scope["path"] == "/mnt/café/x/y" and scope["raw_path"] == b"/mnt/caf%C3%A9/x%2Fy"
    assert scope["root_path"] == "/mnt" and scope["query_string"] == b"q=%20"
    assert scope["headers"] == [(b"host", b"h"), (b"x-a", b"1")]
    assert scope["client"] == ("127.0.0.1", 50000) and scope["server"] == ("127.0.0.1", 8000)
    assert scope["state"] == {"db": "ok"} and scope["state"] is not h.state.lifespan_state


def test_keep_alive_timer_closes_an_idle_connection_after_the_timeout(loop: FakeClockLoop
                                                                     ) -> None:
    h = Harness(loop, hello_app, timeout_keep_alive=5.0)
    h.feed(GET)
    h.advance(4.9)
    assert not h.transport.closed
    h.feed(GET)  # data_received cancels the timer; a new one starts after this response
    h.advance(4.9)
    assert not h.transport.closed
    h.advance(0.2)
    assert h.transport.closed and h.transport.take() == b""  # closed silently


def test_connection_that_never_speaks_is_closed_after_the_keep_alive_timeout(
        loop: FakeClockLoop) -> None:
    h = Harness(loop, hello_app, timeout_keep_alive=2.0)
    h.advance(2.1)
    assert h.transport.closed


def test_pipelined_requests_are_answered_in_order_one_at_a_time(loop: FakeClockLoop) -> None:
    gates: list[asyncio.Event] = []
    running: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        running.append(scope["path"])
        gate = asyncio.Event()
        gates.append(gate)
        await gate.wait()
        body = scope["path"].encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})

    h = Harness(loop, app)
    out = h.feed(b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n"
                 b"GET /3 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert out == b"" and running == ["/1"]  # the second waits until the first is answered
    gates[0].set()
    h.spin()
    assert running == ["/1", "/2"] and h.transport.take().endswith(b"/1")
    gates[1].set()
    h.spin()
    gates[2].set()
    h.spin()
    out = h.transport.take()
    assert out.index(b"\r\n\r\n/2") < out.index(b"\r\n\r\n/3")


def test_read_ahead_of_pipelined_requests_pauses_reading(loop: FakeClockLoop) -> None:
    gate = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await gate.wait()
        await hello_app(scope, receive, send)

    big = b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 2000 + b"\r\n\r\n"
    count = HIGH_WATER_LIMIT // len(big) + 3
    h = Harness(loop, app)
    h.feed(big * count)
    assert h.transport.reading_paused
    gate.set()
    h.spin(20 * count)
    assert not h.transport.reading_paused
    assert h.transport.take().count(b"HTTP/1.1 200 OK") == count


def test_request_body_backpressure_pauses_and_resumes_reading(loop: FakeClockLoop) -> None:
    gate = asyncio.Event()
    received: list[int] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await gate.wait()
        while True:
            message = await receive()
            received.append(len(message["body"]))
            if not message["more_body"]:
                break
        await hello_app(scope, receive, send)

    total = 3 * HIGH_WATER_LIMIT
    h = Harness(loop, app)
    h.feed(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % total)
    h.feed(b"a" * (HIGH_WATER_LIMIT + 1))
    assert h.transport.reading_paused  # the app has not read anything yet
    gate.set()
    h.spin()
    assert not h.transport.reading_paused and received == [HIGH_WATER_LIMIT + 1]
    h.feed(b"a" * (total - HIGH_WATER_LIMIT - 1))
    assert sum(received) == total and received[-1] > 0
    assert h.transport.take() == b""  # all sent earlier by feed's spin
    assert h.transport.closed is False


def test_send_waits_while_the_transport_is_over_its_high_water_mark(loop: FakeClockLoop
                                                                    ) -> None:
    sent: list[int] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(3):
            await send({"type": "http.response.body", "body": b"x", "more_body": True})
            sent.append(i)
        await send({"type": "http.response.body", "body": b""})

    h = Harness(loop, app)
    h.protocol.pause_writing()
    h.feed(GET)
    assert sent == []
    h.protocol.resume_writing()
    h.spin()
    assert sent == [0, 1, 2]
    status, fields, body = split_response(h.transport.take())
    assert fields[b"transfer-encoding"] == b"chunked"
    assert body == b"1\r\nx\r\n" * 3 + b"0\r\n\r\n"


def test_header_deadline_gives_408_and_closes(loop: FakeClockLoop) -> None:
    h = Harness(loop, hello_app, timeout_headers=10.0)
    h.feed(b"GET / HTTP/1.1\r\n")
    h.advance(6)
    h.feed(b"Host: x\r\n")  # trickling bytes do not extend the deadline
    h.advance(4.1)
    assert h.transport.take().startswith(b"HTTP/1.1 408 ")
    assert h.protocol.phase == "closed"


def test_body_inactivity_deadline_gives_408_and_disconnects_the_app(loop: FakeClockLoop
                                                                    ) -> None:
    messages: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        while True:
            messages.append(await receive())
            if messages[-1]["type"] == "http.disconnect":
                return

    h = Harness(loop, app, timeout_body=3.0)
    h.feed(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
    h.advance(2.5)
    h.feed(b"def")  # activity resets the inactivity deadline
    h.advance(2.5)
    assert h.transport.take() == b""
    h.advance(1)
    assert h.transport.take().startswith(b"HTTP/1.1 408 ")
    assert messages[-1] == {"type": "http.disconnect"}
    assert b"".join(m.get("body", b"") for m in messages) == b"abcdef"


def test_expect_100_continue_is_sent_only_when_the_app_reads(loop: FakeClockLoop) -> None:
    gate = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await gate.wait()
        message = await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": message["body"]})

    h = Harness(loop, app)
    head = b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
    assert h.feed(head) == b""
    gate.set()
    h.spin()
    assert h.transport.take() == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert h.feed(b"ok").endswith(b"\r\n\r\nok")


def test_no_100_continue_for_http_1_0_and_close_when_the_body_was_never_asked_for(
        loop: FakeClockLoop) -> None:
    h = Harness(loop, hello_app)
    out = h.feed(b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                 b"Content-Length: 5\r\n\r\n")
    assert b"100 Continue" not in out and split_response(out)[1][b"connection"] == b"close"
    h2 = Harness(loop, hello_app)
    out = h2.feed(b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello")
    assert b"100 Continue" not in out and out.startswith(b"HTTP/1.1 200 OK")


def test_chunked_request_body_is_streamed_to_the_app(loop: FakeClockLoop) -> None:
    h = Harness(loop, echo_app)
    h.feed(b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
    out = h.feed(b"2;ext=1\r\nde\r\n0\r\nTrailer: t\r\n\r\n")
    assert json.loads(split_response(out)[2])["body"] == "abcde"


def test_http_1_0_closes_unless_keep_alive_and_connection_close_is_honoured(
        loop: FakeClockLoop) -> None:
    h = Harness(loop, hello_app)
    out = h.feed(b"GET / HTTP/1.0\r\n\r\n")
    assert split_response(out)[1][b"connection"] == b"close" and h.transport.closed
    h = Harness(loop, hello_app)
    out = h.feed(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    assert split_response(out)[1][b"connection"] == b"keep-alive" and not h.transport.closed
    h = Harness(loop, hello_app)
    out = h.feed(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" + GET)
    assert out.count(b"HTTP/1.1") == 1 and h.transport.closed


def test_app_connection_close_header_closes_after_the_response(loop: FakeClockLoop) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"Connection", b"close")]})
        await send({"type": "http.response.body", "body": b"bye"})

    h = Harness(loop, app)
    out = h.feed(GET + GET)
    assert out.count(b"HTTP/1.1 200") == 1 and out.lower().count(b"connection: close") == 1
    assert h.transport.closed


def test_http_1_0_streaming_response_is_close_delimited(loop: FakeClockLoop) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        await send({"type": "http.response.body", "body": b"b"})

    h = Harness(loop, app)
    status, fields, body = split_response(h.feed(b"GET / HTTP/1.0\r\n\r\n"))
    assert b"content-length" not in fields and b"transfer-encoding" not in fields
    assert body == b"ab" and h.transport.closed


@pytest.mark.parametrize(("request_line", "status"), [(b"HEAD / HTTP/1.1", 200),
                                                      (b"GET / HTTP/1.1", 204),
                                                      (b"GET / HTTP/1.1", 304)])
def test_responses_without_a_body(loop: FakeClockLoop, request_line: bytes, status: int) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = [(b"content-length", b"5")] if status == 200 else []
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"hello" if status == 200 else b""})

    h = Harness(loop, app)
    _, fields, body = split_response(h.feed(request_line + b"\r\nHost: x\r\n\r\n" + GET))
    assert body.startswith(b"HTTP/1.1 ")  # the next response follows at once: no body bytes
    assert b"transfer-encoding" not in fields
    assert (fields.get(b"content-length") == b"5") == (status == 200)


def test_app_headers_win_over_date_and_server(loop: FakeClockLoop) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"server", b"mine"), (b"content-length", b"0")]})
        await send({"type": "http.response.body"})

    h = Harness(loop, app)
    out = h.feed(GET).lower()
    assert out.count(b"server:") == 1 and b"server: mine" in out and b"date:" in out


@pytest.mark.parametrize("when", ["before-start", "after-start", "after-body"])
def test_app_errors(loop: FakeClockLoop, when: str, caplog: pytest.LogCaptureFixture) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if when != "before-start":
            await send({"type": "http.response.start", "status": 200, "headers": []})
        if when == "after-body":
            await send({"type": "http.response.body", "body": b"part", "more_body": True})
        raise RuntimeError("boom")

    h = Harness(loop, app)
    out = h.feed(GET)
    assert "Exception in ASGI application" in caplog.text
    if when == "after-body":
        assert out.endswith(b"4\r\npart\r\n")  # no last-chunk: the client sees it broken
    else:  # nothing written yet: a 500 is still possible
        assert out.startswith(b"HTTP/1.1 500 ") and b"connection: close" in out
    assert h.protocol.phase == "closed"


def test_app_returning_without_a_response_gives_500(loop: FakeClockLoop,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        return None

    h = Harness(loop, app)
    assert h.feed(GET).startswith(b"HTTP/1.1 500 ")
    assert "without starting the response" in caplog.text


def test_bad_response_headers_and_wrong_lengths_are_refused(loop: FakeClockLoop,
                                                            caplog: pytest.LogCaptureFixture
                                                            ) -> None:
    async def splitting(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"x-a", b"1\r\nSet-Cookie: evil")]})

    assert Harness(loop, splitting).feed(GET).startswith(b"HTTP/1.1 500 ")

    async def too_long(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"abc"})

    h = Harness(loop, too_long)
    assert h.feed(GET).startswith(b"HTTP/1.1 500 ")
    assert "longer than its Content-Length" in caplog.text


def test_disconnect_reaches_a_waiting_app_and_send_raises_oserror(loop: FakeClockLoop) -> None:
    seen: list[Any] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(await receive())
        seen.append(await receive())  # blocks until the client goes away
        try:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        except OSError as exc:
            seen.append(type(exc))

    h = Harness(loop, app)
    h.feed(GET)
    assert seen == [{"type": "http.request", "body": b"", "more_body": False}]
    h.protocol.connection_lost(None)
    h.spin()
    assert seen[1:] == [{"type": "http.disconnect"}, ClientDisconnected]  # asgi.py's
    assert h.protocol not in h.state.connections


def test_limits_give_413_and_503(loop: FakeClockLoop) -> None:
    h = Harness(loop, hello_app, max_body_size=4)
    out = h.feed(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
    assert out.startswith(b"HTTP/1.1 413 ")
    h = Harness(loop, hello_app, max_body_size=4)
    out = h.feed(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 413 ")
    h = Harness(loop, hello_app, limit_concurrency=1)
    h.connect()
    assert h.feed(GET).startswith(b"HTTP/1.1 503 ")


def test_empty_lines_before_a_request_line_are_ignored(loop: FakeClockLoop) -> None:
    h = Harness(loop, hello_app)
    assert h.feed(b"\r\n\r\n" + GET).startswith(b"HTTP/1.1 200 OK")
    assert h.feed(b"\r\n") == b"" and h.feed(GET).startswith(b"HTTP/1.1 200 OK")
    h = Harness(loop, hello_app, timeout_headers=2.0)
    h.feed(b"\r\n")  # empty lines start the head's deadline: they cannot hold a connection
    h.advance(2.1)
    assert h.transport.closed


def test_body_the_app_never_read_is_discarded_before_the_next_request(loop: FakeClockLoop
                                                                      ) -> None:
    paths: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        paths.append(scope["path"])
        if scope["path"] == "/skip":
            await hello_app(scope, receive, send)
        else:
            await echo_app(scope, receive, send)

    h = Harness(loop, app)
    out = h.feed(b"POST /skip HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
    assert out.endswith(b"hello") and not h.transport.closed
    out = h.feed(b"defghij" + b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok")
    assert paths == ["/skip", "/echo"] and json.loads(split_response(out)[2])["body"] == "ok"


@pytest.mark.parametrize("enabled", [True, False])
def test_access_log_line_like_uvicorns(loop: FakeClockLoop, caplog: pytest.LogCaptureFixture,
                                       enabled: bool) -> None:
    caplog.set_level("INFO", logger="toyservers.access")
    h = Harness(loop, hello_app, access_log=enabled)
    h.feed(b"GET /p?x=1 HTTP/1.1\r\nHost: x\r\n\r\n")
    lines = [r.getMessage() for r in caplog.records if r.name == "toyservers.access"]
    assert lines == (['127.0.0.1:50000 - "GET /p?x=1 HTTP/1.1" 200'] if enabled else [])


def test_refused_request_closes_and_nothing_after_it_is_read(loop: FakeClockLoop) -> None:
    paths: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        paths.append(scope["path"])
        await hello_app(scope, receive, send)

    h = Harness(loop, app)
    out = h.feed(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"
                 + GET)
    assert out.startswith(b"HTTP/1.1 400 ") and out.count(b"HTTP/1.1") == 1
    assert b"connection: close" in out and paths == []
    assert h.feed(GET) == b"" and h.protocol.phase == "closed"


def test_graceful_shutdown_finishes_the_response_in_flight(loop: FakeClockLoop) -> None:
    gate = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await gate.wait()
        await hello_app(scope, receive, send)

    idle = Harness(loop, app)
    idle.protocol.shutdown()
    assert idle.transport.closed
    busy = Harness(loop, app)
    busy.feed(GET)
    busy.protocol.shutdown()
    assert not busy.transport.closed
    gate.set()
    busy.spin()
    out = busy.transport.take()
    assert out.startswith(b"HTTP/1.1 200 OK") and b"connection: close" in out
    assert busy.protocol.phase == "closed"


def test_random_bytes_never_break_the_protocol(loop: FakeClockLoop,
                                               caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(9112)
    alphabet = b"GET /HTP1.\r\n:;0123456789abcdef \t\x00\x7f\xffHost:Content-Length:chunked"
    for _ in range(300):
        h = Harness(loop, echo_app, timeout_headers=1.0, timeout_body=1.0)
        for _ in range(rng.randint(1, 4)):
            size = rng.randint(1, 80)
            piece = bytes(rng.choice(alphabet) for _ in range(size))
            if rng.random() < 0.3:
                piece = GET[: rng.randint(0, len(GET))] + piece
            h.push(piece)
        h.spin()
        h.advance(1.5)  # every deadline has passed: the connection must be answered or closed
        out = h.transport.take()
        assert h.transport.closed or (h.protocol.phase == "head" and not h.protocol.buffer)
        if out:
            assert out.startswith(b"HTTP/1.1 ")
    assert not [record for record in caplog.records if record.levelname == "ERROR"]


# --- issue 8 findings, on the mock transport ----------------------------------------------------


@pytest.mark.parametrize("exc", [SystemExit, KeyboardInterrupt, asyncio.CancelledError])
def test_app_base_exception_gets_500_and_the_server_goes_on(
        loop: FakeClockLoop, caplog: pytest.LogCaptureFixture, exc: type[BaseException]) -> None:
    """Finding 1: SystemExit or KeyboardInterrupt stopped the server; CancelledError left the
    connection hanging."""
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["path"] == "/raise":
            raise exc
        await hello_app(scope, receive, send)

    h = Harness(loop, app)
    out = h.feed(b"GET /raise HTTP/1.1\r\nHost: x\r\n\r\n" + GET)
    assert out.startswith(b"HTTP/1.1 500 ") and out.count(b"HTTP/1.1 ") == 1
    assert b"connection: close" in out and h.transport.closed
    assert "Exception in ASGI application" in caplog.text
    other = Harness(loop, app)
    assert other.feed(GET).startswith(b"HTTP/1.1 200 OK")


def test_no_100_continue_once_the_response_has_begun(loop: FakeClockLoop) -> None:
    """Finding 2: an app streaming before its first receive() got 100 Continue written into
    its body (RFC 9110 §15.2: a 1xx only before the final response)."""
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        message = await receive()
        await send({"type": "http.response.body", "body": message["body"]})

    h = Harness(loop, app)
    out = h.feed(b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                 b"Content-Length: 2\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200 OK") and b"100 Continue" not in out
    assert b"connection: close" in out  # the client may never send the body it offered
    out += h.feed(b"ok")
    assert b"100 Continue" not in out and out.endswith(b"5\r\nfirst\r\n2\r\nok\r\n0\r\n\r\n")


def test_100_continue_after_start_while_the_head_is_still_held(loop: FakeClockLoop) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        message = await receive()  # nothing of the response is on the wire yet
        await send({"type": "http.response.body", "body": message["body"]})

    h = Harness(loop, app)
    out = h.feed(b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                 b"Content-Length: 2\r\n\r\n")
    assert out == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert h.feed(b"ok").startswith(b"HTTP/1.1 200 OK") and not h.transport.closed


def _mistake(status: Any, headers: list[Any], *bodies: tuple[bytes, bool]) -> App:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        for body, more in bodies:
            await send({"type": "http.response.body", "body": body, "more_body": more})
    return app


@pytest.mark.parametrize("app", [
    _mistake(100, [], (b"x", False)),
    _mistake(101, [(b"upgrade", b"websocket")], (b"", False)),
    _mistake(1000, [], (b"x", False)),
    _mistake(0, [], (b"x", False)),
    _mistake(-1, [], (b"x", False)),
    _mistake(200, [(b"content-length", b"1"), (b"content-length", b"2")], (b"x", False)),
    _mistake(200, [(b"transfer-encoding", b"gzip")], (b"x", True), (b"y", False)),
    _mistake(200, [(b"content-length", b"+5")], (b"hello", False)),
    _mistake(200, [(b"content-length", b"1_0")], (b"x" * 10, False)),
    _mistake(200, [(b"content-length", b"2")], (b"abc", False)),
    _mistake(103, [(b"content-length", b"2")], (b"ok", False)),
    _mistake(200, [(b"x bad", b"1")], (b"ok", False)),
    _mistake(200, [], ("text", False)),
], ids=["100", "101", "1000", "0", "-1", "two-lengths", "gzip", "+5", "1_0", "over-length",
        "103", "bad-name", "str-body"])
def test_app_response_mistakes_give_500_before_any_byte(loop: FakeClockLoop, app: App,
                                                        caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    """Finding 3: app mistakes went out as broken framing on a kept-alive connection."""
    h = Harness(loop, app)
    out = h.feed(GET + GET)
    status, fields, body = split_response(out)
    assert status == b"HTTP/1.1 500 Internal Server Error" and fields[b"connection"] == b"close"
    assert body == b"Internal Server Error" and h.transport.closed  # the pipelined GET: never
    assert "Exception in ASGI application" in caplog.text


def test_tiny_chunks_are_decoded_only_up_to_the_high_water_mark(loop: FakeClockLoop) -> None:
    """Finding 4: a burst of one-byte chunks is decoded no further than HIGH_WATER_LIMIT bytes
    of body waiting for the app; then reading pauses until the app takes them."""
    gate = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await gate.wait()
        await echo_app(scope, receive, send)

    chunks = HIGH_WATER_LIMIT + 5000
    h = Harness(loop, app)
    h.feed(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
           + b"1\r\nx\r\n" * chunks + b"0\r\n\r\n")
    cycle = h.protocol.cycle
    assert cycle is not None and len(cycle.body) == HIGH_WATER_LIMIT
    assert h.transport.reading_paused and len(h.protocol.buffer) == 5000 * 6 + 5
    gate.set()
    h.spin(50)
    assert json.loads(split_response(h.transport.take())[2])["body"] == "x" * chunks
    assert not h.transport.reading_paused and h.protocol.phase == "head"


@pytest.mark.parametrize(("head", "status"), [
    (b"GET example.com:443 HTTP/1.1\r\nHost: x", 400),  # authority-form: CONNECT only
    (b"CONNECT /p HTTP/1.1\r\nHost: x", 400),
    (b"GET * HTTP/1.1\r\nHost: x", 400),  # asterisk-form: OPTIONS only
    (b"GET http:///p HTTP/1.1\r\nHost: x", 400),  # absolute-form without an authority
    (b"GET /#frag HTTP/1.1\r\nHost: x", 400),
    (b"GET p HTTP/1.1\r\nHost: x", 400),
    (b"GET / HTTP/1.1\r\nHost: a:b", 400),  # RFC 9112 §3.2: the port is digits
    (b"GET / HTTP/1.1\r\nHost: a\"b", 400),
    (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n"
     b"Transfer-Encoding: chunked", 501),  # one list over several lines (RFC 9110 §5.3)
    (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
     b"Transfer-Encoding: chunked", 400),
    (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;"
     + b"a=b;" * 1100 + b"a=b\r\nhello\r\n0", 400),  # chunk extensions over the limit
])
def test_strict_request_parsing(loop: FakeClockLoop, head: bytes, status: int) -> None:
    """Finding 5: request-target forms, Host values, Transfer-Encoding over several lines and
    chunk extensions past MAX_CHUNK_LINE in a single read are refused."""
    h = Harness(loop, echo_app)
    out = h.feed(head + b"\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 %d " % status) and h.transport.closed


@pytest.mark.parametrize(("target", "path", "query"), [
    (b"http://example.com/p?q=1", "/p", b"q=1"), (b"*", "*", b"")])
def test_absolute_and_asterisk_forms_are_served(loop: FakeClockLoop, target: bytes, path: str,
                                                query: bytes) -> None:
    h = Harness(loop, echo_app)
    out = h.feed(b"OPTIONS " + target + b" HTTP/1.1\r\nHost: example.com\r\n\r\n")
    echoed = json.loads(split_response(out)[2])
    assert (echoed["path"], echoed["query_string"]) == (path, query.decode())


@pytest.mark.parametrize("method", [b"GET", b"OPTIONS", b"CONNECT"])
@pytest.mark.parametrize("target", [
    b"/", b"/p?q=1", b"/p?", b"/?a?b", b"//x", b"/a%2Fb?c#d", b"/#", b"*", b"p", b"?q",
    b"http://h/p?q", b"http://h", b"h:443", b"h:443/p", b"/h:443"])
def test_origin_form_fast_path_splits_as_split_target(loop: FakeClockLoop, method: bytes,
                                                      target: bytes) -> None:
    """_read_head splits an origin-form target itself: the same answer as http1.split_target."""
    scopes: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scopes.append(scope)
        await hello_app(scope, receive, send)

    try:
        expected: tuple[bytes, bytes] | None = http1.split_target(method.decode(), target)
    except http1.BadTarget:
        expected = None
    out = Harness(loop, app).feed(method + b" " + target + b" HTTP/1.1\r\nHost: h:443\r\n\r\n")
    if expected is None:
        assert out.startswith(b"HTTP/1.1 400 ") and not scopes
    else:
        assert (scopes[0]["raw_path"], scopes[0]["query_string"]) == expected


def test_access_log_is_written_from_the_raw_target_when_the_response_starts(
        loop: FakeClockLoop, caplog: pytest.LogCaptureFixture) -> None:
    """Finding 6: one line format (asgi.log_access), from the raw path, at response start."""
    caplog.set_level("INFO", logger="toyservers.access")
    gate = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await gate.wait()
        await send({"type": "http.response.body", "body": b""})

    h = Harness(loop, app)
    h.feed(b"GET /a%0d%0ab?q=%1b HTTP/1.1\r\nHost: x\r\n\r\n")
    lines = [r.getMessage() for r in caplog.records if r.name == "toyservers.access"]
    assert lines == ['127.0.0.1:50000 - "GET /a%0d%0ab?q=%1b HTTP/1.1" 201']  # body not sent


# --- end to end: the real server on 127.0.0.1 ------------------------------------------------


async def e2e_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await echo_app(scope, receive, send)
        return
    if scope["path"] == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(3):
            await send({"type": "http.response.body", "body": b"part%d;" % i, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif scope["path"] == "/sleep":
        await asyncio.sleep(0.2)
        await hello_app(scope, receive, send)
    elif scope["path"] == "/raise":
        raise {b"exit": SystemExit(1), b"interrupt": KeyboardInterrupt(),
               b"cancel": asyncio.CancelledError()}[scope["query_string"]]
    else:
        await echo_app(scope, receive, send)


@pytest.fixture(scope="module")
def server_port() -> Iterator[int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, asyncio.Event] = {}

    async def main() -> None:
        holder["shutdown"] = asyncio.Event()
        config = Config(access_log=False, timeout_headers=1.0, timeout_keep_alive=2.0,
                        timeout_graceful_shutdown=2.0)
        await serve(e2e_app, config, sock=sock, shutdown=holder["shutdown"],
                    ready=lambda address: ready.set())

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(10), "toy-raw did not start"
    yield port
    loop.call_soon_threadsafe(holder["shutdown"].set)
    thread.join(10)
    assert not thread.is_alive()
    loop.close()


def raw_exchange(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Send ``data``, then read until the server closes (or ``timeout`` seconds pass)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):  # a timeout or a reset fails the test
            chunks.append(chunk)
        return b"".join(chunks)


def test_e2e_httpx_get_post_chunked_and_keep_alive(server_port: int) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{server_port}", timeout=5) as client:
        r = client.get("/a%20b", params={"q": "1"})
        assert r.status_code == 200 and r.json()["path"] == "/a b"
        r = client.post("/p", content=b'{"id": 1}')
        assert r.json()["body"] == '{"id": 1}'
        r = client.post("/c", content=iter([b"one", b"two"]))  # sent chunked
        assert r.json()["body"] == "onetwo"
        r = client.get("/stream")
        assert r.headers["transfer-encoding"] == "chunked" and r.text == "part0;part1;part2;"
        assert r.headers["server"] == "toyservers"


def test_e2e_raw_pipelining_and_bad_requests(server_port: int) -> None:
    out = raw_exchange(server_port, b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\n"
                                    b"GET /sleep HTTP/1.1\r\nHost: x\r\n\r\n"
                                    b"GET /3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert out.count(b"HTTP/1.1 200 OK") == 3
    assert out.index(b'"path": "/1"') < out.index(b"hello") < out.index(b'"path": "/3"')
    out = raw_exchange(server_port, b"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n" + GET)
    assert out.startswith(b"HTTP/1.1 400 ") and out.count(b"HTTP/1.1") == 1
    out = raw_exchange(server_port, b"GET / HTTP/2.0\r\nHost: x\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 505 ")


@pytest.mark.parametrize("exc", ["exit", "interrupt", "cancel"])
def test_e2e_app_base_exception_gets_500_and_the_server_keeps_serving(server_port: int,
                                                                      exc: str) -> None:
    out = raw_exchange(server_port, b"GET /raise?%s HTTP/1.1\r\nHost: x\r\n\r\n" % exc.encode())
    assert out.startswith(b"HTTP/1.1 500 ") and b"connection: close" in out
    assert httpx.get(f"http://127.0.0.1:{server_port}/after", timeout=5).status_code == 200


def test_e2e_slow_headers_get_408(server_port: int) -> None:
    out = raw_exchange(server_port, b"GET / HTTP/1.1\r\nHost: x\r\n")
    assert out.startswith(b"HTTP/1.1 408 ")


def test_e2e_stalled_connection_does_not_block_others(server_port: int) -> None:
    with socket.create_connection(("127.0.0.1", server_port), timeout=5) as stalled:
        stalled.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
        r = httpx.get(f"http://127.0.0.1:{server_port}/other", timeout=5)
        assert r.status_code == 200


def test_e2e_curl(server_port: int) -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl not installed")
    result = subprocess.run(
        [curl, "-sS", "--max-time", "5", "-X", "POST", "-H", "Transfer-Encoding: chunked",
         "-d", "hello", f"http://127.0.0.1:{server_port}/curl"],
        capture_output=True, timeout=10, check=True)
    assert json.loads(result.stdout)["body"] == "hello"


@pytest.mark.wrk
def test_e2e_wrk_runs_without_errors(server_port: int) -> None:
    wrk = shutil.which("wrk")
    if wrk is None:
        pytest.skip("wrk not installed")
    result = subprocess.run([wrk, "-t1", "-c4", "-d1s", f"http://127.0.0.1:{server_port}/"],
                            capture_output=True, text=True, timeout=30, check=True)
    assert "requests in" in result.stdout
    requests = int(result.stdout.split(" requests in")[0].split()[-1])
    assert requests > 0
    assert "Socket errors" not in result.stdout and "Non-2xx" not in result.stdout
