"""The user endpoint on bare asyncio: an HTTP/1.1 Protocol on uvloop, split by hand.

The bottom layer of ``bench layers``: no server framework and no interface (no ASGI, no WSGI).
One :class:`UserProtocol` per connection keeps a byte buffer; every time bytes arrive it takes
as many complete requests off the front as the buffer holds (head up to the blank line, then
exactly ``Content-Length`` body bytes), answers each through :func:`apps.user.endpoint`, and
keeps the rest for the next ``data_received``. Because the endpoint is synchronous, answers go
out in request order, so pipelined requests are safe. Connections stay open between requests
(HTTP/1.1 persistence) until the client says ``Connection: close``, an HTTP/1.0 client does
not ask for keep-alive, or the connection sits idle for ``KEEP_ALIVE_TIMEOUT`` seconds.

Deliberately left out: chunked request bodies (501), ``Expect: 100-continue``, backpressure
on writes (every answer is small), header validation beyond splitting, and the ``Date`` and
``Server`` headers a real server adds.

Spec: RFC 9112 §2.1 (message format), §3 (request line), §5 (field lines), §6.2
(Content-Length), §6.3 (message body length), §9.3 (persistence), §9.3.2 (pipelining).

Compare with: ``uvicorn/protocols/http/httptools_impl.py`` (the same Protocol skeleton with a
real parser and ASGI on top).

Run it: ``python -m apps.raw_user --host 127.0.0.1 --port 8000``; SIGTERM or Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import cast

import uvloop

from apps.user import CONTENT_TYPE, UserError, endpoint

# --- constants -----------------------------------------------------------------------------

KEEP_ALIVE_TIMEOUT = 5.0  # seconds an idle connection is kept
MAX_HEAD = 64 * 1024  # bytes of request line + headers before we answer 431
MAX_BODY = 1024 * 1024  # bytes of body before we answer 413

_REASONS = {
    200: b"OK", 400: b"Bad Request", 404: b"Not Found", 405: b"Method Not Allowed",
    413: b"Content Too Large", 422: b"Unprocessable Content",
    431: b"Request Header Fields Too Large", 501: b"Not Implemented",
}

# --- wire helpers --------------------------------------------------------------------------


def response(status: int, body: bytes, *, connection: bytes = b"", extra: bytes = b"") -> bytes:
    """One complete HTTP/1.1 response: status line, headers, blank line, body (RFC 9112 §2.1).

    ``connection`` is the ``Connection`` header's value, or empty for none (HTTP/1.1's default
    of keeping the connection open).
    """
    head = b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s%s\r\n" % (
        status, _REASONS[status], CONTENT_TYPE.encode(), len(body), extra,
        b"Connection: %s\r\n" % connection if connection else b"",
    )
    return head + body


def error(message: str) -> bytes:
    """A JSON error body, ``{"error": message}``."""
    return b'{"error": "%s"}' % message.encode()


# --- Protocol interface --------------------------------------------------------------------


class UserProtocol(asyncio.Protocol):
    """One client connection: buffer bytes, cut complete requests off the front, answer them."""

    def __init__(self, connections: set[UserProtocol]) -> None:
        self.connections = connections
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport implements asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        self.connections.add(self)
        self.arm_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        self.cancel_timer()
        self.transport = None

    # --8<-- [start:data_received]
    def data_received(self, data: bytes) -> None:
        self.cancel_timer()
        self.buffer += data
        while self.transport is not None and not self.transport.is_closing():
            if not self.handle_one():
                break
        if self.transport is not None and not self.transport.is_closing() and not self.buffer:
            self.arm_timer()
    # --8<-- [end:data_received]

    def handle_one(self) -> bool:
        """Answer the request at the front of the buffer; False when it is not complete yet."""
        assert self.transport is not None
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEAD:
                self.fail(431, "request head too large")
            return False
        lines = bytes(self.buffer[:end]).split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            self.fail(400, "bad request line")
            return False
        method, target, version = parts
        length = 0
        keep_alive = version == b"HTTP/1.1"  # RFC 9112 §9.3: 1.1 persists by default
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                self.fail(400, "bad header line")
                return False
            name = name.strip().lower()
            value = value.strip()
            if name == b"content-length":
                if not value.isdigit():
                    self.fail(400, "bad content-length")
                    return False
                length = int(value)
            elif name == b"transfer-encoding":
                self.fail(501, "transfer-encoding not supported")
                return False
            elif name == b"connection":
                tokens = value.lower()
                if b"close" in tokens:
                    keep_alive = False
                elif b"keep-alive" in tokens:
                    keep_alive = True
        if length > MAX_BODY:
            self.fail(413, "body too large")
            return False
        start = end + 4
        if len(self.buffer) < start + length:
            return False  # RFC 9112 §6.3: wait for exactly Content-Length body bytes
        body = bytes(self.buffer[start:start + length])
        del self.buffer[:start + length]
        # RFC 9112 §9.3: say "close" when we will close; an HTTP/1.0 client that asked for
        # keep-alive needs to hear it back, since persistence is not its default.
        if not keep_alive:
            connection = b"close"
        else:
            connection = b"keep-alive" if version == b"HTTP/1.0" else b""
        self.transport.write(self.answer(method, target, body, connection))
        if not keep_alive:
            self.transport.close()
            return False
        return True

    def answer(self, method: bytes, target: bytes, body: bytes, connection: bytes) -> bytes:
        """The response to one complete request."""
        if target != b"/":
            return response(404, error("not found"), connection=connection)
        if method != b"POST":
            return response(405, error("method not allowed"), connection=connection,
                            extra=b"Allow: POST\r\n")
        try:
            return response(200, endpoint(body), connection=connection)
        except UserError as exc:
            return response(exc.status, exc.body(), connection=connection)

    def fail(self, status: int, message: str) -> None:
        """Answer a request we cannot frame, then close: the rest of the stream is unusable."""
        assert self.transport is not None
        self.transport.write(response(status, error(message), connection=b"close"))
        self.transport.close()
        self.buffer.clear()

    def arm_timer(self) -> None:
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(KEEP_ALIVE_TIMEOUT, self.idle_timeout)

    def cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def idle_timeout(self) -> None:
        if self.transport is not None and not self.buffer:
            self.transport.close()


# --- serve() and run() ---------------------------------------------------------------------


async def serve(host: str, port: int) -> None:
    """Listen on ``host:port`` until SIGTERM or SIGINT, then close every connection.

    Raises:
        OSError: the address cannot be bound.
    """
    loop = asyncio.get_running_loop()
    connections: set[UserProtocol] = set()
    server = await loop.create_server(lambda: UserProtocol(connections), host, port,
                                      reuse_address=True, backlog=2048)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    server.close()
    for protocol in list(connections):
        if protocol.transport is not None:
            protocol.transport.close()
    await server.wait_closed()


def main(argv: list[str] | None = None) -> int:
    """``python -m apps.raw_user [--host H] [--port P]``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m apps.raw_user",
                                     description="The user endpoint on bare asyncio + uvloop.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    try:
        uvloop.run(serve(args.host, args.port))
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
