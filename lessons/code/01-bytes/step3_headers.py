"""Lesson 1, step 3: parse the header fields.

Run: ``.venv/bin/python lessons/code/01-bytes/step3_headers.py 8000``, then ``curl -i http://127.0.0.1:8000/headers``.

The request head is now parsed whole: the request line (step 2) and then one header field per
line, ``name: value``. ``GET /headers`` answers with the fields the server understood, one per
line, names lower-cased (HTTP field names are case-insensitive, RFC 9110 §5.1). Malformed
fields get 400, a head larger than ``MAX_HEAD`` bytes gets 431.

Deliberately left out: the body, keep-alive.
Spec: RFC 9112 §2.2 (message parsing), §3.2 (Host), §5 (field syntax, no obs-fold);
RFC 6585 §5 (431).
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from email.utils import formatdate

MAX_HEAD = 8192
"""Largest request head we read, bytes; beyond it the answer is 431."""


class BadRequest(Exception):
    """The request cannot be parsed: the server answers 400 and closes the connection."""


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


# --8<-- [start:headers]
@dataclass
class Request:
    """A parsed request head. ``headers``: (lower-cased name, value) pairs in arrival order."""

    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]

    def header(self, name: str) -> str | None:
        """The value of the first field called ``name`` (lower-case), or None."""
        return next((value for key, value in self.headers if key == name), None)


def parse_head(head: bytes) -> Request:
    """Parse a request head (request line, field lines, the empty line) into a ``Request``.

    RFC 9112 §5: field-line = field-name ":" OWS field-value OWS. No whitespace is allowed
    between the name and the colon (§5.1: answer 400); a line starting with whitespace is an
    obsolete folded continuation, which we reject (§5.2 allows it). No request may carry more
    than one Host field, and an HTTP/1.1 request must carry one (§3.2: answer 400).

    Raises:
        BadRequest: any of the above.
    """
    request_line, *field_lines = head.rstrip(b"\r\n").split(b"\r\n")
    method, target, version = parse_request_line(request_line)
    headers = []
    for line in field_lines:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip() or line[:1] in (b" ", b"\t"):
            raise BadRequest(f"malformed field line {line!r}")
        headers.append((name.decode("latin-1").lower(), value.strip(b" \t").decode("latin-1")))
    request = Request(method, target, version, headers)
    hosts = [value for key, value in headers if key == "host"]
    if len(hosts) > 1 or (version == "HTTP/1.1" and not hosts):  # RFC 9112 §3.2
        raise BadRequest("more than one Host field, or none in an HTTP/1.1 request")
    return request
# --8<-- [end:headers]


def response(status: str, body: bytes) -> bytes:
    """A complete HTTP/1.1 response with ``Connection: close`` (RFC 9112 §4, §9.6)."""
    head = (
        f"HTTP/1.1 {status}\r\n"
        f"Date: {formatdate(usegmt=True)}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n"
        "\r\n"
    )
    return head.encode("latin-1") + body


# --8<-- [start:handle]
def app(request: Request) -> bytes:
    """What this server does with a request: list the headers, or say hello."""
    if request.target == "/headers":
        lines = [f"{name}: {value}\n" for name, value in request.headers]
        return response("200 OK", "".join(lines).encode("latin-1"))
    who = request.header("user-agent") or "stranger"
    return response("200 OK", f"hello, {who}: you asked for {request.target}\n".encode())


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Read one request head, answer it, close."""
    try:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            writer.write(app(parse_head(head)))
        except asyncio.LimitOverrunError:
            writer.write(response("431 Request Header Fields Too Large", b"head too large\n"))
        except BadRequest as exc:
            writer.write(response("400 Bad Request", f"{exc}\n".encode()))
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass  # the client left before sending a whole head
    finally:
        writer.close()
# --8<-- [end:handle]


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
