"""Checks for exercise 4 (a sans-IO server as a pure function). Run: ``make exercise N=4``.

Tests ``starter.py`` by default; ``EXERCISE_IMPL=solution`` tests the reference solution.
No sockets: ``answer(bytes) -> bytes`` is called directly, and its output is parsed back with
an ``h11.Connection`` in the client role, so any correct framing passes.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import h11

IMPL = os.environ.get("EXERCISE_IMPL", "starter")
PATH = Path(__file__).with_name(f"{IMPL}.py")


def load() -> ModuleType:
    """Import ``starter.py`` or ``solution.py`` from this directory as a fresh module."""
    spec = importlib.util.spec_from_file_location(f"exercise_04_{IMPL}", PATH)
    assert spec is not None and spec.loader is not None, f"cannot import {PATH}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ex = load()
HOST = b"Host: example\r\n"


def responses(data: bytes) -> list[tuple[int, dict[bytes, bytes], bytes]]:
    """Parse what ``answer(data)`` returned: [(status, {lower-case name: value}, body)]."""
    out = ex.answer(data)
    assert isinstance(out, bytes), f"answer() must return bytes, not {type(out).__name__}"
    client = h11.Connection(our_role=h11.CLIENT)
    parsed = []
    client.receive_data(out)
    while True:
        # h11's client side needs a request sent before it will read a response
        client.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
        client.send(h11.EndOfMessage())
        event = client.next_event()
        if event is h11.NEED_DATA:
            assert client.trailing_data[0] == b"", f"a truncated response in {out!r}"
            return parsed
        assert type(event) is h11.Response, f"expected a response, got {event!r} in {out!r}"
        body = b""
        while type(part := client.next_event()) is h11.Data:
            body += part.data
        assert type(part) is h11.EndOfMessage, f"a response body is cut short in {out!r}"
        parsed.append((event.status_code, dict(event.headers), body))
        if client.our_state is not h11.DONE or client.their_state is not h11.DONE:
            assert client.trailing_data[0] == b"", f"bytes after the last response: {out!r}"
            return parsed
        client.start_next_cycle()


def test_one_get_gets_one_200() -> None:
    [(status, headers, body)] = responses(b"GET /hello HTTP/1.1\r\n" + HOST + b"\r\n")
    assert (status, body) == (200, b"GET /hello: 0 bytes\n")
    assert headers.get(b"content-type") == b"text/plain"


def test_a_content_length_body_is_counted() -> None:
    request = b"POST /users HTTP/1.1\r\n" + HOST + b"Content-Length: 11\r\n\r\nhello world"
    assert [r[2] for r in responses(request)] == [b"POST /users: 11 bytes\n"]


def test_a_chunked_body_is_counted() -> None:
    request = (b"PUT /x HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n\r\n"
               b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n")
    assert [r[2] for r in responses(request)] == [b"PUT /x: 7 bytes\n"]


def test_pipelined_requests_are_answered_in_order() -> None:
    data = (b"GET /1 HTTP/1.1\r\n" + HOST + b"\r\n"
            b"POST /2 HTTP/1.1\r\n" + HOST + b"Content-Length: 2\r\n\r\nhi"
            b"GET /3 HTTP/1.1\r\n" + HOST + b"\r\n")
    bodies = [r[2] for r in responses(data)]
    assert len(bodies) > 1, (
        "only the first of three pipelined requests was answered: once a response is sent, "
        "h11 reads no further (next_event() says PAUSED) until conn.start_next_cycle()")
    assert bodies == [b"GET /1: 0 bytes\n", b"POST /2: 2 bytes\n", b"GET /3: 0 bytes\n"]


def test_an_incomplete_request_gets_no_answer_yet() -> None:
    assert ex.answer(b"GET / HTTP/1.1\r\nHo") == b""
    whole = b"GET /a HTTP/1.1\r\n" + HOST + b"\r\n"
    cut_body = b"POST /b HTTP/1.1\r\n" + HOST + b"Content-Length: 10\r\n\r\nabc"
    assert [r[2] for r in responses(whole + cut_body)] == [b"GET /a: 0 bytes\n"]


def test_nothing_is_read_after_connection_close() -> None:
    data = (b"GET /last HTTP/1.1\r\n" + HOST + b"Connection: close\r\n\r\n"
            b"GET /ignored HTTP/1.1\r\n" + HOST + b"\r\n")
    answers = responses(data)
    assert [r[2] for r in answers] == [b"GET /last: 0 bytes\n"]
    assert answers[0][1].get(b"connection") == b"close", "h11 says close when it must"


def test_http_1_0_ends_the_connection() -> None:
    data = b"GET /old HTTP/1.0\r\n\r\nGET /ignored HTTP/1.1\r\n" + HOST + b"\r\n"
    assert [r[2] for r in responses(data)] == [b"GET /old: 0 bytes\n"]


def test_a_malformed_request_gets_h11s_status_and_ends_the_conversation() -> None:
    data = (b"GET /ok HTTP/1.1\r\n" + HOST + b"\r\n"
            b"GET /bad HTTP/1.1\r\nBad Header: x\r\n\r\n"
            b"GET /ignored HTTP/1.1\r\n" + HOST + b"\r\n")
    statuses = [status for status, _, _ in responses(data)]
    assert statuses == [200, 400]
