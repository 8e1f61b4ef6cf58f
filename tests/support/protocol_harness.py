"""One harness for the protocol classes of the three toy HTTP/1.1 servers.

A ``Harness`` is one connection: a server's protocol object on a ``MockTransport``, driven on
a ``FakeClockLoop`` (see ``mock.py``), so keep-alive, deadlines, pipelining and backpressure are
deterministic. The tests talk to it the way a client and a clock would: ``feed`` bytes and read
what was written, ``advance`` the clock, look at ``closed`` and ``reading_paused``. They observe
the wire and the transport, not the servers' private attributes, so a server's internals can
change under them.

The fixtures (``tests/conftest.py``): ``toy_server`` is a registry name, parametrized over
``PROTOCOLS`` with the ids ``toy-raw``, ``toy-h11``, ``toy-httptools`` (a per-server test file
overrides it with its one name); ``connect(app, **config)`` opens a connection to that server
serving ``app``; ``fake_loop`` is the loop they run on.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from tests.support.mock import FakeClockLoop, MockTransport
from toyservers.config import Config
from toyservers.h11_server import H11Protocol
from toyservers.httptools_server import HttpToolsProtocol
from toyservers.protocol import HTTPProtocol
from toyservers.raw_asyncio import RawHTTPProtocol
from toyservers.state import ServerState

App = Callable[..., Any]
T = TypeVar("T")

#: Registry name -> the server's protocol class.
PROTOCOLS: dict[str, type[HTTPProtocol]] = {
    "toy-raw": RawHTTPProtocol,
    "toy-h11": H11Protocol,
    "toy-httptools": HttpToolsProtocol,
}

GET = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"


class RecordingTransport(MockTransport):
    """A MockTransport that also keeps each ``write`` call apart, in ``writes``."""

    def __init__(self, peername: tuple[str, int] = ("127.0.0.1", 50000)) -> None:
        super().__init__(peername=peername)
        self.writes: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        super().write(data)
        self.writes.append(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        """One call, one write (uvloop makes it one writev); nothing for empty pieces."""
        if data := b"".join(list_of_data):
            self.write(data)


class Harness:
    """One connection to a toy server's protocol, on a MockTransport and a FakeClockLoop."""

    def __init__(self, loop: FakeClockLoop, protocol_class: type[HTTPProtocol],
                 state: ServerState, peer_port: int = 50000) -> None:
        self.loop = loop
        self.state = state
        self.transport = RecordingTransport(peername=("127.0.0.1", peer_port))
        self.protocol: Any = self.call(lambda: protocol_class(state))
        self.call(lambda: self.protocol.connection_made(self.transport))

    def connect(self, peer_port: int = 50001) -> Harness:
        """Another connection to the same server (same app, config and server state)."""
        return Harness(self.loop, type(self.protocol), self.state, peer_port)

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` inside the loop (as asyncio runs protocol callbacks); its result is
        what it returned there, before anything else waiting on the loop ran."""
        async def inside() -> T:
            return fn()
        return self.loop.run_until_complete(inside())

    def spin(self, rounds: int = 20) -> None:
        """Let ready callbacks and tasks run, ``rounds`` loop turns (no clock movement)."""
        for _ in range(rounds):
            self.loop.run_until_complete(asyncio.sleep(0))

    def push(self, data: bytes) -> None:
        """Deliver ``data`` on the loop, as the transport does; run nothing yet."""
        self.loop.call_soon(self.protocol.data_received, data)

    def feed(self, data: bytes, rounds: int = 20) -> bytes:
        """Deliver ``data``, let the loop run, and return (and clear) what was written."""
        self.push(data)
        self.spin(rounds)
        return self.transport.take()

    def take(self) -> bytes:
        """Everything written since the last take."""
        return self.transport.take()

    def advance(self, seconds: float) -> None:
        """Move the clock forward and let the timers now due run."""
        self.loop.advance(seconds)
        self.spin()

    def lose(self) -> None:
        """The client goes away: ``connection_lost(None)``, then let the loop run."""
        self.call(lambda: self.protocol.connection_lost(None))
        self.spin()

    def shutdown(self) -> None:
        """The server asks this connection to stop (graceful shutdown)."""
        self.call(self.protocol.shutdown)

    @property
    def closed(self) -> bool:
        return self.transport.closed

    @property
    def reading_paused(self) -> bool:
        return self.transport.reading_paused


def open_connection(loop: FakeClockLoop, server: str, app: App, *,
                    lifespan_state: dict[str, Any] | None = None, **config: Any) -> Harness:
    """A connection to ``server`` serving ``app`` with ``Config(**config)`` (access log off
    unless asked for)."""
    config.setdefault("access_log", False)
    state = ServerState(app, Config(**config), {} if lifespan_state is None else lifespan_state)
    return Harness(loop, PROTOCOLS[server], state)


def fake_loop_fixture() -> Iterator[FakeClockLoop]:
    """A FakeClockLoop, closed after the test with every task left on it cancelled."""
    loop = FakeClockLoop()
    try:
        yield loop
    finally:
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()


# --- reading what was written --------------------------------------------------------------------


def statuses(data: bytes) -> list[int]:
    """The status codes of the responses in ``data`` (interim ones included)."""
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)]


def split_response(data: bytes) -> tuple[bytes, dict[bytes, bytes], bytes]:
    """A response's status line, its fields (names lowercased) and everything after the head."""
    head, _, body = data.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    fields = dict(line.split(b": ", 1) for line in lines)
    return status, {k.lower(): v for k, v in fields.items()}, body


async def hello_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers every request 200 with ``hello`` (the server adds the Content-Length)."""
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello"})


def after(gate: asyncio.Event, app: App) -> App:
    """An app that waits until ``gate`` is set, then runs ``app``."""
    async def waiting(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await gate.wait()
        await app(scope, receive, send)
    return waiting


def body_reader(sizes: list[int], start: asyncio.Event | None = None) -> App:
    """An app that waits for ``start`` (when given), reads the whole request body recording
    the size of each ``http.request`` message in ``sizes``, then answers like hello_app."""
    async def reader(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if start is not None:
            await start.wait()
        while True:
            message = await receive()
            sizes.append(len(message["body"]))
            if not message["more_body"]:
                break
        await hello_app(scope, receive, send)
    return reader
