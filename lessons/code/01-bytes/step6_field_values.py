"""Lesson 1, step 6: step 5 with one failure of the hostile corpus fixed: control bytes in values.

Run: ``.venv/bin/python lessons/code/01-bytes/step6_field_values.py 8000``, then
``curl -i -H $'X-Ctl: a\x01b' http://127.0.0.1:8000/``: 400.

The "Test your own server" page points the project's hostile corpus at step 5. Among its
failures, five cases send a field value holding a control byte (NUL, CR, LF, ^A, DEL), and
step 5 answers 200: it stripped the value's ends and kept the rest. RFC 9110 §5.5 allows
visible characters, spaces, tabs and bytes from 0x80 in a field value, nothing else; a CR or
LF kept in a value is how a header is smuggled into a response or a log line, and a NUL ends
the value early for C code downstream. ``parse_head`` now refuses them with 400, before the
value is decoded. Everything else is step 5's.

Deliberately left out: every other failure the corpus reports for step 5 (chunked bodies,
the request-target's characters, the deadlines' 408s, the limits): the page's exercise.
Spec: RFC 9110 §5.5 (field values), RFC 9112 §5.2 (obsolete line folding).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from dataclasses import dataclass
from email.utils import formatdate

MAX_HEAD = 8192
"""Largest request head we read, bytes; beyond it the answer is 431."""

MAX_BODY = 1024 * 1024
"""Largest request body we accept, bytes; beyond it the answer is 413."""

KEEP_ALIVE_SECONDS = float(os.environ.get("KEEP_ALIVE_SECONDS", "5"))
"""How long an idle keep-alive connection may wait for its next request, seconds."""

CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]").search
"""Finds a byte a field value may not hold: a control character other than HTAB (RFC 9110 §5.5)."""


class HTTPError(Exception):
    """Answer with ``status`` (e.g. ``"400 Bad Request"``) and close the connection."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class BadRequest(HTTPError):
    """The request cannot be parsed: 400."""

    def __init__(self, reason: str) -> None:
        super().__init__("400 Bad Request", reason)


def parse_request_line(line: bytes) -> tuple[str, str, str]:
    """``b"GET /path HTTP/1.1"`` -> ``("GET", "/path", "HTTP/1.1")`` (RFC 9112 §3); BadRequest."""
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


@dataclass
class Request:
    """A parsed request. ``headers``: (lower-cased name, value) pairs; ``body``: bytes."""

    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]
    body: bytes = b""

    def header(self, name: str) -> str | None:
        """The value of the first field called ``name`` (lower-case), or None."""
        return next((value for key, value in self.headers if key == name), None)


def parse_head(head: bytes) -> Request:
    """Parse a request head into a ``Request`` with an empty body (RFC 9112 §2.2, §3.2, §5).

    Raises:
        BadRequest: a malformed request line or field line, a control byte in a field
            value, a repeated Host, or none in HTTP/1.1.
    """
    request_line, *field_lines = head.rstrip(b"\r\n").split(b"\r\n")
    method, target, version = parse_request_line(request_line)
    headers = []
    for line in field_lines:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip() or line[:1] in (b" ", b"\t"):
            raise BadRequest(f"malformed field line {line!r}")
        if CONTROL(value):  # a CR or LF here would start a new line downstream
            raise BadRequest(f"control byte in the value of {name!r}")
        headers.append((name.decode("latin-1").lower(), value.strip(b" \t").decode("latin-1")))
    hosts = [value for key, value in headers if key == "host"]
    if len(hosts) > 1 or (version == "HTTP/1.1" and not hosts):  # RFC 9112 §3.2
        raise BadRequest("more than one Host field, or none in an HTTP/1.1 request")
    return Request(method, target, version, headers)


