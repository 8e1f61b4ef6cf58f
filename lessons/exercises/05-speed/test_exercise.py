"""Checks for exercise 5 (httptools callbacks that collect requests). Run: ``make exercise N=5``.

Tests ``starter.py`` by default; ``EXERCISE_IMPL=solution`` tests the reference solution.
No sockets: bytes are fed to ``Collector.feed`` in the pieces a socket might deliver.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import httptools
import pytest

IMPL = os.environ.get("EXERCISE_IMPL", "starter")
PATH = Path(__file__).with_name(f"{IMPL}.py")


def load() -> ModuleType:
    """Import ``starter.py`` or ``solution.py`` from this directory as a fresh module."""
    spec = importlib.util.spec_from_file_location(f"exercise_05_{IMPL}", PATH)
    assert spec is not None and spec.loader is not None, f"cannot import {PATH}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ex = load()
POST = (b"POST /users/7?fields=name&x=1 HTTP/1.1\r\nHost: example\r\nX-Trace: AbC\r\n"
        b"Content-Length: 11\r\n\r\nhello world")
GET = b"GET /next HTTP/1.1\r\nHost: example\r\nConnection: close\r\n\r\n"


def collect(*pieces: bytes) -> list[Any]:
    """Feed ``pieces`` one at a time to a new Collector; every request completed, in order."""
    collector = ex.Collector()
    found = []
    for piece in pieces:
        found += collector.feed(piece)
    return found


def test_one_request_in_one_piece() -> None:
    [request] = collect(POST)
    assert request.method == "POST"
    assert (request.path, request.query_string) == ("/users/7", b"fields=name&x=1")
    assert request.body == b"hello world"
    assert request.keep_alive is True


def test_header_names_are_lower_cased_and_values_kept() -> None:
    [request] = collect(POST)
    assert request.headers == [
        (b"host", b"example"), (b"x-trace", b"AbC"), (b"content-length", b"11")]


def test_one_byte_at_a_time_gives_the_same_request() -> None:
    whole = collect(POST)
    hint = "on_url and on_body may be called with pieces: join them"
    try:
        bytewise = collect(*(POST[i:i + 1] for i in range(len(POST))))
    except httptools.HttpParserCallbackError as exc:  # what a callback raised is its cause
        pytest.fail(f"fed one byte at a time, a callback raised "
                    f"{exc.__cause__ or exc.__context__!r}: {hint}")
    assert bytewise == whole, hint


def test_pipelined_requests_do_not_share_state() -> None:
    first, second = collect(POST + GET)
    assert (first.method, first.body) == ("POST", b"hello world")
    assert (second.method, second.path, second.query_string) == ("GET", "/next", b"")
    assert second.headers == [(b"host", b"example"), (b"connection", b"close")]
    assert second.body == b""
    assert second.keep_alive is False, "Connection: close ends the connection"


def test_a_request_is_returned_by_the_feed_that_completes_it() -> None:
    collector = ex.Collector()
    assert collector.feed(POST[:-3]) == []
    assert [r.body for r in collector.feed(POST[-3:] + GET[:5])] == [b"hello world"]
    assert [r.path for r in collector.feed(GET[5:])] == ["/next"]


def test_a_chunked_body_is_joined() -> None:
    data = (b"PUT /notes HTTP/1.1\r\nHost: example\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n")
    [request] = collect(data[:60], data[60:75], data[75:])
    assert (request.method, request.body) == ("PUT", b"abcdefg")


def test_http_1_0_does_not_keep_alive() -> None:
    [request] = collect(b"GET / HTTP/1.0\r\n\r\n")
    assert (request.path, request.keep_alive) == ("/", False)


def test_a_malformed_request_raises_the_parser_error() -> None:
    collector = ex.Collector()
    assert [r.path for r in collector.feed(POST)] == ["/users/7"]
    with pytest.raises(httptools.HttpParserError):
        collector.feed(b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n")
