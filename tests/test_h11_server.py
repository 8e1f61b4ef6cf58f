"""toy-h11 (toyservers/h11_server.py): what is its own.

The behaviour it shares with the other toy servers is tested once for all three in
test_protocols.py (protocol level, with h11's own decisions there as strict xfails) and
test_toy_servers_e2e.py (end to end). Here, on the shared protocol harness: what h11 decides
(every transfer-coding but chunked is 501, its bound on an incomplete event), what toy-h11
checks of what h11 parsed (trailers), and how it pulls events in slices.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.echo_app import app as echo_app
from tests.support.protocol_harness import GET, Harness, body_reader, statuses
from toyservers.h11_server import MAX_EVENTS

Connect = Callable[..., Harness]
POST_A = b"POST / HTTP/1.1\r\nHost: a\r\n"
CHUNKED = POST_A + b"Transfer-Encoding: chunked\r\n\r\n"


@pytest.fixture
def toy_server() -> str:
    return "toy-h11"


# --- the protocol on the shared harness ----------------------------------------------------------


@pytest.mark.parametrize("head", [
    POST_A + b"Transfer-Encoding: chunked, gzip\r\n\r\n",
    POST_A + b"Transfer-Encoding: gzip\r\n\r\n",
    POST_A + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
    POST_A + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n",
])
def test_h11_refuses_every_other_transfer_encoding(connect: Connect, head: bytes) -> None:
    """What h11 lets through of our Transfer-Encoding checks is refused all the same (501 and
    close), so nothing is smuggled."""
    h = connect(echo_app)
    out = h.feed(head + b"0\r\n\r\n" + GET)
    assert statuses(out) == [501] and h.closed


def test_an_unending_chunk_size_line_gets_431_at_h11s_bound(connect: Connect) -> None:
    """A chunk-size line that never ends: h11's bound on an incomplete event (24 KiB here)."""
    h = connect(echo_app)
    out = h.feed(CHUNKED + b"5;" + b"e" * 30000)
    assert statuses(out) == [431] and h.closed


def test_incomplete_heads_over_the_limits(connect: Connect) -> None:
    """h11 refuses a head still incomplete past max_request_line + max_header_size (431);
    when the request line itself has not ended, that is 414."""
    limits = {"max_request_line": 100, "max_header_size": 100}
    h = connect(echo_app, **limits)
    out = b"".join([h.feed(b"GET /" + b"a" * 50) for _ in range(5)])
    assert statuses(out) == [414] and h.closed
    h = connect(echo_app, **limits)
    out = h.feed(b"GET / HTTP/1.1\r\n")
    out += b"".join([h.feed(b"X: " + b"a" * 50 + b"\r\n") for _ in range(5)])
    assert statuses(out) == [431] and h.closed


@pytest.mark.parametrize(("trailers", "status"), [
    (b"X: a\x01b\r\n", 400),  # RFC 9110 §5.5: h11 lets the control byte by
    (b"".join(b"T%d: 1\r\n" % i for i in range(11)), 431),  # over max_headers lines
    (b"T: " + b"v" * 200 + b"\r\n", 431),  # over max_header_size bytes
])
def test_trailers_are_checked_like_a_head(connect: Connect, trailers: bytes, status: int
                                          ) -> None:
    """h11 parses a trailer section and hands it over; our limits and value check apply."""
    h = connect(echo_app, max_headers=10, max_header_size=100)
    out = h.feed(CHUNKED + b"5\r\nhello\r\n0\r\n" + trailers + b"\r\n" + GET)
    assert statuses(out) == [status] and h.closed
    h = connect(echo_app, max_headers=10, max_header_size=100)
    out = h.feed(CHUNKED + b"5\r\nhello\r\n0\r\nX-Sum: ok\r\n\r\n" + GET)
    assert statuses(out) == [200, 200] and not h.closed


def test_tiny_chunks_are_pulled_in_slices(connect: Connect) -> None:
    """A burst of 1-byte chunks is pulled MAX_EVENTS events at a time, so the loop gets a
    turn in between (reading pauses meanwhile), and the app still gets the whole body."""
    sizes: list[int] = []
    h = connect(body_reader(sizes))
    count = 5 * MAX_EVENTS
    burst = CHUNKED + b"1\r\nx\r\n" * count + b"0\r\n\r\n"
    # a slice done when data_received returns; the rest waits for the loop
    assert h.call(lambda: (h.protocol.data_received(burst), h.reading_paused)[1])
    h.spin(100)
    assert sum(sizes) == count and len(sizes) >= 3  # the app read between slices
    assert statuses(h.take()) == [200] and not h.reading_paused


# --- a request body the app never read (RFC 9112 §9.3) -------------------------------------------
