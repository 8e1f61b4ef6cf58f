"""Exercise 1, a plausible wrong answer: the chunk size read with ``int(text, 16)`` alone.

Most first answers look like this one, and it decodes every well-formed body the checks send.
But ``int()`` reads more than RFC 9112's ``chunk-size = 1*HEXDIG``: ``0x5``, ``5_0``, ``+5``
and `` 5`` all become sizes. ``EXERCISE_IMPL=wrong make exercise N=1`` shows what a student
who wrote it reads; ``tests/test_exercises.py`` checks that it fails with this hint:

Fails: test_a_size_is_hex_digits_and_nothing_else[0x5]: Failed: chunk size b'0x5' was accepted
"""

from __future__ import annotations

import asyncio
import sys

MAX_BODY = 1024 * 1024
"""Largest request body accepted, bytes; beyond it the answer is 413."""

HEXDIGITS = b"0123456789abcdefABCDEF"
"""The bytes a chunk size may contain (RFC 5234 HEXDIG; case-insensitive)."""


class HTTPError(Exception):
    """Answer with ``status`` (e.g. ``"400 Bad Request"``) and close the connection."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class BadRequest(HTTPError):
    """The request cannot be parsed: 400."""

    def __init__(self, reason: str) -> None:
        super().__init__("400 Bad Request", reason)


# --8<-- [start:exercise]
async def read_chunked(reader: asyncio.StreamReader, limit: int = MAX_BODY) -> bytes:
    """Read a chunked request body from ``reader`` and return it decoded.

    RFC 9112 §7.1:
        chunked-body = *chunk last-chunk trailer-section CRLF
        chunk        = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
        chunk-size   = 1*HEXDIG
        last-chunk   = 1*("0") [ chunk-ext ] CRLF

    Chunk extensions (``;name=value`` after the size) are ignored; so are trailer fields.

    Raises:
        BadRequest: a size that is not hexadecimal, or chunk data not followed by CRLF.
        HTTPError: "413 Content Too Large" when the decoded body exceeds ``limit`` bytes.
        asyncio.IncompleteReadError: the client closed in the middle.
    """
    body = bytearray()
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0], 16)  # int() ignores the CRLF
        except ValueError:
            raise BadRequest(f"bad chunk size line {size_line!r}") from None
        if size == 0:
            break
        if len(body) + size > limit:
            raise HTTPError("413 Content Too Large", f"body larger than {limit} bytes")
        body += await reader.readexactly(size)
        if await reader.readexactly(2) != b"\r\n":
            raise BadRequest("chunk data must be followed by CRLF")
    while await reader.readuntil(b"\r\n") != b"\r\n":
        pass  # trailer fields, up to the empty line that ends the body
    return bytes(body)
# --8<-- [end:exercise]


async def read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    """The request body, framed by Transfer-Encoding or Content-Length (RFC 9112 §6.3)."""
    coding = headers.get("transfer-encoding")
    if coding is not None:
        if coding.strip().lower() != "chunked":
            raise HTTPError("501 Not Implemented", f"unsupported transfer coding {coding!r}")
        return await read_chunked(reader)
    length = headers.get("content-length", "0")
    if not (length.isascii() and length.isdigit()):
        raise BadRequest(f"bad Content-Length {length!r}")
    if int(length) > MAX_BODY:
        raise HTTPError("413 Content Too Large", f"body larger than {MAX_BODY} bytes")
    return await reader.readexactly(int(length))


def response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8") -> bytes:
    """A complete HTTP/1.1 response with ``Connection: close``."""
    head = (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    return head.encode("latin-1") + body


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One request per connection: ``POST /echo`` echoes the body, the rest gets its size."""
    try:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *lines = head[:-4].decode("latin-1").split("\r\n")
            method, target, _ = request_line.split(" ")
            headers = {}
            for line in lines:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            body = await read_body(reader, headers)
            if method == "POST" and target == "/echo":
                writer.write(response("200 OK", body, headers.get("content-type", "text/plain")))
            else:
                writer.write(response("200 OK", f"{len(body)} body bytes\n".encode()))
        except HTTPError as exc:
            writer.write(response(exc.status, f"{exc}\n".encode()))
        except ValueError as exc:
            writer.write(response("400 Bad Request", f"{exc}\n".encode()))
        await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(port: int) -> None:
    """Listen on 127.0.0.1:``port``."""
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 8000))
    except KeyboardInterrupt:
        pass
