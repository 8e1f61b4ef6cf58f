"""Lesson 5, step 2: the same tiny httptools server on asyncio's event loop or on uvloop.

Run: ``.venv/bin/python lessons/code/05-speed/step2_loops.py 8000`` (asyncio) or
``LOOP=uvloop .venv/bin/python lessons/code/05-speed/step2_loops.py 8000``, then
``curl -i http://127.0.0.1:8000/hello``; the ``x-loop`` header names the loop class.

Two things make uvicorn's default setup fast, and this step has both in under a hundred lines.
llhttp (through httptools) parses in C; uvloop replaces asyncio's pure-Python event loop with
one built on libuv, the I/O library under Node.js. uvloop is a drop-in: the protocol class
below does not change, only the loop that calls it. ``bench layers`` measures what each costs.

Deliberately left out: any application interface (the answer is built in
``on_message_complete``), request bodies beyond counting them, backpressure, timeouts, and
every error except a parse error (400, then close). ``toyservers/httptools_server.py`` has them.
Spec: RFC 9112 §6.3 (body length), §9.3 (persistence), §9.6 (tear-down); uvloop's README
(``uvloop.new_event_loop``, ``asyncio.Runner(loop_factory=...)``).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable

import httptools
import uvloop


# --8<-- [start:protocol]
class HelloProtocol(asyncio.Protocol):
    """One connection: llhttp parses, ``on_message_complete`` writes the whole response."""

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body_size = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.transport = transport  # uvloop's transports are not asyncio.Transport subclasses

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)  # the callbacks below run inside this call
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
                                 b"Connection: close\r\n\r\n")
            self.transport.close()

    # llhttp callbacks

    def on_message_begin(self) -> None:
        self.url = b""
        self.body_size = 0

    def on_url(self, url: bytes) -> None:
        self.url += url  # may come in pieces

    def on_body(self, body: bytes) -> None:
        self.body_size += len(body)

    def on_message_complete(self) -> None:
        assert self.transport is not None
        loop = type(asyncio.get_running_loop())
        body = b"%s %s: %d bytes\n" % (self.parser.get_method(), self.url, self.body_size)
        keep_alive = self.parser.should_keep_alive()
        self.transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n"
            b"x-loop: %s.%s\r\n%s\r\n%s" % (
                len(body), loop.__module__.encode(), loop.__name__.encode(),
                b"" if keep_alive else b"connection: close\r\n", body))
        if not keep_alive:
            self.transport.close()
# --8<-- [end:protocol]


# --8<-- [start:main]
LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


async def serve(port: int) -> None:
    """Listen on 127.0.0.1:``port`` with a ``HelloProtocol`` per connection, forever."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(HelloProtocol, "127.0.0.1", port)
    print(f"serving on http://127.0.0.1:{port} with {type(loop).__module__}."
          f"{type(loop).__name__}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    factory = LOOPS[os.environ.get("LOOP", "asyncio")]
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve(int(sys.argv[1]) if len(sys.argv) > 1 else 8000))
# --8<-- [end:main]
