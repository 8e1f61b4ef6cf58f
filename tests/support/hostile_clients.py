"""Hostile clients for the step servers of the ramp (lessons 4, 5, 7 and 10): each shows what
one step leaves unbounded, and that the next step bounds it.

- ``stall``: send some bytes, then nothing; what came back, and whether the server closed,
  within ``wait`` seconds (a half-sent head: slowloris at its simplest; a head announcing a
  body that never comes; a connection that says nothing).
- ``trickle``: send a request one byte every ``interval`` seconds until the server answers or
  closes, or ``wait`` seconds pass: a deadline that each byte starts again never fires.
- ``unread_download``: serve an app that streams a large response with the step's protocol
  class, in this process, to a client that reads nothing; how much the app got to send, and
  the peak of the server's write buffer (the bytes held in memory for that client).
"""

from __future__ import annotations

import asyncio
import importlib.util
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

CHUNK = 64 * 1024  # bytes per http.response.body message of the streaming app
SMALL_BUFFER = 4096  # SO_RCVBUF of a client that reads nothing: it takes little on its own


@dataclass
class Outcome:
    """What a hostile client saw: the bytes the server sent, and whether it closed."""

    data: bytes
    closed: bool

    @property
    def status(self) -> int | None:
        """The first response's status code, or None when nothing came."""
        line = self.data.split(b"\r\n", 1)[0]
        return int(line.split()[1]) if line.startswith(b"HTTP/1.1 ") else None


def read_for(sock: socket.socket, wait: float) -> Outcome:
    """Read until the server closes or ``wait`` seconds pass."""
    data, deadline = b"", time.monotonic() + wait
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            return Outcome(data, True)
        if not chunk:
            return Outcome(data, True)
        data += chunk
    return Outcome(data, False)


def stall(address: tuple[str, int], data: bytes, wait: float) -> Outcome:
    """Send ``data``, then nothing; what the server does within ``wait`` seconds."""
    with socket.create_connection(address, timeout=wait) as sock:
        sock.sendall(data)
        return read_for(sock, wait)


def trickle(address: tuple[str, int], data: bytes, interval: float, wait: float) -> Outcome:
    """Send ``data`` a byte every ``interval`` seconds until the server answers or closes, or
    ``wait`` seconds pass (``data`` must be long enough to last); after an answer, read on
    until the server closes or ``wait`` runs out, since the close comes after the answer."""
    deadline = time.monotonic() + wait
    with socket.create_connection(address, timeout=wait) as sock:
        received = b""
        for byte in data:
            try:
                sock.sendall(bytes([byte]))
            except OSError:  # closed under us: what it said is in the buffer
                return Outcome(received + read_for(sock, 0.5).data, True)
            step = read_for(sock, min(interval, deadline - time.monotonic()))
            received += step.data
            if step.data and not step.closed:  # an answer: the close, if any, follows it
                rest = read_for(sock, max(0.0, deadline - time.monotonic()))
                return Outcome(received + rest.data, rest.closed)
            if step.closed or time.monotonic() >= deadline:
                return Outcome(received, step.closed)
        return Outcome(received, False)


def small_listener() -> socket.socket:
    """A listening socket on a free port of 127.0.0.1 whose connections get small kernel
    buffers (Linux copies SO_SNDBUF and SO_RCVBUF to accepted sockets): what a server holds
    for a client that reads nothing then piles up in its own memory, not the kernel's."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SMALL_BUFFER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_BUFFER)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def load(path: Path) -> ModuleType:
    """Import a step file as a module (its folder holds no package)."""
    spec = importlib.util.spec_from_file_location(f"step_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Download:
    """A large response to a client that reads nothing: the app's progress, the server's
    memory for it."""

    chunks: int  # CHUNK-byte pieces the app asked for
    sent: int  # pieces its send() returned from within the time allowed
    peak_buffer: int  # the largest the server's write buffer got, bytes


def unread_download(make_protocol: Callable[[Any], asyncio.Protocol], chunks: int,
                    wait: float = 1.0) -> Download:
    """Serve an app streaming ``chunks`` pieces of CHUNK bytes with ``make_protocol(app)``; a
    client with a small receive buffer asks for it and reads nothing for ``wait`` seconds."""
    sent = 0

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal sent
        await receive()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(chunks * CHUNK).encode())]})
        for i in range(chunks):
            await send({"type": "http.response.body", "body": bytes(CHUNK),
                        "more_body": i < chunks - 1})
            sent += 1

    async def main() -> int:
        protocols: list[asyncio.Protocol] = []

        def factory() -> asyncio.Protocol:
            protocols.append(make_protocol(app))
            return protocols[-1]

        loop = asyncio.get_running_loop()
        server = await loop.create_server(factory, sock=small_listener())
        async with server:
            client = socket.socket()
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_BUFFER)
            client.setblocking(False)
            await loop.sock_connect(client, server.sockets[0].getsockname()[:2])
            await loop.sock_sendall(client, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            peak, end = 0, loop.time() + wait
            while loop.time() < end:
                await asyncio.sleep(0.01)
                transport = getattr(protocols[0], "transport", None) if protocols else None
                if transport is not None:
                    peak = max(peak, transport.get_write_buffer_size())
            client.close()
            for protocol in protocols:  # the app may still wait: end its connection
                protocol.transport.abort()  # type: ignore[attr-defined]
            await asyncio.sleep(0)
        return peak

    peak = asyncio.run(main())
    return Download(chunks, sent, peak)
