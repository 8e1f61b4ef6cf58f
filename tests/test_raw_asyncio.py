"""toy-raw (toyservers/raw_asyncio.py): what is its own, around the hand-written HTTP/1.1 parser
(whose own tests are in test_http1_parser.py).

The behaviour it shares with the other toy servers is tested once for all three in
test_protocols.py (protocol level) and test_toy_servers_e2e.py (end to end). Here, on the
shared protocol harness: how far it decodes a burst of chunks ahead of the app, when it reads
on after pipelined requests filled its buffer, and its fast path for origin-form targets.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.echo_app import app as echo_app
from tests.support.protocol_harness import GET, Harness, after, hello_app, split_response
from toyservers import http1
from toyservers.raw_asyncio import HIGH_WATER_LIMIT


@pytest.fixture
def toy_server() -> str:
    return "toy-raw"


# --- the protocol on the shared harness ----------------------------------------------------------


def test_tiny_chunks_are_decoded_only_up_to_the_high_water_mark(
        connect: Callable[..., Harness]) -> None:
    """A burst of one-byte chunks is decoded no further than HIGH_WATER_LIMIT bytes of body
    waiting for the app; the rest stays undecoded in the read buffer until the app takes them."""
    gate = asyncio.Event()
    chunks = HIGH_WATER_LIMIT + 5000
    h = connect(after(gate, echo_app))
    h.feed(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
           + b"1\r\nx\r\n" * chunks + b"0\r\n\r\n")
    cycle = h.protocol.cycle
    assert cycle is not None and len(cycle.body) == HIGH_WATER_LIMIT
    assert h.reading_paused and len(h.protocol.buffer) == 5000 * 6 + 5
    gate.set()
    h.spin(50)
    assert json.loads(split_response(h.take())[2])["body"] == "x" * chunks
    assert not h.reading_paused and not h.closed


def test_pipelined_requests_are_read_on_only_once_the_buffer_is_under_the_high_water_mark(
        connect: Callable[..., Harness]) -> None:
    """Requests pipelined past HIGH_WATER_LIMIT bytes pause reading until those still in the
    buffer are under it: a read at every response would let a client that keeps sending grow
    the buffer without end (and each request's copy of the rest with it)."""
    count = 3 * HIGH_WATER_LIMIT // len(GET)
    h = connect(hello_app)
    h.push(GET * count)
    served = 0
    while served < count:
        h.spin(1)
        served += h.take().count(b"HTTP/1.1 200 ")
        assert h.reading_paused or len(h.protocol.buffer) <= HIGH_WATER_LIMIT
    assert not h.reading_paused and not h.closed


def test_an_unfinished_head_over_the_high_water_mark_reads_on(
        connect: Callable[..., Harness]) -> None:
    """Behind pipelined requests, a head longer than HIGH_WATER_LIMIT (a limit raised that far)
    and not all come yet: once the requests before it are served, reading resumes for the rest."""
    big = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (HIGH_WATER_LIMIT + 10)
    h = connect(hello_app, max_header_size=4 * HIGH_WATER_LIMIT)
    h.push(GET * 10 + big)
    assert h.feed(b"").count(b"HTTP/1.1 200 ") == 10
    assert not h.reading_paused
    assert h.feed(b"\r\n\r\n").startswith(b"HTTP/1.1 200 ")


@pytest.mark.parametrize("method", [b"GET", b"OPTIONS", b"CONNECT"])
@pytest.mark.parametrize("target", [
    b"/", b"/p?q=1", b"/p?", b"/?a?b", b"//x", b"/a%2Fb?c#d", b"/#", b"*", b"p", b"?q",
    b"http://h/p?q", b"http://h", b"h:443", b"h:443/p", b"/h:443"])
def test_origin_form_fast_path_splits_as_split_target(connect: Callable[..., Harness],
                                                      method: bytes, target: bytes) -> None:
    """_read_head splits an origin-form target itself: the same answer as http1.split_target."""
    scopes: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scopes.append(scope)
        await hello_app(scope, receive, send)

    try:
        expected: tuple[bytes, bytes] | None = http1.split_target(method.decode(), target)
    except http1.BadTarget:
        expected = None
    out = connect(app).feed(method + b" " + target + b" HTTP/1.1\r\nHost: h:443\r\n\r\n")
    if expected is None:
        assert out.startswith(b"HTTP/1.1 400 ") and not scopes
    elif method == b"CONNECT":  # a valid authority-form target: 501, no tunnel (RFC 9110 §9.3.6)
        assert out.startswith(b"HTTP/1.1 501 ") and not scopes
    else:
        assert (scopes[0]["raw_path"], scopes[0]["query_string"]) == expected
