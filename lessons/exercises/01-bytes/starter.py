"""Exercise 1, starter: make this server accept chunked request bodies.

The server of lesson 1, step 4, cut down, where ``Transfer-Encoding: chunked`` is decoded
instead of refused. ``POST /echo`` answers with the decoded body.

YOUR TASK: write the body of ``read_chunked`` below (look for "EXERCISE"). Check your work
with ``make exercise N=1``; the failures tell you what is still wrong. Run it with
``.venv/bin/python lessons/exercises/01-bytes/starter.py 8000`` and try
``curl -H 'Transfer-Encoding: chunked' --data-binary @somefile http://127.0.0.1:8000/echo``.

Spec: RFC 9112 §7.1 (chunked transfer coding), §6.1 (Transfer-Encoding), §6.3 (framing).
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
    # ---- EXERCISE: replace the line below with your code. ----------------------------------
    # Hints: ``await reader.readuntil(b"\r\n")`` returns one line, CRLF included;
    # ``await reader.readexactly(n)`` returns exactly n bytes. ``int(text, 16)`` turns hex
    # into a number but takes more than a chunk-size (read its documentation): check that
    # every byte is a HEXDIG first. Loop over chunks until the size is 0, then skip trailer
    # lines until an empty line.
    raise NotImplementedError("exercise 1: decode the chunked body in read_chunked()")
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
