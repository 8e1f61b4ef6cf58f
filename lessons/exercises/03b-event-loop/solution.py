"""Exercise 3b, solution: flow control on the way in, so a fast client cannot fill our memory.

``Inbox`` holds the request body bytes a connection has received and its app has not read yet.
``feed()`` (called from ``data_received``) adds to it; past ``HIGH_WATER_LIMIT`` bytes it asks
the transport to stop reading, so the kernel's receive buffer fills and TCP's window makes the
client wait. ``read()`` (awaited by the app) takes what is there, waits when there is nothing,
and lets the transport read again.

YOUR TASK: write ``feed`` and ``read`` below (look for "EXERCISE"). Check your work with
``make exercise N=3b``. Run the upload server with
``.venv/bin/python lessons/exercises/03b-event-loop/solution.py 8000`` and try
``head -c 4000000 /dev/zero | curl -s --data-binary @- http://127.0.0.1:8000/``: the answer
says how many bytes the server ever held at once.

Spec: asyncio "Transports and Protocols" (``ReadTransport.pause_reading``/``resume_reading``);
ASGI HTTP spec ("receive": servers apply backpressure); RFC 9293 §3.8.6 (the TCP window);
RFC 9110 §10.1.1 (``Expect: 100-continue``).
Compare with: toyservers/flow_control.py (``FlowControl.pause_reading``), uvicorn's
``FlowControl`` and ``RequestResponseCycle.receive``.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys

HIGH_WATER_LIMIT = 64 * 1024
"""Bytes of unread body buffered before reading pauses."""

READ_DELAY = float(os.environ.get("READ_DELAY", "0.01"))
"""How long the demo app spends on each piece it reads, seconds: a slow consumer."""


class Inbox:
    """The body bytes one connection received that its app has not read yet.

    Attributes:
        buffer: the unread bytes.
        paused: we asked the transport to stop reading.
        eof: the client sent everything (or went away).
    """

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.buffer = bytearray()
        self.paused = False
        self.eof = False
        self.waiter: asyncio.Future[None] | None = None  # set while read() waits

    def wake(self) -> None:
        """Let a waiting ``read()`` go on."""
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def feed_eof(self) -> None:
        self.eof = True
        self.wake()

    # --8<-- [start:exercise]
    def feed(self, data: bytes) -> None:
        """Keep ``data``, wake a waiting ``read()``, and pause reading (once) when more than
        ``HIGH_WATER_LIMIT`` bytes are buffered and the transport is not closing."""
        self.buffer += data
        self.wake()
        if len(self.buffer) > HIGH_WATER_LIMIT and not self.paused:
            if not self.transport.is_closing():
                self.paused = True
                self.transport.pause_reading()

    async def read(self) -> bytes:
        """Wait until there are bytes or EOF; return every buffered byte (``b""`` only at
        EOF with nothing left), and resume reading if it was paused."""
        while not self.buffer and not self.eof:
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
            self.waiter = None
        data = bytes(self.buffer)
        self.buffer.clear()
        if self.paused and not self.transport.is_closing():
            self.paused = False
            self.transport.resume_reading()
        return data
    # --8<-- [end:exercise]


class UploadProtocol(asyncio.Protocol):
    """Reads a request head, then feeds the body to an ``Inbox`` that a slow app reads."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.head = b""
        self.inbox: Inbox | None = None
        self.peak = 0  # most bytes the inbox ever held
        self.pauses = 0

    def data_received(self, data: bytes) -> None:
        if self.inbox is None:
            self.head += data
            if b"\r\n\r\n" not in self.head:
                return
            self.head, _, data = self.head.partition(b"\r\n\r\n")
            match = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", self.head)
            length = int(match.group(1)) if match else 0
            if re.search(rb"(?im)^expect:\s*100-continue\s*$", self.head):
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.inbox = Inbox(self.transport)
            asyncio.get_running_loop().create_task(self.app(length))
        was_paused = self.inbox.paused
        self.inbox.feed(data)
        self.pauses += self.inbox.paused and not was_paused
        self.peak = max(self.peak, len(self.inbox.buffer))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.inbox is not None:
            self.inbox.feed_eof()

    async def app(self, length: int) -> None:
        """A slow consumer: read the body piece by piece, then say what the server held."""
        assert self.inbox is not None
        received = 0
        while received < length:
            piece = await self.inbox.read()
            if not piece:
                break
            received += len(piece)
            await asyncio.sleep(READ_DELAY)
        body = (f"received {received} bytes; reading paused {self.pauses} times; "
                f"at most {self.peak} bytes buffered\n").encode()
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                             b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                             % (len(body), body))
        self.transport.close()


async def main(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(UploadProtocol, "127.0.0.1", port)
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 8000))
    except KeyboardInterrupt:
        pass
