"""toy-httptools: protocol tests on a mock transport and a fake clock, then end to end on loopback.

The protocol tests drive ``HttpToolsProtocol`` by hand (``data_received`` with raw bytes, the
fake clock for deadlines) so keep-alive, pipelining and backpressure are deterministic. The
end-to-end tests serve on a socket bound to port 0 in a background thread and talk to it with
httpx, raw sockets, curl and wrk.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.echo_app import app as echo_app
from tests.support.mock import FakeClockLoop, MockTransport
from toyservers._server import ServerState
from toyservers.asgi import ClientDisconnected
from toyservers.config import Config
from toyservers.httptools_server import HIGH_WATER_LIMIT, HttpToolsProtocol, serve

HOST = b"Host: test\r\n"
TIMEOUT = 5.0  # seconds, for every network call


def get(path: bytes = b"/", extra: bytes = b"") -> bytes:
    return b"GET " + path + b" HTTP/1.1\r\n" + HOST + extra + b"\r\n"


def post(body: bytes, extra: bytes = b"") -> bytes:
    return (b"POST / HTTP/1.1\r\n" + HOST + b"Content-Length: %d\r\n" % len(body) + extra
            + b"\r\n" + body)


def statuses(data: bytes) -> list[int]:
    """Status codes of the responses in ``data`` (the echo bodies never hold a status line)."""
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)]


# --- protocol tests: mock transport, fake clock -----------------------------------------------


class Harness:
    """A protocol on a MockTransport inside a FakeClockLoop; ``run()`` lets pending work run."""

    def __init__(self, app: Any = echo_app, **config: Any) -> None:
        self.loop = FakeClockLoop()
        asyncio.set_event_loop(self.loop)
        self.state = ServerState(app, Config(**{"access_log": False, **config}), {})
        self.transport = MockTransport()
        self.protocol = self.loop.run_until_complete(self._make())
        self.protocol.connection_made(self.transport)

    async def _make(self) -> HttpToolsProtocol:
        return HttpToolsProtocol(self.state)

    def send(self, data: bytes) -> bytes:
        """Feed ``data`` from inside the running loop, as a real transport does."""
        self.loop.call_soon(self.protocol.data_received, data)
        self.run()
        return self.transport.take()

    def run(self) -> None:
        for _ in range(20):
            self.loop.run_until_complete(asyncio.sleep(0))

    def advance(self, seconds: float) -> None:
        self.loop.advance(seconds)
        self.run()

    def close(self) -> None:
        self.protocol.connection_lost(None)
        self.run()
        self.loop.close()
        asyncio.set_event_loop(None)


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = Harness()
    yield h
    h.close()


def test_post_is_echoed_with_content_length_in_one_write(harness: Harness) -> None:
    out = harness.send(post(b'{"id": 1}'))
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"content-length: %d" % len(body) in head
    assert b"date: " in head and b"server: toyservers" in head
    assert json.loads(body)["body"] == '{"id": 1}'
    assert not harness.transport.closed


def test_scope_fields() -> None:
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.update(scope)
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body"})

    h = Harness(app, root_path="/api")
    h.state.lifespan_state["db"] = "up"
    try:
        out = h.send(b"GET /a%20b?x=1 HTTP/1.1\r\nHost: t\r\nX-Two: 2\r\n\r\n")
    finally:
        h.close()
    assert statuses(out) == [204] and b"transfer-encoding" not in out
    assert seen["path"] == "/api/a b" and seen["raw_path"] == b"/api/a%20b"
    assert seen["query_string"] == b"x=1" and seen["root_path"] == "/api"
    assert seen["headers"] == [(b"host", b"t"), (b"x-two", b"2")]
    assert seen["asgi"] == {"version": "3.0", "spec_version": "2.4"}
    assert seen["http_version"] == "1.1" and seen["method"] == "GET"
    assert seen["client"] == ("127.0.0.1", 50000) and seen["server"] == ("127.0.0.1", 8000)
    assert seen["state"] == {"db": "up"} and seen["state"] is not h.state.lifespan_state


def test_keep_alive_timer_closes_an_idle_connection(harness: Harness) -> None:
    assert statuses(harness.send(get())) == [200]
    harness.advance(4.0)
    assert statuses(harness.send(get())) == [200]  # activity pushes the deadline back
    harness.advance(4.0)
    assert not harness.transport.closed
    harness.advance(1.5)
    assert harness.transport.closed


def test_pipelined_requests_are_answered_in_order(harness: Harness) -> None:
    out = harness.send(get(b"/one") + post(b"two") + get(b"/three"))
    paths = [json.loads(part.split(b"\r\n\r\n", 1)[1].split(b"HTTP/1.1")[0])["path"]
             for part in out.split(b"HTTP/1.1 200 OK")[1:]]
    assert paths == ["/one", "/", "/three"]


def test_pipelined_requests_wait_for_a_slow_response() -> None:
    release = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/slow":
            await release.wait()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"1")]})
        await send({"type": "http.response.body", "body": scope["path"][1:2].encode()})

    h = Harness(app)
    try:
        out = h.send(get(b"/slow") + get(b"/fast"))
        assert out == b"" and h.transport.reading_paused
        release.set()
        h.run()
        out = h.transport.take()
        assert out.index(b"\r\n\r\ns") < out.index(b"\r\n\r\nf")
        assert not h.transport.reading_paused
    finally:
        h.close()


def test_reading_pauses_above_the_high_water_mark_until_the_app_reads() -> None:
    got: list[int] = []
    gate = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await gate.wait()
        while True:
            message = await receive()
            got.append(len(message["body"]))
            if not message["more_body"]:
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    h = Harness(app)
    size = 3 * HIGH_WATER_LIMIT
    try:
        h.send(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % size)
        h.send(b"x" * (HIGH_WATER_LIMIT + 1))
        assert h.transport.reading_paused
        gate.set()
        h.run()
        assert not h.transport.reading_paused
        out = h.send(b"x" * (size - HIGH_WATER_LIMIT - 1))
        assert sum(got) == size
        # the whole body came in one message: ResponseFramer gives it a Content-Length
        assert out.endswith(b"\r\n\r\nok") and b"content-length: 2\r\n" in out
    finally:
        h.close()


def test_send_waits_while_the_transport_is_paused() -> None:
    sent: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for part in ("a", "b"):
            await send({"type": "http.response.body", "body": part.encode(), "more_body": True})
            sent.append(part)
        await send({"type": "http.response.body"})

    h = Harness(app)
    try:
        h.protocol.pause_writing()
        h.send(get())
        assert sent == []
        h.protocol.resume_writing()
        h.run()
        assert sent == ["a", "b"]
    finally:
        h.close()


def test_expect_100_continue_only_when_the_body_is_asked_for(harness: Harness) -> None:
    out = harness.send(b"POST / HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
                       b"Content-Length: 5\r\n\r\n")
    assert out == b"HTTP/1.1 100 Continue\r\n\r\n"
    out = harness.send(b"hello")
    assert statuses(out) == [200] and b'"body": "hello"' in out


def test_no_100_continue_for_http_1_0(harness: Harness) -> None:
    out = harness.send(b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
    assert out == b""
    assert statuses(harness.send(b"ok")) == [200]


def test_header_deadline_gives_408(harness: Harness) -> None:
    harness.send(b"GET / HTTP/1.1\r\nHost: t\r\n")
    harness.advance(9.0)
    assert harness.transport.take() == b""
    harness.advance(1.5)
    out = harness.transport.take()
    assert statuses(out) == [408] and b"connection: close" in out and harness.transport.closed


def test_body_inactivity_gives_408_before_the_response() -> None:
    h = Harness(timeout_body=2.0)
    try:
        h.send(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc")
        h.advance(1.5)
        h.send(b"def")  # activity: the deadline moves
        h.advance(1.5)
        assert not h.transport.closed
        h.advance(1.0)
        assert statuses(h.transport.take()) == [408] and h.transport.closed
    finally:
        h.close()


@pytest.mark.parametrize("raw, status", [
    (b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
    (b"GET / HTTP/2.0\r\nHost: t\r\n\r\n", 505),
    (b"GET / HTTP/1.1\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n", 414),
    (b"GET / HTTP/1.1\r\nHost: t\r\nX: " + b"a" * 17000, 431),
    (b"GET / HTTP/1.1\r\nHost: t\r\nX: " + b"a" * 17000 + b"\r\n\r\n", 431),
    (b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n"
     + b"".join(b"T%d: %s\r\n" % (i, b"v" * 1000) for i in range(20)) + b"\r\n", 431),
    (b"BREW / HTTP/1.1\r\nHost: t\r\n\r\n", 501),
    (b"G(T / HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    # issue 8, finding 6: RFC 9112 §3.2 request-target forms, §3.2 Host values, CONNECT,
    # Transfer-Encoding over several lines, chunk extensions over the limit in one read.
    (b"GET * HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    (b"GET ftp://t/x HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    (b"GET t:80 HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    (b"GET http:///x HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400),
    (b"CONNECT t:443 HTTP/1.1\r\nHost: t:443\r\n\r\n", 501),
    (b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
     b"Transfer-Encoding: gzip\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n", 501),
    (b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5;"
     + b"e=v;" * 5000 + b"\r\nhello\r\n0\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5;"
     + b"e=v;" * 5000, 400),
])
def test_bad_requests_get_their_status_and_a_close(harness: Harness, raw: bytes, status: int
                                                   ) -> None:
    out = harness.send(raw + get(b"/smuggled"))
    assert statuses(out) == [status]
    assert b"connection: close" in out and harness.transport.closed


def test_header_block_over_the_limit_across_chunks_gets_431(harness: Harness) -> None:
    # Each chunk is under the 16 KiB limit; together they are over it.
    harness.send(b"GET / HTTP/1.1\r\nHost: t\r\nA: " + b"a" * 9000 + b"\r\n")
    out = harness.send(b"B: " + b"b" * 9000 + b"\r\n\r\n")
    assert statuses(out) == [431] and harness.transport.closed


def test_pipelined_head_over_the_limit_gets_431(harness: Harness) -> None:
    # The chunk that ends one request starts the next head; the chunk that ends that head is
    # small. The head is still over 16 KiB and must be refused.
    fields = b"".join(b"F%d: %s\r\n" % (i, b"v" * 1000) for i in range(40))
    first = harness.send(get(b"/a") + b"GET /b HTTP/1.1\r\nHost: t\r\n" + fields)
    out = harness.send(b"\r\n")  # (fed in slices, the head is refused before it ends)
    assert statuses(first + out) == [200, 431]
    assert harness.transport.closed


def test_error_after_a_good_request_waits_its_turn(harness: Harness) -> None:
    out = harness.send(get(b"/first") + b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n")
    assert statuses(out) == [200, 400] and harness.transport.closed


def test_app_errors_become_500_or_a_close() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/late":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"x", "more_body": True})
        raise RuntimeError("boom")

    for path, status in ((b"/early", 500), (b"/late", 200)):
        h = Harness(app)
        try:
            out = h.send(get(path))
            assert statuses(out) == [status] and h.transport.closed
        finally:
            h.close()


def test_graceful_shutdown_finishes_the_response_in_flight() -> None:
    release = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})

    h = Harness(app)
    try:
        h.send(get())
        h.protocol.shutdown()
        assert not h.transport.closed
        release.set()
        h.run()
        out = h.transport.take()
        assert statuses(out) == [200] and b"connection: close" in out and h.transport.closed
    finally:
        h.close()


def test_valid_target_forms_reach_the_app() -> None:
    seen: list[tuple[str, bytes, bytes]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((scope["method"], scope["raw_path"], scope["query_string"]))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body"})

    h = Harness(app)
    try:
        out = h.send(b"OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n"
                     b"GET http://t:80/p?q=1 HTTP/1.1\r\nHost: t:80\r\n\r\n"
                     b"GET http://t HTTP/1.1\r\nHost: [::1]:8000\r\n\r\n")
    finally:
        h.close()
    assert statuses(out) == [204, 204, 204]
    assert seen == [("OPTIONS", b"*", b""), ("GET", b"/p", b"q=1"), ("GET", b"/", b"")]


def test_chunk_extensions_within_the_limit_are_ignored(harness: Harness) -> None:
    ext = b";e=" + b"v" * 4000
    out = harness.send(b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                       b"3" + ext + b"\r\nabc\r\n")
    out += harness.send(b"2" + ext + b"\r\nde\r\n0" + ext + b"\r\n\r\n")
    assert statuses(out) == [200] and b'"body": "abcde"' in out


def test_chunk_extension_spread_over_reads_is_limited(harness: Harness) -> None:
    harness.send(b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5;e=")
    out = b""
    for _ in range(4):
        out += harness.send(b"v" * 1500)
    assert statuses(out) == [400] and harness.transport.closed


def test_idle_connection_that_never_sent_a_byte_is_closed() -> None:
    # issue 8, finding 1: the base HTTPProtocol starts the idle deadline in connection_made
    h = Harness(timeout_keep_alive=5.0)
    try:
        h.advance(4.5)
        assert not h.transport.closed
        h.advance(1.0)
        assert h.transport.closed and h.transport.take() == b""
    finally:
        h.close()


def test_send_after_the_client_left_raises_client_disconnected() -> None:
    # issue 8, finding 2: ASGI HTTP 2.4, "send() on a closed connection ... raise ... OSError"
    outcome: list[object] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        assert (await receive())["type"] == "http.request"
        outcome.append((await receive())["type"])
        try:
            await send({"type": "http.response.body", "body": b"more", "more_body": True})
        except OSError as exc:
            outcome.append(exc)

    h = Harness(app)
    out = h.send(get())
    assert b"first" in out
    h.close()
    assert outcome[0] == "http.disconnect" and isinstance(outcome[1], ClientDisconnected)


def test_pipelined_requests_behind_a_response_in_flight_pause_reading() -> None:
    # issue 8, finding 3: the requests arrive in later reads than the slow one
    release = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/slow":
            await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"."})

    h = Harness(app)
    try:
        assert h.send(get(b"/slow")) == b"" and not h.transport.reading_paused
        h.send(get(b"/x") * 100)
        assert h.transport.reading_paused and len(h.protocol.pipeline) == 100
        release.set()
        for _ in range(10):
            h.run()
        assert statuses(h.transport.take()) == [200] * 101
        assert not h.transport.reading_paused and not h.protocol.pipeline
    finally:
        h.close()


def test_graceful_shutdown_reads_the_rest_of_an_upload_in_flight(harness: Harness) -> None:
    # issue 8, finding 4: the body of the request being served is read after shutdown()
    harness.send(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc")
    harness.protocol.shutdown()
    assert not harness.transport.closed
    out = harness.send(b"defghij" + get(b"/next"))
    assert statuses(out) == [200] and b'"body": "abcdefghij"' in out
    assert b"connection: close" in out and harness.transport.closed


@pytest.mark.parametrize("start, bodies", [
    ({"status": 103, "headers": [(b"content-length", b"2")]}, [{"body": b"ok"}]),
    ({"status": 1000, "headers": []}, [{"body": b"ok"}]),
    ({"status": 200, "headers": [(b"content-length", b"5"), (b"content-length", b"6")]},
     [{"body": b"hello"}]),
    ({"status": 200, "headers": [(b"content-length", b"+5")]}, [{"body": b"hello"}]),
    ({"status": 200, "headers": [(b"x-a", b"v\r\nx-injected: 1")]}, [{"body": b"ok"}]),
    ({"status": 200, "headers": [(b"x bad", b"1")]}, [{"body": b"ok"}]),
    ({"status": 200, "headers": [(b"transfer-encoding", b"gzip")]}, [{"body": b"ok"}]),
    ({"status": 200, "headers": []}, [{"body": "text"}]),
])
def test_app_response_mistakes_get_500_and_a_close(start: dict[str, Any],
                                                   bodies: list[dict[str, Any]]) -> None:
    # issue 8, finding 5: checked before anything is written, so run_asgi's policy answers 500
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", **start})
        for body in bodies:
            await send({"type": "http.response.body", **body})

    h = Harness(app)
    try:
        out = h.send(get() + get(b"/next"))
        assert statuses(out) == [500] and out.count(b"HTTP/1.1") == 1
        assert b"connection: close" in out and h.transport.closed
    finally:
        h.close()


def test_a_response_shorter_than_its_content_length_closes() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"5")]})
        await send({"type": "http.response.body", "body": b"abc"})

    h = Harness(app)
    try:
        out = h.send(get() + get(b"/next"))
        assert statuses(out) == [200] and out.endswith(b"abc") and h.transport.closed
    finally:
        h.close()


def test_access_log_uses_the_raw_target(caplog: pytest.LogCaptureFixture) -> None:
    # issue 8, finding 7: one format (asgi.log_access); %0d%0a stays encoded in the line
    caplog.set_level("INFO", logger="toyservers.access")
    h = Harness(access_log=True)
    try:
        assert statuses(h.send(get(b"/a%0d%0ab?q=%1b"))) == [200]
    finally:
        h.close()
    assert caplog.messages == ['127.0.0.1:50000 - "GET /a%0d%0ab?q=%1b HTTP/1.1" 200']


def test_http_1_0_is_close_delimited_without_a_length() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if scope["path"] == "/stream":
            await send({"type": "http.response.body", "body": b"ol", "more_body": True})
        await send({"type": "http.response.body", "body": b"d" if scope["path"] == "/stream"
                    else b"old"})

    h = Harness(app)
    try:
        out = h.send(b"GET /whole HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        assert b"content-length: 3\r\nconnection: keep-alive\r\n" in out  # RFC 9112 §C.2.2
        assert out.endswith(b"\r\n\r\nold") and not h.transport.closed
        out = h.send(b"GET /stream HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        assert b"transfer-encoding" not in out and b"content-length" not in out
        assert b"connection: close" in out
        assert out.endswith(b"\r\n\r\nold") and h.transport.closed
    finally:
        h.close()


# --- end to end over 127.0.0.1 ----------------------------------------------------------------


def url(address: tuple[str, int], path: str = "") -> str:
    return f"http://{address[0]}:{address[1]}{path}"


@pytest.fixture(scope="module")
def address() -> Iterator[tuple[str, int]]:
    """Serve the echo app on port 0 in a thread for the module; yield its address."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop = asyncio.Event()
    config = Config(access_log=False, timeout_keep_alive=5.0)
    thread = threading.Thread(target=loop.run_until_complete,
                              args=(serve(echo_app, config, sock=sock, ready=lambda _: ready.set(),
                                          shutdown=stop),))
    thread.start()
    assert ready.wait(TIMEOUT)
    yield sock.getsockname()
    loop.call_soon_threadsafe(stop.set)
    thread.join(TIMEOUT)
    loop.close()


