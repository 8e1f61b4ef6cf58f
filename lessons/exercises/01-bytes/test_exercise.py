"""Checks for exercise 1 (chunked request bodies). Run: ``make exercise N=1``.

Tests ``starter.py`` by default; ``EXERCISE_IMPL=solution`` tests the reference solution.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from bench.process import ServerProcess, free_port

IMPL = os.environ.get("EXERCISE_IMPL", "starter")
PATH = Path(__file__).with_name(f"{IMPL}.py")


def load() -> ModuleType:
    """Import ``starter.py`` or ``solution.py`` from this directory as a fresh module."""
    spec = importlib.util.spec_from_file_location(f"exercise_01_{IMPL}", PATH)
    assert spec is not None and spec.loader is not None, f"cannot import {PATH}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ex = load()


def decode_and_rest(data: bytes, limit: int | None = None) -> tuple[bytes, bytes]:
    """Feed ``data`` to the exercise's ``read_chunked``: what it decoded, and what it left
    unread in the stream (the start of the next request on a kept-alive connection)."""
    async def run() -> tuple[bytes, bytes]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        if limit is None:
            body = await ex.read_chunked(reader)
        else:
            body = await ex.read_chunked(reader, limit)
        return body, await reader.read()
    return asyncio.run(asyncio.wait_for(run(), timeout=5))


def decode(data: bytes, limit: int | None = None) -> bytes:
    """Feed ``data`` to the exercise's ``read_chunked`` and return what it decoded."""
    return decode_and_rest(data, limit)[0]


def test_two_chunks() -> None:
    assert decode(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n") == b"hello world"


def test_sizes_are_hexadecimal_in_either_case() -> None:
    assert decode(b"a\r\n0123456789\r\nA\r\n0123456789\r\n0\r\n\r\n") == b"0123456789" * 2


def test_empty_body_is_just_the_last_chunk() -> None:
    assert decode(b"0\r\n\r\n") == b""


def test_chunk_extensions_are_ignored() -> None:
    assert decode(b"3;name=value\r\nabc\r\n0;done\r\n\r\n") == b"abc"


def test_trailer_fields_are_skipped() -> None:
    assert decode(b"2\r\nok\r\n0\r\nExpires: never\r\nX-Checksum: 1\r\n\r\n") == b"ok"


@pytest.mark.parametrize("trailer", [b"", b"Expires: never\r\n",
                                     b"Expires: never\r\nX-Checksum: 1\r\n"])
def test_the_reader_stops_at_the_end_of_the_message(trailer: bytes) -> None:
    # The next request follows on the same connection: read_chunked must consume the last
    # chunk, every trailer line and the empty line that ends them (RFC 9112 §7.1.2), no more.
    following = b"GET /next HTTP/1.1\r\nHost: test\r\n\r\n"
    body, rest = decode_and_rest(b"2\r\nok\r\n0\r\n" + trailer + b"\r\n" + following)
    assert body == b"ok"
    assert rest == following, (
        f"read_chunked left {rest[:40]!r}... in the stream: it must read up to and including "
        "the empty line after the trailer fields, and not past it")


def test_the_data_may_contain_crlf() -> None:
    assert decode(b"4\r\n\r\n\r\n\r\n0\r\n\r\n") == b"\r\n\r\n"


@pytest.mark.parametrize("data", [b"zz\r\nhello\r\n0\r\n\r\n", b"\r\nhello\r\n0\r\n\r\n"])
def test_a_size_that_is_not_hex_is_a_bad_request(data: bytes) -> None:
    with pytest.raises(ex.BadRequest):
        decode(data)


@pytest.mark.parametrize("size", [b"0x5", b"5_0", b"+5", b"-5", b" 5"])
def test_a_size_is_hex_digits_and_nothing_else(size: bytes) -> None:
    # RFC 9112 §7.1: chunk-size = 1*HEXDIG. Python's int(text, 16) also reads these five.
    # When one parser on the way (a proxy, a cache) reads a size and the next rejects it or
    # reads another, they disagree on where the request ends: request smuggling.
    try:
        decode(size + b"\r\nhello\r\n0\r\n\r\n")
    except ex.BadRequest:
        return
    except Exception as exc:  # "5_0" read as 0x50 runs past the end of the stream, "-5"...
        outcome = f"raised {type(exc).__name__}, not BadRequest"
    else:
        outcome = "was accepted"
    pytest.fail(f"chunk size {size!r} {outcome}: a chunk-size is 1*HEXDIG (RFC 9112 §7.1), "
                "and int(text, 16) also takes 0x5, 5_0, +5, -5 and spaces: check every byte "
                "against HEXDIGITS first")


def test_chunk_data_must_end_with_crlf() -> None:
    with pytest.raises(ex.BadRequest):
        decode(b"3\r\nabcXY0\r\n\r\n")


def test_a_body_over_the_limit_is_413() -> None:
    with pytest.raises(ex.HTTPError) as info:
        decode(b"8\r\n12345678\r\n8\r\n12345678\r\n0\r\n\r\n", limit=10)
    assert info.value.status.startswith("413")


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    port = free_port()
    with ServerProcess([sys.executable, str(PATH), str(port)], port=port) as proc:
        yield proc


def test_the_server_echoes_a_chunked_body_sent_over_a_socket(server: ServerProcess) -> None:
    request = (b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Type: text/plain\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n"
               b"7\r\nchunked\r\n5\r\n body\r\n0\r\n\r\n")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), answer
    assert body == b"chunked body"


def test_the_server_echoes_what_httpx_streams(server: ServerProcess) -> None:
    # httpx sends a generator's items as chunks: Transfer-Encoding: chunked
    parts = [b"x" * 1000, b"y" * 3000, b"z"]
    response = httpx.post(f"{server.url}/echo", content=iter(parts), timeout=5)
    assert response.status_code == 200, response.text
    assert response.content == b"".join(parts)
