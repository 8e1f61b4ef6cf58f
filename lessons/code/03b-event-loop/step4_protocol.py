"""Lesson 3b, step 4: asyncio's Protocol and Transport, and backpressure on the way out.

Run: ``.venv/bin/python lessons/code/03b-event-loop/step4_protocol.py 8000``, then
``curl -s --limit-rate 2M -o /dev/null 'http://127.0.0.1:8000/big?mib=4'`` and read the log:
writing paused and resumed many times, and the server never held more than about two chunks.
Start it with ``NO_DRAIN=1`` and the same curl: the server buffers the body in memory instead.

Step 3's loop, grown up, is asyncio's: ``loop.create_server(factory)`` makes one Protocol object
per connection and calls its methods (``connection_made``, ``data_received``,
``connection_lost``) from the loop's callbacks; the Protocol writes with ``transport.write()``,
which never waits: what the kernel does not take at once stays in the transport's write buffer.
Past the buffer's high-water mark (64 KiB by default) asyncio calls ``pause_writing()``, below
the low-water mark ``resume_writing()``. A server that goes on writing regardless buffers the
whole response for a slow client; one that waits (``FlowControl.drain``) keeps memory flat.

Deliberately left out: keep-alive, request bodies (reading's half of flow control is the
exercise), parsing beyond the request line (lesson 4 hands it to h11).
Spec: asyncio "Transports and Protocols" (``WriteTransport.set_write_buffer_limits``,
``BaseProtocol.pause_writing``); ASGI HTTP spec ("send" may wait: servers apply backpressure);
RFC 9112 §6.3 (Content-Length framing).
"""

from __future__ import annotations

import asyncio
import os
import sys
from socket import SO_SNDBUF, SOL_SOCKET
from urllib.parse import parse_qs, urlsplit

from toyservers.flow_control import FlowControl

CHUNK = 64 * 1024
"""Bytes per ``transport.write()`` of ``/big``."""

SEND_BUFFER = 32 * 1024
"""The kernel send buffer asked for on each connection, bytes (Linux doubles it)."""

DRAIN = os.environ.get("NO_DRAIN") != "1"
"""Whether ``/big`` waits for ``drain()`` between writes (``NO_DRAIN=1`` turns it off)."""


# --8<-- [start:protocol]
class HTTPProtocol(asyncio.Protocol):
    """One connection: asyncio calls these methods; they never block and never wait."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        # Loopback's kernel buffers hold megabytes: shrink ours so the demo shows the
        # transport's own buffer at work (a real server leaves this to the kernel).
        transport.get_extra_info("socket").setsockopt(SOL_SOCKET, SO_SNDBUF, SEND_BUFFER)
        self.flow = FlowControl(transport)
        self.inbox = b""
        self.pauses = 0

    def data_received(self, data: bytes) -> None:
        self.inbox += data
        if b"\r\n\r\n" in self.inbox and not hasattr(self, "task"):
            target = self.inbox.split(b" ", 2)[1].decode("latin-1")
            self.task = asyncio.get_running_loop().create_task(self.respond(target))

    def pause_writing(self) -> None:  # the write buffer went over its high-water mark
        self.pauses += 1
        if self.pauses == 1:
            print(f"pause_writing: {self.transport.get_write_buffer_size()} bytes buffered",
                  flush=True)
        self.flow.pause_writing()

    def resume_writing(self) -> None:  # ... and drained below the low-water mark
        self.flow.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.flow.resume_writing()  # wake a waiting drain(): the next write sees the close
# --8<-- [end:protocol]

    # --8<-- [start:respond]
    async def respond(self, target: str) -> None:
        url = urlsplit(target)
        size = int(parse_qs(url.query).get("mib", ["1"])[0]) * 1024 * 1024
        if url.path != "/big":
            size = 0
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                             b"Content-Length: %d\r\nConnection: close\r\n\r\n" % size)
        peak, left = 0, size
        while left and not self.transport.is_closing():
            self.transport.write(b"x" * min(CHUNK, left))  # never waits: may only buffer
            left -= min(CHUNK, left)
            peak = max(peak, self.transport.get_write_buffer_size())
            if DRAIN:
                await self.flow.drain()  # wait here while the buffer is over high water
        print(f"GET {target}: {size} bytes, writing paused {self.pauses} times, "
              f"write buffer peaked at {peak} bytes", flush=True)
        self.transport.close()  # after the buffer is flushed
    # --8<-- [end:respond]


async def main(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(HTTPProtocol, "127.0.0.1", port)
    print(f"listening on http://127.0.0.1:{port} (drain {'on' if DRAIN else 'off'})", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 8000))
    except KeyboardInterrupt:
        pass