def test_httpx_keeps_one_connection_for_many_requests(address: tuple[str, int]) -> None:
    base = url(address)
    with httpx.Client(timeout=TIMEOUT) as client:
        for i in range(20):
            response = client.post(f"{base}/n/{i}", json={"i": i})
            assert response.status_code == 200
            assert response.json()["path"] == f"/n/{i}"
            assert json.loads(response.json()["body"]) == {"i": i}
        head = client.head(base)
        assert head.content == b"" and int(head.headers["content-length"]) > 0


def test_raw_socket_chunked_request_and_connection_close(address: tuple[str, int]) -> None:
    with socket.create_connection(address, timeout=TIMEOUT) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
                     b"Connection: close\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert statuses(data) == [200] and b'"body": "abcde"' in data
    assert b"connection: close" in data


def test_a_stalled_client_blocks_nobody(address: tuple[str, int]) -> None:
    with socket.create_connection(address, timeout=TIMEOUT) as stalled:
        stalled.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nab")
        response = httpx.get(url(address, "/"), timeout=TIMEOUT)
        assert response.status_code == 200


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl(address: tuple[str, int]) -> None:
    result = subprocess.run(
        ["curl", "-sS", "-m", "5", "-H", "Content-Type: application/json", "-d", '{"a": 1}',
         url(address, "/curl?q=1")], capture_output=True, timeout=10, check=True)
    echoed = json.loads(result.stdout)
    assert echoed["path"] == "/curl" and echoed["query_string"] == "q=1"
    assert echoed["body"] == '{"a": 1}'


