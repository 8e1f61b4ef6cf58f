"""The behaviour every toy HTTP/1.1 server shares, tested once against all three protocols.

Each test runs against toy-raw, toy-h11 and toy-httptools (the ``toy_server`` fixture), on the
one harness of ``tests/support/protocol_harness.py``: a mock transport and a fake clock, so
keep-alive, deadlines, pipelining and backpressure are deterministic. Where a server decides
differently for a reason of its own (h11 closes every HTTP/1.0 exchange, say), the expectation
is parametrized by server or the case is a strict xfail with the reason. What only one server
does stays in its own file (test_raw_asyncio.py, test_h11_server.py, test_httptools_server.py).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.echo_app import app as echo_app
from tests.support.protocol_harness import (
    GET,
    PROTOCOLS,
    App,
    Harness,
    after,
    body_reader,
    hello_app,
    split_response,
    statuses,
)
from toyservers.asgi import ClientDisconnected
from toyservers.flow_control import HIGH_WATER_LIMIT

Connect = Callable[..., Harness]
POST = b"POST / HTTP/1.1\r\nHost: x\r\n"
CHUNKED = POST + b"Transfer-Encoding: chunked\r\n\r\n"


def servers_except(xfail: dict[str, str]) -> pytest.MarkDecorator:
    """Run on every toy server; those named in ``xfail`` are ``xfail(strict=True)`` there with
    the reason given (a behaviour that server does not have yet)."""
    return pytest.mark.parametrize("toy_server", [
        pytest.param(name, id=name, marks=[pytest.mark.xfail(strict=True, reason=xfail[name])]
                     if name in xfail else []) for name in PROTOCOLS])


def sized(body: bytes) -> App:
    """An app answering 200 with ``body`` and its Content-Length."""
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})
    return app


def gated(gates: list[asyncio.Event], started: list[str]) -> App:
    """An app that records its path, waits for its own gate, then answers with the path."""
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        started.append(scope["path"])
        gate = asyncio.Event()
        gates.append(gate)
        await gate.wait()
        await sized(scope["path"].encode())(scope, receive, send)
    return app


# --- responses ---------------------------------------------------------------------------------


def test_response_gets_length_date_server_in_one_write_and_stays_open(connect: Connect) -> None:
    h = connect(hello_app)
    status, fields, body = split_response(h.feed(GET))
    assert status == b"HTTP/1.1 200 OK"
    assert fields[b"content-length"] == b"5" and body == b"hello"
    assert b"date" in fields and fields[b"server"] == b"toyservers"
    assert b"connection" not in fields and not h.closed
    assert len(h.transport.writes) == 1  # head and body leave together
    assert h.state.tasks == set()  # the request's task is done and forgotten


def test_app_headers_win_over_date_and_server(connect: Connect) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"server", b"mine"), (b"content-length", b"0")]})
        await send({"type": "http.response.body"})

    out = connect(app).feed(GET).lower()
    assert out.count(b"server:") == 1 and b"server: mine" in out and b"date:" in out


def test_status_gets_its_reason_phrase(connect: Connect) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 201,
                    "headers": [[b"content-length", b"5"]]})
        await send({"type": "http.response.body", "body": b"hello"})

    out = connect(app).feed(GET)
    assert out.startswith(b"HTTP/1.1 201 Created\r\n") and out.endswith(b"\r\n\r\nhello")
    assert out.lower().count(b"content-length: 5\r\n") == 1


def test_streamed_response_is_chunked(connect: Connect) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for part in (b"a", b"bc"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    h = connect(app)
    _, fields, body = split_response(h.feed(GET))
    assert fields[b"transfer-encoding"] == b"chunked" and b"content-length" not in fields
    assert body == b"1\r\na\r\n2\r\nbc\r\n0\r\n\r\n" and not h.closed


@pytest.mark.parametrize(("request_line", "status"), [(b"HEAD / HTTP/1.1", 200),
                                                      (b"GET / HTTP/1.1", 204),
                                                      (b"GET / HTTP/1.1", 304)])
def test_responses_without_a_body(connect: Connect, request_line: bytes, status: int) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = [(b"content-length", b"5")] if status == 200 else []
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"hello" if status == 200 else b""})

    h = connect(app)
    _, fields, body = split_response(h.feed(request_line + b"\r\nHost: x\r\n\r\n" + GET))
    assert body.startswith(b"HTTP/1.1 ")  # the next response follows at once: no body bytes
    assert b"transfer-encoding" not in fields
    assert (fields.get(b"content-length") == b"5") == (status == 200)


# --- the scope ---------------------------------------------------------------------------------


def test_scope_is_complete(connect: Connect, toy_server: str) -> None:
    scopes: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scopes.append(scope)
        await hello_app(scope, receive, send)

    h = connect(app, root_path="/mnt")
    h.state.lifespan_state["db"] = "ok"
    h.feed(b"GET /caf%C3%A9/x%2Fy?q=%20 HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n\r\n")
    scope = scopes[0]
    assert scope["type"] == "http" and scope["asgi"] == {"version": "3.0", "spec_version": "2.4"}
    assert scope["http_version"] == "1.1" and scope["method"] == "GET"
    assert scope["scheme"] == "http"
    assert scope["path"] == "/mnt/café/x/y" and scope["raw_path"] == b"/mnt/caf%C3%A9/x%2Fy"
    assert scope["root_path"] == "/mnt" and scope["query_string"] == b"q=%20"
    assert scope["headers"] == [(b"host", b"h"), (b"x-a", b"1")]
    assert scope["client"] == ("127.0.0.1", 50000) and scope["server"] == ("127.0.0.1", 8000)
    assert scope["state"] == {"db": "ok"} and scope["state"] is not h.state.lifespan_state


def test_scope_of_an_http_1_0_request(connect: Connect) -> None:
    scopes: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scopes.append(scope)
        await hello_app(scope, receive, send)

    connect(app).feed(b"GET /p HTTP/1.0\r\n\r\n")
    assert scopes[0]["http_version"] == "1.0" and scopes[0]["headers"] == []


@pytest.mark.parametrize(("target", "path", "query"), [
    (b"http://example.com/p?q=1", "/p", b"q=1"), (b"*", "*", b"")])
def test_absolute_and_asterisk_forms_are_served(connect: Connect, target: bytes, path: str,
                                                query: bytes) -> None:
    out = connect(echo_app).feed(b"OPTIONS " + target + b" HTTP/1.1\r\nHost: example.com\r\n\r\n")
    echoed = json.loads(split_response(out)[2])
    assert (echoed["path"], echoed["query_string"]) == (path, query.decode())


# --- keep-alive and deadlines ------------------------------------------------------------------


def test_keep_alive_timer_closes_an_idle_connection_after_the_timeout(connect: Connect) -> None:
    h = connect(hello_app, timeout_keep_alive=5.0)
    h.feed(GET)
    h.advance(4.9)
    assert not h.closed
    assert statuses(h.feed(GET)) == [200]  # activity: a new timer starts after this response
    h.advance(4.9)
    assert not h.closed
    h.advance(0.2)
    assert h.closed and h.take() == b""  # closed silently


def test_connection_that_never_speaks_is_closed_after_the_keep_alive_timeout(
        connect: Connect) -> None:
    h = connect(hello_app, timeout_keep_alive=2.0)
    h.advance(1.9)
    assert not h.closed
    h.advance(0.2)
    assert h.closed and h.take() == b""


def test_header_deadline_counts_from_the_first_byte_and_gives_408(connect: Connect) -> None:
    h = connect(hello_app, timeout_headers=10.0)
    h.feed(b"GET / HTTP/1.1\r\n")
    h.advance(6)
    h.feed(b"Host: x\r\n")  # trickling bytes do not extend the deadline
    h.advance(3.9)
    assert h.take() == b"" and not h.closed
    h.advance(0.2)
    out = h.take()
    assert statuses(out) == [408] and b"connection: close" in out.lower() and h.closed


def test_body_inactivity_deadline_gives_408_and_disconnects_the_app(connect: Connect) -> None:
    messages: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        while True:
            messages.append(await receive())
            if messages[-1]["type"] == "http.disconnect":
                return

    h = connect(app, timeout_body=3.0)
    h.feed(POST + b"Content-Length: 10\r\n\r\nabc")
    h.advance(2.5)
    h.feed(b"def")  # activity resets the inactivity deadline
    h.advance(2.5)
    assert h.take() == b"" and not h.closed
    h.advance(1)
    assert statuses(h.take()) == [408] and h.closed
    assert messages[-1] == {"type": "http.disconnect"}
    assert b"".join(m.get("body", b"") for m in messages) == b"abcdef"


def test_empty_lines_before_a_request_line_are_ignored(connect: Connect) -> None:
    h = connect(hello_app)
    assert statuses(h.feed(b"\r\n\r\n" + GET)) == [200]  # RFC 9112 §2.2
    assert h.feed(b"\r\n") == b"" and statuses(h.feed(GET)) == [200]
    assert not h.closed


def test_empty_lines_cannot_hold_a_connection_open(connect: Connect) -> None:
    h = connect(hello_app, timeout_headers=2.0, timeout_keep_alive=5.0)
    for _ in range(3):
        h.feed(b"\r\n")
        h.advance(1.0)
    h.advance(2.1)
    assert h.closed


# --- pipelining and backpressure ---------------------------------------------------------------


def test_pipelined_requests_are_answered_in_order_one_at_a_time(connect: Connect) -> None:
    gates: list[asyncio.Event] = []
    started: list[str] = []
    h = connect(gated(gates, started))
    out = h.feed(b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n"
                 b"GET /3 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert out == b"" and started == ["/1"]  # the second waits until the first is answered
    gates[0].set()
    h.spin()
    assert started == ["/1", "/2"] and h.take().endswith(b"/1")
    gates[1].set()
    h.spin()
    gates[2].set()
    h.spin()
    out = h.take()
    assert out.index(b"\r\n\r\n/2") < out.index(b"\r\n\r\n/3") and statuses(out) == [200, 200]
    assert not h.closed


def test_pipelined_requests_of_several_kinds_are_answered_in_order(connect: Connect) -> None:
    h = connect(echo_app)
    out = h.feed(b"GET /one HTTP/1.1\r\nHost: x\r\n\r\n" + POST
                 + b"Content-Length: 3\r\n\r\ntwo" + b"GET /three HTTP/1.1\r\nHost: x\r\n\r\n")
    bodies = [json.loads(part.split(b"\r\n\r\n", 1)[1]) for part in
              out.split(b"HTTP/1.1 200 OK")[1:]]
    assert [(b["path"], b["body"]) for b in bodies] == [("/one", ""), ("/", "two"),
                                                         ("/three", "")]


def test_pipelined_requests_behind_a_response_in_flight_pause_reading(connect: Connect,
                                                                     toy_server: str) -> None:
    gates: list[asyncio.Event] = []
    started: list[str] = []
    h = connect(gated(gates, started))
    assert h.feed(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n") == b"" and not h.reading_paused
    h.feed(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n" * 3)
    # The client is ahead of us: toy-h11 and toy-httptools stop reading at once; toy-raw
    # keeps a read-ahead buffer and stops only past HIGH_WATER_LIMIT (the test below).
    assert h.reading_paused == (toy_server != "toy-raw")
    for i in range(4):
        gates[i].set()
        h.spin()
    assert statuses(h.take()) == [200] * 4 and not h.reading_paused and not h.closed


def test_pipelined_burst_in_one_read_is_answered_in_full(connect: Connect) -> None:
    count = HIGH_WATER_LIMIT // 30 + 500  # past toy-raw's read-ahead limit too
    h = connect(hello_app)
    burst = b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n" * count
    # right after data_received returns: the requests not served yet hold reading
    assert h.call(lambda: (h.protocol.data_received(burst), h.reading_paused)[1])
    h.spin(4 * count)
    assert statuses(h.take()) == [200] * count
    assert not h.reading_paused and not h.closed


def test_read_ahead_of_many_pipelined_requests_pauses_reading(connect: Connect) -> None:
    gate = asyncio.Event()
    big = b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 2000 + b"\r\n\r\n"
    count = HIGH_WATER_LIMIT // len(big) + 3
    h = connect(after(gate, hello_app))
    h.feed(big * count)
    assert h.reading_paused
    gate.set()
    h.spin(20 * count)
    assert not h.reading_paused and statuses(h.take()) == [200] * count


def test_request_body_backpressure_pauses_and_resumes_reading(connect: Connect) -> None:
    gate = asyncio.Event()
    received: list[int] = []
    total = 3 * HIGH_WATER_LIMIT
    h = connect(body_reader(received, gate))
    h.feed(POST + b"Content-Length: %d\r\n\r\n" % total)
    h.feed(b"a" * (HIGH_WATER_LIMIT + 1))
    assert h.reading_paused  # the app has not read anything yet
    gate.set()
    h.spin()
    assert not h.reading_paused and sum(received) == HIGH_WATER_LIMIT + 1
    out = h.feed(b"a" * (total - HIGH_WATER_LIMIT - 1))
    assert sum(received) == total and statuses(out) == [200] and not h.closed


def test_send_waits_while_the_transport_is_paused_for_writing(connect: Connect) -> None:
    sent: list[int] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(3):
            await send({"type": "http.response.body", "body": b"x", "more_body": True})
            sent.append(i)
        await send({"type": "http.response.body", "body": b""})

    h = connect(app)
    h.transport.write_buffer_size = 10 * HIGH_WATER_LIMIT
    h.call(h.protocol.pause_writing)
    h.feed(GET)
    assert sent == []
    h.transport.write_buffer_size = 0
    h.call(h.protocol.resume_writing)
    h.spin()
    assert sent == [0, 1, 2]
    status, fields, body = split_response(h.take())
    assert fields[b"transfer-encoding"] == b"chunked"
    assert body.endswith(b"1\r\nx\r\n" * 3 + b"0\r\n\r\n")


def test_burst_of_tiny_chunks_pauses_reading_and_the_app_gets_the_whole_body(
        connect: Connect) -> None:
    gate = asyncio.Event()
    chunks = HIGH_WATER_LIMIT + 5000
    h = connect(after(gate, echo_app))
    h.feed(CHUNKED + b"1\r\nx\r\n" * chunks + b"0\r\n\r\n")
    assert h.reading_paused
    gate.set()
    h.spin(200)
    assert json.loads(split_response(h.take())[2])["body"] == "x" * chunks
    assert not h.reading_paused and not h.closed


# --- request bodies ----------------------------------------------------------------------------


def test_chunked_request_body_is_streamed_to_the_app(connect: Connect) -> None:
    h = connect(echo_app)
    h.feed(b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
    out = h.feed(b"2;ext=1\r\nde\r\n0\r\nTrailer: t\r\n\r\n")
    assert json.loads(split_response(out)[2])["body"] == "abcde"


def test_chunk_extensions_and_trailers_split_anywhere(connect: Connect) -> None:
    body = b'5;name=value;flag\r\nhello\r\n6;q="a \\"b\\""\r\n world\r\n0\r\nX-T: 1\r\n\r\n'
    for cut in range(len(body)):
        h = connect(echo_app)
        out = h.feed(CHUNKED + body[:cut]) + h.feed(body[cut:])
        assert statuses(out) == [200], cut
        assert json.loads(out.partition(b"\r\n\r\n")[2])["body"] == "hello world"


def test_chunk_extensions_within_the_limit_are_ignored(connect: Connect) -> None:
    ext = b";e=" + b"v" * 4000
    h = connect(echo_app)
    out = h.feed(CHUNKED + b"3" + ext + b"\r\nabc\r\n")
    out += h.feed(b"2" + ext + b"\r\nde\r\n0" + ext + b"\r\n\r\n")
    assert statuses(out) == [200] and b'"body": "abcde"' in out


def test_body_the_app_never_read_is_discarded(connect: Connect) -> None:
    """RFC 9112 §9.3: after a response that left a small request body unread, the server reads
    and discards the rest before the next request (http1_cycle.unread_body_closes)."""
    paths: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        paths.append(scope["path"])
        if scope["path"] == "/skip":
            await hello_app(scope, receive, send)
        else:
            await echo_app(scope, receive, send)

    h = connect(app)
    out = h.feed(b"POST /skip HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
    assert out.endswith(b"hello")
    out = h.feed(b"defghij" + b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok")
    assert paths == ["/skip", "/echo"] and json.loads(split_response(out)[2])["body"] == "ok"
    assert not h.closed


def test_unread_body_rest_in_a_later_read_is_dropped_then_the_next_request_served(
        connect: Connect) -> None:
    h = connect(hello_app, timeout_keep_alive=5.0)
    out = h.feed(POST + b"Content-Length: 10\r\n\r\nabc")
    assert statuses(out) == [200] and b"connection" not in out.lower()
    assert h.feed(b"defghij") == b"" and not h.closed  # dropped: the body has ended
    assert statuses(h.feed(GET)) == [200]
    h.advance(5.1)  # idle between requests: the keep-alive deadline, not the body one
    assert h.closed and h.take() == b""


def test_unread_declared_body_over_the_bound_closes_with_connection_close(
        connect: Connect) -> None:
    h = connect(hello_app)
    out = h.feed(POST + b"Content-Length: %d\r\n\r\nabc" % (HIGH_WATER_LIMIT + 4))
    assert statuses(out) == [200] and b"connection: close\r\n" in out.lower() and h.closed


def test_unread_chunked_body_closes_with_connection_close(connect: Connect) -> None:
    """Its rest has no known size: it is not read, the response says Connection: close."""
    h = connect(hello_app)
    out = h.feed(CHUNKED + b"3\r\nabc\r\n")
    assert statuses(out) == [200] and b"connection: close\r\n" in out.lower() and h.closed
    h = connect(echo_app)  # an app that reads the whole chunked body keeps the connection
    out = h.feed(CHUNKED + b"3\r\nabc\r\n0\r\n\r\n" + GET)
    assert statuses(out) == [200, 200] and not h.closed


@pytest.mark.parametrize("body", [b"", b"hello"])
def test_head_response_body_is_not_held_to_its_content_length(connect: Connect, body: bytes
                                                              ) -> None:
    """RFC 9110 §9.3.2: a HEAD response has no content, whatever its Content-Length says."""
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"3")]})
        await send({"type": "http.response.body", "body": body})

    h = connect(app)
    out = h.feed(b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n")
    assert statuses(out) == [200] and out.endswith(b"\r\n\r\n") and not h.closed
    assert b"content-length: 3\r\n" in out.lower()


def test_limits_give_413(connect: Connect) -> None:
    h = connect(hello_app, max_body_size=4)
    out = h.feed(POST + b"Content-Length: 5\r\n\r\nhello")
    assert statuses(out) == [413] and h.closed
    h = connect(hello_app, max_body_size=4)
    out = h.feed(CHUNKED + b"3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n")
    assert statuses(out) == [413] and h.closed
    h = connect(echo_app, max_body_size=5)  # exactly the limit is allowed
    assert statuses(h.feed(POST + b"Content-Length: 5\r\n\r\nhello")) == [200]
    assert statuses(h.feed(CHUNKED + b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")) == [200]


def test_limit_concurrency_answers_503(connect: Connect) -> None:
    h = connect(hello_app, limit_concurrency=1)
    assert statuses(h.feed(GET)) == [200]
    other = h.connect()
    out = other.feed(GET)
    assert statuses(out) == [503] and other.closed


# --- Expect: 100-continue ----------------------------------------------------------------------


def test_expect_100_continue_is_sent_only_when_the_app_reads(connect: Connect) -> None:
    gate = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await gate.wait()
        message = await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": message["body"]})

    h = connect(app)
    head = POST + b"Expect: 100-continue\r\nContent-Length: 2\r\n\r\n"
    assert h.feed(head) == b""  # not before the app asks for the body
    gate.set()
    h.spin()
    assert h.take() == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert h.feed(b"ok").endswith(b"\r\n\r\nok")


def test_no_100_continue_for_http_1_0(connect: Connect) -> None:
    h = connect(echo_app)  # RFC 9110 §10.1.1: never to an HTTP/1.0 client
    out = h.feed(b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
    assert out == b""
    out = h.feed(b"ok")
    assert b"100 Continue" not in out and statuses(out) == [200]


def test_no_100_continue_when_the_body_was_never_asked_for(connect: Connect) -> None:
    """RFC 9110 §10.1.1: the server may answer without reading the body; then it closes, and
    says so (the client may never send the body it offered: http1_cycle.unread_body_closes)."""
    h = connect(hello_app)
    out = h.feed(POST + b"Expect: 100-continue\r\nContent-Length: 5\r\n\r\n")
    assert b"100 Continue" not in out and statuses(out) == [200]
    assert split_response(out)[1][b"connection"] == b"close" and h.closed


def test_no_100_continue_once_the_response_has_begun(connect: Connect) -> None:
    """RFC 9110 §15.2: a 1xx only before the final response."""
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        message = await receive()
        await send({"type": "http.response.body", "body": message["body"]})

    h = connect(app)
    out = h.feed(POST + b"Expect: 100-continue\r\nContent-Length: 2\r\n\r\n")
    assert statuses(out) == [200] and b"100 Continue" not in out
    assert b"connection: close" in out.lower()  # the client may never send the body it offered
    out += h.feed(b"ok")
    assert b"100 Continue" not in out and out.endswith(b"5\r\nfirst\r\n2\r\nok\r\n0\r\n\r\n")


def test_100_continue_after_start_while_the_head_is_still_held(connect: Connect) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        message = await receive()  # nothing of the response is on the wire yet
        await send({"type": "http.response.body", "body": message["body"]})

    h = connect(app)
    out = h.feed(POST + b"Expect: 100-continue\r\nContent-Length: 2\r\n\r\n")
    assert out == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert statuses(h.feed(b"ok")) == [200] and not h.closed


# --- connection management ---------------------------------------------------------------------


def test_connection_close_from_the_client_is_honoured(connect: Connect) -> None:
    h = connect(hello_app)
    out = h.feed(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" + GET)
    assert statuses(out) == [200] and b"connection: close" in out.lower() and h.closed


def test_connection_close_from_the_app_closes(connect: Connect) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"0"), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": b""})

    h = connect(app)
    out = h.feed(GET + GET)
    assert statuses(out) == [200] and out.lower().count(b"connection: close") == 1 and h.closed


def test_http_1_0_closes_after_the_response(connect: Connect) -> None:
    h = connect(hello_app)
    out = h.feed(b"GET / HTTP/1.0\r\n\r\n")
    assert statuses(out) == [200] and out.endswith(b"\r\n\r\nhello") and h.closed
    assert split_response(out)[1][b"connection"] == b"close"


# RFC 9112 §9.3 lets a server close any HTTP/1.0 exchange; h11 always does (h11 decides it).
H11_CLOSES_HTTP_1_0 = {"toy-h11"}


def test_http_1_0_keep_alive_is_honoured_with_a_length(connect: Connect, toy_server: str
                                                       ) -> None:
    h = connect(hello_app)
    out = h.feed(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    assert statuses(out) == [200] and b"content-length: 5\r\n" in out.lower()
    if toy_server in H11_CLOSES_HTTP_1_0:
        assert b"connection: close" in out.lower() and h.closed
    else:
        assert b"connection: keep-alive\r\n" in out.lower() and not h.closed  # RFC 9112 §C.2.2


def test_http_1_0_streaming_response_is_close_delimited(connect: Connect) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        await send({"type": "http.response.body", "body": b"b"})

    h = connect(app)
    status, fields, body = split_response(h.feed(b"GET / HTTP/1.0\r\nConnection: keep-alive"
                                                 b"\r\n\r\n"))
    assert b"content-length" not in fields and b"transfer-encoding" not in fields
    assert body == b"ab" and h.closed


def test_graceful_shutdown_closes_idle_now_and_busy_after_the_response(connect: Connect
                                                                       ) -> None:
    gate = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["path"] == "/slow":
            await gate.wait()
        await hello_app(scope, receive, send)

    fresh = connect(app)
    fresh.shutdown()
    assert fresh.closed
    idle = connect(app)
    assert statuses(idle.feed(GET)) == [200]
    idle.shutdown()
    assert idle.closed
    busy = connect(app)
    busy.feed(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
    busy.shutdown()
    assert not busy.closed
    gate.set()
    busy.spin()
    out = busy.take()
    assert statuses(out) == [200] and busy.closed
    assert b"connection: close" in out.lower()  # RFC 9112 §9.6: the client is told


def test_idle_close_on_response_answers_one_more_request_then_closes(connect: Connect
                                                                      ) -> None:
    """Under ``idle_close_on_response`` an idle connection outlives the shutdown: the request
    a proxy sends on it meanwhile is answered, with Connection: close; one left unused closes
    at its keep-alive timeout, not before."""
    reused = connect(hello_app, idle_close_on_response=True, timeout_keep_alive=4)
    assert statuses(reused.feed(GET)) == [200]
    reused.shutdown()
    assert not reused.closed
    out = reused.feed(GET)
    assert statuses(out) == [200] and b"connection: close" in out.lower() and reused.closed
    unused = reused.connect()
    unused.shutdown()
    unused.advance(3.9)
    assert not unused.closed
    unused.advance(0.2)
    assert unused.closed and unused.take() == b""


def test_graceful_shutdown_reads_the_rest_of_an_upload_in_flight(connect: Connect) -> None:
    h = connect(echo_app)
    h.feed(POST + b"Content-Length: 10\r\n\r\nabc")
    h.shutdown()
    assert not h.closed
    out = h.feed(b"defghij" + GET)
    assert statuses(out) == [200] and b'"body": "abcdefghij"' in out
    assert b"connection: close" in out.lower() and h.closed


def test_disconnect_reaches_a_waiting_app_and_send_raises_client_disconnected(
        connect: Connect) -> None:
    seen: list[Any] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(await receive())
        seen.append(await receive())  # blocks until the client goes away
        try:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        except OSError as exc:
            seen.append(type(exc))

    h = connect(app)
    h.feed(GET)
    assert seen == [{"type": "http.request", "body": b"", "more_body": False}]
    h.lose()
    assert seen[1:] == [{"type": "http.disconnect"}, ClientDisconnected]  # asgi.py's
    assert h.protocol not in h.state.connections


def test_send_after_the_client_left_mid_response_raises_client_disconnected(
        connect: Connect) -> None:
    """ASGI HTTP 2.4: send() on a closed connection raises an OSError subclass."""
    raised: list[BaseException] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        assert await receive() == {"type": "http.request", "body": b"", "more_body": False}
        assert await receive() == {"type": "http.disconnect"}
        try:
            await send({"type": "http.response.body", "body": b"more", "more_body": True})
        except OSError as exc:
            raised.append(exc)

    h = connect(app)
    assert b"first" in h.feed(GET)
    h.lose()
    assert [type(exc) for exc in raised] == [ClientDisconnected]


# --- app errors --------------------------------------------------------------------------------


@pytest.mark.parametrize("when", ["before-start", "after-start", "no-response"])
def test_app_error_before_any_byte_gets_500_and_a_close(connect: Connect, when: str,
                                                        caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if when == "no-response":
            return
        if when == "after-start":  # the head waits for the first body: nothing written yet
            await send({"type": "http.response.start", "status": 200, "headers": []})
        raise RuntimeError("boom")

    h = connect(app)
    out = h.feed(GET + GET)
    status, fields, body = split_response(out)
    assert status == b"HTTP/1.1 500 Internal Server Error" and fields[b"connection"] == b"close"
    assert fields[b"content-length"] == b"21" and body == b"Internal Server Error"
    assert statuses(out) == [500] and h.closed  # the pipelined GET: never answered
    expected = "without starting the response" if when == "no-response" else \
        "Exception in ASGI application"
    assert expected in caplog.text


def test_app_error_mid_body_closes_the_connection(connect: Connect,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        raise RuntimeError("boom")

    h = connect(app)
    out = h.feed(GET + GET)
    assert statuses(out) == [200] and out.endswith(b"4\r\npart\r\n")  # no last-chunk
    assert h.closed and "Exception in ASGI application" in caplog.text


@pytest.mark.parametrize("exc", [SystemExit, KeyboardInterrupt, asyncio.CancelledError])
def test_app_base_exception_gets_500_and_the_server_goes_on(
        connect: Connect, caplog: pytest.LogCaptureFixture, exc: type[BaseException]) -> None:
    """SystemExit or KeyboardInterrupt must not stop the server; CancelledError must not
    leave the connection hanging."""
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["path"] == "/raise":
            raise exc
        await hello_app(scope, receive, send)

    h = connect(app)
    out = h.feed(b"GET /raise HTTP/1.1\r\nHost: x\r\n\r\n" + GET)
    assert statuses(out) == [500] and b"connection: close" in out and h.closed
    assert "Exception in ASGI application" in caplog.text
    assert statuses(h.connect().feed(GET)) == [200]


def _mistake(status: Any, headers: list[Any], *bodies: tuple[Any, bool]) -> App:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        for body, more in bodies:
            await send({"type": "http.response.body", "body": body, "more_body": more})
    return app


MISTAKES = {
    "100": _mistake(100, [], (b"x", False)),
    "101": _mistake(101, [(b"upgrade", b"websocket")], (b"", False)),
    "103": _mistake(103, [(b"content-length", b"2")], (b"ok", False)),
    "199": _mistake(199, [], (b"x", False)),
    "1000": _mistake(1000, [], (b"x", False)),
    "0": _mistake(0, [], (b"x", False)),
    "-1": _mistake(-1, [], (b"x", False)),
    "two-lengths": _mistake(200, [(b"content-length", b"1"), (b"content-length", b"2")],
                            (b"x", False)),
    "gzip": _mistake(200, [(b"transfer-encoding", b"gzip")], (b"x", True), (b"y", False)),
    "+5": _mistake(200, [(b"content-length", b"+5")], (b"hello", False)),
    "1_0": _mistake(200, [(b"content-length", b"1_0")], (b"x" * 10, False)),
    "over-length": _mistake(200, [(b"content-length", b"2")], (b"abc", False)),
    "bad-name": _mistake(200, [(b"x bad", b"1")], (b"ok", False)),
    "crlf-injection": _mistake(200, [(b"x-a", b"1\r\nx-injected: 1")], (b"ok", False)),
    "str-body": _mistake(200, [], ("text", False)),
}


@pytest.mark.parametrize("app", MISTAKES.values(), ids=MISTAKES.keys())
def test_app_response_mistakes_give_500_before_any_byte(connect: Connect, app: App,
                                                        caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    """Checked before anything is written (http1.check_response), so the 500 policy answers
    instead of broken framing on a kept-alive connection."""
    h = connect(app)
    out = h.feed(GET + GET)
    status, fields, body = split_response(out)
    assert status == b"HTTP/1.1 500 Internal Server Error" and fields[b"connection"] == b"close"
    assert body == b"Internal Server Error" and h.closed  # the pipelined GET: never
    assert b"x-injected" not in out
    assert "Exception in ASGI application" in caplog.text


def test_response_shorter_than_its_content_length_gets_500(connect: Connect,
                                                           caplog: pytest.LogCaptureFixture
                                                           ) -> None:
    """A single body shorter than its Content-Length is refused before any byte is out, so
    the 500 policy answers (RFC 9112 §6.3: the client would wait for bytes that never come)."""
    h = connect(_mistake(200, [(b"content-length", b"5")], (b"abc", False)))
    out = h.feed(GET + GET)
    assert h.closed and "Content-Length" in caplog.text  # an error is logged
    assert statuses(out) == [500] and out.endswith(b"\r\n\r\nInternal Server Error")


@pytest.mark.parametrize("last", [b"b", "b"], ids=["too-short", "str-body"])
def test_mistake_mid_stream_closes(connect: Connect, last: Any) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        length = [(b"content-length", b"5")] if isinstance(last, bytes) else []
        await send({"type": "http.response.start", "status": 200, "headers": length})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        await send({"type": "http.response.body", "body": last})

    h = connect(app)
    out = h.feed(GET + GET)
    assert statuses(out) == [200] and h.closed
    if isinstance(last, bytes):  # toy-h11 drops the piece once h11 refuses the short end
        assert split_response(out)[2] in (b"a", b"ab")
    else:
        assert out.endswith(b"1\r\na\r\n")


# --- refused requests --------------------------------------------------------------------------

_TE = POST + b"Transfer-Encoding: "
_LONG_EXT = CHUNKED + b"5;" + b"e=v;" * 5000

# (request, the status every toy server answers it with). A request that ends in the middle
# of something ("unfinished") is sent alone; every other is followed by a smuggled request
# that must never be answered.
BAD_REQUESTS = {
    "no-host": (b"GET / HTTP/1.1\r\n\r\n", 400),
    "two-hosts": (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    "host-space": (b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400),
    "host-slash": (b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400),
    "host-port": (b"GET / HTTP/1.1\r\nHost: a:b\r\n\r\n", 400),  # RFC 9112 §3.2: digits
    "host-quote": (b"GET / HTTP/1.1\r\nHost: a\"b\r\n\r\n", 400),
    "http-2.0": (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    "authority-form-get": (b"GET example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "asterisk-get": (b"GET * HTTP/1.1\r\nHost: x\r\n\r\n", 400),  # asterisk-form: OPTIONS only
    "absolute-no-authority": (b"GET http:///p HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "fragment": (b"GET /#frag HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "no-form": (b"GET p HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "ftp-scheme": (b"GET ftp://t/x HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    "connect-origin-form": (b"CONNECT /p HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "connect": (b"CONNECT t:443 HTTP/1.1\r\nHost: t:443\r\n\r\n", 501),
    "bad-method-char": (b"G(T / HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    "bare-lf-request-line": (b"GET / HTTP/1.1\nHost: a\r\n\r\n", 400),
    "bare-lf-field": (b"GET / HTTP/1.1\r\nHost: a\nX: 1\r\n\r\n", 400),
    "leading-whitespace": (b"GET / HTTP/1.1\r\n\tHost: a\r\n\r\n", 400),
    "obs-fold": (b"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400),
    "obs-fold-after-field": (b"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n", 400),
    "bad-name": (b"GET / HTTP/1.1\r\nHost: x\r\nBad Header: x\r\n\r\n", 400),
    "control-in-value": (b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n", 400),
    "del-in-value": (b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x7fb\r\n\r\n", 400),
    "cr-in-value": (b"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", 400),
    "two-lengths": (POST + b"Content-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
    "two-equal-lengths": (POST + b"Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc", 400),
    "length-over-63-bits": (POST + b"Content-Length: 99999999999999999999\r\n\r\n", 400),
    "length-21-digits": (POST + b"Content-Length: 999999999999999999999\r\n\r\n", 400),
    "length-and-chunked": (POST + b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
                           400),
    "chunked-and-length": (POST + b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
                           400),
    "chunked-http-1.0": (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    "te-gzip-chunked": (_TE + b"gzip, chunked\r\n\r\n", 501),
    "te-over-two-lines": (_TE + b"gzip\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
    "te-chunked-twice": (_TE + b"chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    "te-chunked-then-gzip": (_TE + b"chunked\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
    "te-chunked-gzip": (_TE + b"chunked, gzip\r\n\r\n", 400),
    "te-gzip": (_TE + b"gzip\r\n\r\n", 400),
    "long-target": (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    "long-target-unfinished": (b"GET /" + b"a" * 9000, 414),
    "long-field": (b"GET / HTTP/1.1\r\nHost: t\r\nX: " + b"a" * 17000 + b"\r\n\r\n", 431),
    "long-field-unfinished": (b"GET / HTTP/1.1\r\nHost: t\r\nX: " + b"a" * 17000, 431),
    "long-trailers": (CHUNKED + b"0\r\n" + b"".join(b"T%d: %s\r\n" % (i, b"v" * 1000)
                                                   for i in range(20)) + b"\r\n", 431),
    "long-chunk-ext": (_LONG_EXT + b"\r\nhello\r\n0\r\n\r\n", 400),
    "long-chunk-ext-unfinished": (_LONG_EXT, 400),
    "chunk-data-no-crlf": (CHUNKED + b"5\r\nhelloXX0\r\n\r\n", 400),
    "chunk-data-bare-lf": (CHUNKED + b"5\r\nhello\n0\r\n\r\n", 400),
    "chunk-size-bare-lf": (CHUNKED + b"5\nhello\r\n0\r\n\r\n", 400),
    "chunk-ext-bare-lf": (CHUNKED + b"5;ext\nhello\r\n0\r\n\r\n", 400),
    "chunk-size-0x": (CHUNKED + b"0x5\r\nhello\r\n0\r\n\r\n", 400),
    "chunk-size-missing": (CHUNKED + b"\r\nhello\r\n0\r\n\r\n", 400),
    "chunk-size-17-digits": (CHUNKED + b"1" + b"0" * 16 + b"\r\n", 400),  # over 64 bits
    "chunk-size-21-digits": (CHUNKED + b"1" + b"0" * 20 + b"\r\n", 400),
    "chunk-ext-control": (CHUNKED + b"5;a=\x01b\r\nhello\r\n0\r\n\r\n", 400),
    "chunk-ext-no-name": (CHUNKED + b"5;\r\nhello\r\n0\r\n\r\n", 400),
    "trailer-bare-lf": (CHUNKED + b"5\r\nhello\r\n0\r\nX: 1\n\r\n", 400),
    "request-as-trailer": (CHUNKED + b"5\r\nhello\r\n0\r\n" + GET, 400),
}
UNFINISHED = {case for case in BAD_REQUESTS if case.endswith("-unfinished")}

# A server's parser answering with another status of its own: (server, case) -> status.
OWN_STATUS = {
    ("toy-h11", "te-chunked-twice"): 501,  # h11 refuses every coding but chunked with 501
    ("toy-h11", "te-chunked-then-gzip"): 501,
    ("toy-h11", "te-chunked-gzip"): 501,
    ("toy-h11", "te-gzip"): 501,
    ("toy-httptools", "connect-origin-form"): 501,  # llhttp: CONNECT is not implemented
}

_H11_DECIDES = "h11 decides it (declared in tests/hostile/corpus.py TOY_GAPS)"
_H11_BOUND = ("h11 bounds a head or a trailer section still coming, or a chunk-size line, only "
              "by its incomplete-event limit (max_request_line + max_header_size), not by our "
              "limits")
# What a server's parser lets through, or decides otherwise: (server, case) -> why.
GAPS = {
    **{("toy-h11", case): _H11_DECIDES for case in [
        "bare-lf-request-line", "bare-lf-field", "obs-fold-after-field", "two-equal-lengths",
        "chunk-size-17-digits", "chunk-ext-control", "chunk-ext-no-name", "trailer-bare-lf"]},
    **{("toy-h11", case): _H11_BOUND for case in [
        "long-target-unfinished", "long-field-unfinished", "long-chunk-ext",
        "long-chunk-ext-unfinished"]},
}


def _bad_request_params() -> list[Any]:
    return [pytest.param(server, case, id=f"{server}-{case}", marks=[
        pytest.mark.xfail(strict=True, reason=GAPS[server, case])] if (server, case) in GAPS
        else []) for server in PROTOCOLS for case in BAD_REQUESTS]


@pytest.mark.parametrize(("toy_server", "case"), _bad_request_params())
def test_bad_requests_get_their_status_and_a_close(connect: Connect, toy_server: str,
                                                   case: str) -> None:
    head, status = BAD_REQUESTS[case]
    status = OWN_STATUS.get((toy_server, case), status)
    paths: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        paths.append(scope["path"])
        await echo_app(scope, receive, send)

    h = connect(app)
    smuggled = b"" if case in UNFINISHED else b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
    out = h.feed(head + smuggled)
    assert statuses(out) == [status], out[:200]
    assert b"connection: close" in out.lower() and h.closed
    assert "/smuggled" not in paths and b"smuggled" not in out
    assert h.feed(GET) == b""  # nothing after a refused request is read


GOOD_REQUESTS = {
    "get": (GET, "/", b""),
    "http-1.0": (b"GET / HTTP/1.0\r\n\r\n", "/", b""),
    "http-1.2": (b"GET / HTTP/1.2\r\nHost: a\r\n\r\n", "/", b""),  # a later 1.x: as 1.1
    "chunked-empty": (CHUNKED + b"0\r\n\r\n", "/", b""),
    "te-case-and-space": (POST + b"Transfer-Encoding: Chunked \r\n\r\n0\r\n\r\n", "/", b""),
    "latin-1-and-tab-in-value": (b"GET / HTTP/1.1\r\nHost: a\r\nX: caf\xe9\tok\r\n\r\n", "/",
                                 b""),
    "absolute-form": (b"GET http://a/x?y HTTP/1.1\r\nHost: a\r\n\r\n", "/x", b"y"),
    "absolute-form-port": (b"GET http://t:80/p?q=1 HTTP/1.1\r\nHost: t:80\r\n\r\n", "/p",
                           b"q=1"),
    "absolute-form-no-path": (b"GET http://t HTTP/1.1\r\nHost: [::1]:8000\r\n\r\n", "/", b""),
    "asterisk-form": (b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", "*", b""),
}


@pytest.mark.parametrize("case", GOOD_REQUESTS)
def test_good_requests_are_served(connect: Connect, case: str) -> None:
    data, path, query = GOOD_REQUESTS[case]
    seen: list[tuple[str, bytes]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append((scope["path"], scope["query_string"]))
        await echo_app(scope, receive, send)

    out = connect(app).feed(data)
    assert statuses(out) == [200] and seen == [(path, query)]


def test_error_after_a_good_request_waits_its_turn(connect: Connect) -> None:
    h = connect(echo_app)
    out = h.feed(b"GET /first HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nBad Header: x\r\n\r\n")
    assert statuses(out) == [200, 400] and h.closed


def test_header_block_over_the_limit_across_reads_gets_431(connect: Connect) -> None:
    h = connect(echo_app)  # each read is under the 16 KiB limit; together they are over it
    h.feed(b"GET / HTTP/1.1\r\nHost: t\r\nA: " + b"a" * 9000 + b"\r\n")
    out = h.feed(b"B: " + b"b" * 9000 + b"\r\n\r\n")
    assert statuses(out) == [431] and h.closed


def test_pipelined_head_over_the_limit_gets_431(connect: Connect) -> None:
    # The read that ends one request starts the next head; the read that ends that head is
    # small. The head is still over 16 KiB and must be refused.
    fields = b"".join(b"F%d: %s\r\n" % (i, b"v" * 1000) for i in range(40))
    h = connect(echo_app)
    out = h.feed(GET + b"GET /b HTTP/1.1\r\nHost: t\r\n" + fields)
    if not h.closed:  # a server may find it over the limit only once the head is complete
        out += h.feed(b"\r\n")
    assert statuses(out) == [200, 431] and h.closed


@servers_except({"toy-h11": "h11 bounds an unfinished chunk-size line only by its "
                             "incomplete-event limit (max_request_line + max_header_size)"})
def test_chunk_extension_spread_over_reads_is_limited(connect: Connect) -> None:
    h = connect(echo_app)
    h.feed(CHUNKED + b"5;e=")
    out = b"".join(h.feed(b"v" * 1500) for _ in range(4))
    assert statuses(out) == [400] and h.closed


def test_request_line_and_header_limits(connect: Connect) -> None:
    line = b"GET /" + b"a" * 100 + b" HTTP/1.1\r\nHost: a\r\n\r\n"
    assert statuses(connect(echo_app, max_request_line=100).feed(line)) == [414]
    assert statuses(connect(echo_app, max_request_line=200).feed(line)) == [200]
    many = b"GET / HTTP/1.1\r\nHost: a\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(10))
    assert statuses(connect(echo_app, max_headers=10).feed(many + b"\r\n")) == [431]
    assert statuses(connect(echo_app, max_headers=11).feed(many + b"\r\n")) == [200]
    assert statuses(connect(echo_app, max_header_size=50).feed(many + b"\r\n")) == [431]


# --- logging and hostile input -----------------------------------------------------------------


@pytest.mark.parametrize("enabled", [True, False])
def test_access_log_line_like_uvicorns_from_the_raw_target_at_response_start(
        connect: Connect, caplog: pytest.LogCaptureFixture, enabled: bool) -> None:
    """One line format (asgi.log_access), from the raw target (%0d%0a stays encoded), written
    when the response starts."""
    caplog.set_level("INFO", logger="toyservers.access")
    gate = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await gate.wait()
        await send({"type": "http.response.body", "body": b""})

    connect(app, access_log=enabled).feed(b"GET /a%0d%0ab?q=%1b HTTP/1.1\r\nHost: x\r\n\r\n")
    lines = [r.getMessage() for r in caplog.records if r.name == "toyservers.access"]
    expected = ['127.0.0.1:50000 - "GET /a%0d%0ab?q=%1b HTTP/1.1" 201']  # body not sent yet
    assert lines == (expected if enabled else [])


def test_access_log_of_a_refused_request(connect: Connect,
                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="toyservers.access")
    h = connect(hello_app, access_log=True, limit_concurrency=0)
    out = h.feed(b"GET /logged?q=1 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert statuses(out) == [503] and h.closed
    assert '127.0.0.1:50000 - "GET /logged?q=1 HTTP/1.1" 503' in caplog.messages


def test_random_bytes_never_break_the_protocol(connect: Connect,
                                               caplog: pytest.LogCaptureFixture) -> None:
    """Whatever arrives, once every deadline has passed the connection is answered and
    closed, or idle and open; what is written is a response; nothing is logged as an error."""
    rng = random.Random(9112)
    alphabet = b"GET /HTP1.\r\n:;0123456789abcdef \t\x00\x7f\xffHost:Content-Length:chunked"
    seeds = [GET, CHUNKED + b"5\r\nhello\r\n0\r\n\r\n", POST + b"Content-Length: 3\r\n\r\nabc"]
    for i in range(200):
        h = connect(echo_app, timeout_headers=1.0, timeout_body=1.0, timeout_keep_alive=1.0)
        if i % 2:
            data = bytearray(rng.choice(seeds))
            for _ in range(rng.randint(1, 6)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            h.push(bytes(data))
        else:
            for _ in range(rng.randint(1, 4)):
                piece = bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 80)))
                if rng.random() < 0.3:
                    piece = GET[: rng.randint(0, len(GET))] + piece
                h.push(piece)
        h.spin()
        h.advance(1.5)  # every deadline has passed
        h.advance(1.5)
        out = h.take()
        assert h.closed, i
        assert out == b"" or out.startswith(b"HTTP/1.1 "), (i, out)
    assert not [record for record in caplog.records if record.levelname == "ERROR"]
