"""Lesson 1, step 2: parse the request line and answer with a real HTTP response.

Run: ``.venv/bin/python lessons/code/01-bytes/step2_request_line.py 8000``, then ``curl -i http://127.0.0.1:8000/hello``.

The server reads the request head (everything up to the blank line), splits the first line
into method, target and version, and answers ``200 OK`` with a short text body, or
``400 Bad Request`` when the line is malformed. One request per connection: the response says
``Connection: close`` and the server closes.

Deliberately left out: the header fields (read but ignored), the body, keep-alive.
Spec: RFC 9112 §3 (request line), §4 (status line); RFC 9110 §6.6.1 (Date).
"""

from __future__ import annotations

import asyncio
import sys
from email.utils import formatdate


# --8<-- [start:parse]
class BadRequest(Exception):
    """The request cannot be parsed: the server answers 400 and closes the connection."""


def parse_request_line(line: bytes) -> tuple[str, str, str]:
    """Split ``b"GET /path HTTP/1.1"`` into ``("GET", "/path", "HTTP/1.1")``.

    RFC 9112 §3: request-line = method SP request-target SP HTTP-version. Exactly three parts
    separated by single spaces; we accept upper-case methods, origin-form targets (starting
    with ``/``) and HTTP/1.0 or HTTP/1.1.

    Raises:
        BadRequest: anything else.
    """
    parts = line.split(b" ")
    if len(parts) != 3:
        raise BadRequest(f"request line needs three parts: {line!r}")
    method, target, version = parts
    if not (method.isalpha() and method.isupper()):
        raise BadRequest(f"bad method {method!r}")
    if not target.startswith(b"/") or not target.isascii():
        raise BadRequest(f"bad request target {target!r}")
    if version not in (b"HTTP/1.0", b"HTTP/1.1"):
        raise BadRequest(f"unsupported version {version!r}")
    return method.decode("ascii"), target.decode("ascii"), version.decode("ascii")
# --8<-- [end:parse]


# --8<-- [start:respond]
def response(status: str, body: bytes) -> bytes:
    """A complete HTTP/1.1 response: status line, header fields, blank line, body.

    RFC 9112 §4: status-line = HTTP-version SP status-code SP [ reason-phrase ]. Every line
    ends with CRLF; an empty line ends the head; ``Content-Length`` says where the body ends.
    """
    head = (
        f"HTTP/1.1 {status}\r\n"
        f"Date: {formatdate(usegmt=True)}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n"
        "\r\n"
    )
    return head.encode("latin-1") + body
# --8<-- [end:respond]


# --8<-- [start:handle]
async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Read one request head, answer it, close."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")  # the head ends with an empty line
        request_line = head.split(b"\r\n", 1)[0]
        try:
            method, target, version = parse_request_line(request_line)
        except BadRequest as exc:
            writer.write(response("400 Bad Request", f"{exc}\n".encode()))
        else:
            body = f"you asked for {method} {target} over {version}\n".encode()
            writer.write(response("200 OK", body))
        await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass  # the client left early or sent a head too large for the buffer: just close
    finally:
        writer.close()
# --8<-- [end:handle]


async def main(port: int) -> None:
    """Listen on 127.0.0.1:``port`` and run ``handle`` once per connection."""
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 8000))
    except KeyboardInterrupt:
        pass