# --8<-- [start:body]
def body_length(request: Request) -> int:
    """How many body bytes follow the head, from the request's framing fields.

    RFC 9112 §6.3: a request with neither Transfer-Encoding nor Content-Length has no body.
    Several Content-Length fields must agree; a value that is not a decimal number is an
    unrecoverable framing error (400). We do not decode Transfer-Encoding, so §6.1 says 501.

    Raises:
        HTTPError: 501 for Transfer-Encoding, 400 for a bad Content-Length, 413 when larger
            than ``MAX_BODY``.
    """
    if request.header("transfer-encoding") is not None:
        raise HTTPError("501 Not Implemented", "Transfer-Encoding is not supported here")
    values = {value for name, value in request.headers if name == "content-length"}
    if not values:
        return 0
    if len(values) > 1:
        raise BadRequest(f"conflicting Content-Length fields {sorted(values)}")
    (value,) = values
    if not (value.isascii() and value.isdigit()):
        raise BadRequest(f"bad Content-Length {value!r}")
    length = int(value)
    if length > MAX_BODY:
        raise HTTPError("413 Content Too Large", f"body larger than {MAX_BODY} bytes")
    return length


async def read_request(reader: asyncio.StreamReader) -> Request:
    """Read one whole request: the head up to the empty line, then exactly the body's bytes.

    Raises:
        HTTPError: from ``parse_head`` and ``body_length``.
        asyncio.IncompleteReadError: the client closed before the request was complete.
        asyncio.LimitOverrunError: the head is larger than the reader's limit.
    """
    request = parse_head(await reader.readuntil(b"\r\n\r\n"))
    request.body = await reader.readexactly(body_length(request))
    return request
# --8<-- [end:body]


def response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8",
             *, keep_alive: bool = False) -> bytes:
    """A complete HTTP/1.1 response that states whether the connection stays open (§9.6).

    HTTP/1.1 clients assume keep-alive anyway; HTTP/1.0 clients need to read it.
    """
    head = (
        f"HTTP/1.1 {status}\r\n"
        f"Date: {formatdate(usegmt=True)}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n"
        "\r\n"
    )
    return head.encode("latin-1") + body


def app(request: Request) -> tuple[str, bytes, str]:
    """``POST /echo`` sends the body back; anything else gets a line about the request.

    Returns (status, body, content type): the server, not the app, frames the response now,
    because only the server knows whether the connection stays open.
    """
    if request.target == "/echo":
        if request.method != "POST":
            return "405 Method Not Allowed", b"POST only\n", "text/plain; charset=utf-8"
        content_type = request.header("content-type") or "application/octet-stream"
        return "200 OK", request.body, content_type
    text = f"{request.method} {request.target}: {len(request.body)} body bytes\n"
    return "200 OK", text.encode(), "text/plain; charset=utf-8"


# --8<-- [start:keepalive]
def wants_keep_alive(request: Request) -> bool:
    """RFC 9112 §9.3: HTTP/1.1 persists unless "close" is among the Connection options;
    HTTP/1.0 persists only when the client sent "keep-alive"."""
    options = {opt.strip().lower() for opt in (request.header("connection") or "").split(",")}
    if request.version == "HTTP/1.1":
        return "close" not in options
    return "keep-alive" in options


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer requests on this connection, in order, until one of the sides wants to close."""
    try:
        keep_alive = True
        while keep_alive:
            try:
                # One timer for the idle wait and the read; uvicorn times them separately.
                request = await asyncio.wait_for(read_request(reader), KEEP_ALIVE_SECONDS)
            except TimeoutError:
                break  # idle too long (or too slow a request): close without a word
            except asyncio.LimitOverrunError:
                writer.write(response("431 Request Header Fields Too Large", b"head too large\n"))
                break
            except HTTPError as exc:  # after a framing error we cannot find the next request
                writer.write(response(exc.status, f"{exc}\n".encode()))
                break
            keep_alive = wants_keep_alive(request)
            status, body, content_type = app(request)
            writer.write(response(status, body, content_type, keep_alive=keep_alive))
            await writer.drain()
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass  # the client closed: between requests that is the normal way a connection ends
    finally:
        writer.close()
# --8<-- [end:keepalive]


async def main(port: int) -> None:
    """Listen on 127.0.0.1:``port``; ``limit`` caps how much ``readuntil`` may buffer."""
    server = await asyncio.start_server(handle, "127.0.0.1", port, limit=MAX_HEAD)
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 8000))
    except KeyboardInterrupt:
        pass