@pytest.mark.wrk
@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")
def test_wrk_short_run_has_no_errors(address: tuple[str, int]) -> None:
    result = subprocess.run(["wrk", "-t1", "-c4", "-d1s", url(address, "/")],
                            capture_output=True, text=True, timeout=30, check=True)
    requests = int(result.stdout.split(" requests in ")[0].split()[-1])
    assert requests > 0, result.stdout
    assert "Socket errors" not in result.stdout and "Non-2xx" not in result.stdout, result.stdout


def test_random_bytes_never_kill_the_server(address: tuple[str, int]) -> None:
    import random

    rng = random.Random(1234)
    started = time.monotonic()
    for _ in range(40):
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
        if rng.random() < 0.5:
            blob = get()[: rng.randrange(10)] + blob
        with socket.create_connection(address, timeout=TIMEOUT) as sock:
            sock.sendall(blob)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
    assert time.monotonic() - started < 30
    assert httpx.get(url(address, "/alive"), timeout=TIMEOUT).status_code == 200


def test_access_log_line_and_concurrency_limit(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="toyservers.access")
    h = Harness(access_log=True, limit_concurrency=0)
    try:
        out = h.send(get(b"/logged?q=1"))
    finally:
        h.close()
    assert statuses(out) == [503] and h.transport.closed
    assert '127.0.0.1:50000 - "GET /logged?q=1 HTTP/1.1" 503' in caplog.messages
