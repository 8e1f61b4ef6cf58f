"""An RFC 8441 client: WebSockets on the streams of one HTTP/2 connection, for toy-h2's tests.

Autobahn|Testsuite has no HTTP/2, so toy-h2's WebSocket over HTTP/2 is driven by this client:
the conformance suite's ``H2Client`` (h2 on a blocking socket, every read with a deadline)
opens each WebSocket with an extended CONNECT (``:protocol websocket``), and wsproto's
frame-level ``Connection`` (no handshake: RFC 8441 has none of RFC 6455's) makes and reads the
frames, masked as a client's must be (RFC 6455 §5.3). Frames leave in DATA no faster than the
server's windows allow (``send_bytes`` waits for its WINDOW_UPDATE), and the client grants
credit for everything it receives as it arrives.

Spec: RFC 8441 §4-§5; RFC 6455 §5; RFC 9113 §6.9.
"""

from __future__ import annotations

import queue
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import wsproto.connection
import wsproto.events as ws
from wsproto import ConnectionType
from wsproto.extensions import Extension

from tests.conformance.h2client import H2Client, StreamResult
from tests.conformance.support import HOST


async def echo_until_disconnect(scope: dict[str, Any], receive: Callable[[], Awaitable[Any]],
                                send: Callable[[Any], Awaitable[None]],
                                disconnects: queue.Queue[tuple[bytes, dict[str, Any]]]) -> None:
    """The test apps' WebSocket echo after accept: every message back as it came, until
    ``websocket.disconnect``, which goes to ``disconnects`` with the scope's query string (the
    tag a test gave its WebSocket)."""
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return disconnects.put((scope["query_string"], message))
        await send({"type": "websocket.send", "text": message.get("text"),
                    "bytes": message.get("bytes")})


class H2WebSocketClient(H2Client):
    """One HTTP/2 connection to 127.0.0.1:``port``; ``connect`` opens a WebSocket on a new
    stream, ``send`` sends a wsproto event on it, ``receive`` waits for events from it."""

    def __init__(self, port: int, **options: Any) -> None:
        super().__init__(port, **options)
        self.sockets: dict[int, wsproto.connection.Connection] = {}
        self.parsed: dict[int, int] = {}  # bytes of each stream's DATA fed to wsproto

    def __enter__(self) -> H2WebSocketClient:
        return self

    def connect(self, path: str = "/ws", headers: Sequence[tuple[str, str]] = (), *,
                protocol: str = "websocket", extensions: Sequence[Extension] = (),
                end_stream: bool = False) -> int:
        """Send an extended CONNECT for ``path`` (offering ``extensions``: wsproto's) and wait
        for its response (or reset); on a 200 the stream speaks WebSocket, with the extensions
        the server agreed to. The stream id."""
        sid: int = self.conn.get_next_available_stream_id()
        stream = self.streams[sid] = StreamResult()
        head = [(":method", "CONNECT"), (":protocol", protocol), (":scheme",
                "https" if self.alpn else "http"), (":path", path), (":authority", f"{HOST}:1"),
                *headers]
        if not any(name == "sec-websocket-version" for name, _ in headers):
            head.append(("sec-websocket-version", "13"))
        if extensions:
            offers = [f"{e.name}; {offer}" if isinstance(offer := e.offer(), str) else e.name
                      for e in extensions]
            head.append(("sec-websocket-extensions", ", ".join(offers)))
        self.conn.send_headers(sid, head, end_stream=end_stream)
        self.flush()
        self.pump(lambda: stream.status != 0 or stream.done)
        if stream.status == 200:
            agreed = stream.headers.get("sec-websocket-extensions", "")
            accepted = [e for e in extensions if agreed.startswith(e.name)]
            for extension in accepted:
                extension.finalize(agreed)
            self.sockets[sid] = wsproto.connection.Connection(ConnectionType.CLIENT, accepted)
            self.parsed[sid] = 0
        return sid

    def send(self, sid: int, event: ws.Event, end_stream: bool = False) -> None:
        """Frame ``event`` (a message, a ping, a close) and send it on stream ``sid``."""
        self.send_bytes(sid, self.sockets[sid].send(event), end_stream)

    def send_bytes(self, sid: int, data: bytes, end_stream: bool = False) -> None:
        """``data`` in DATA frames within the server's windows, waiting for credit."""
        rest = memoryview(data)
        while rest:
            size = min(len(rest), self.conn.local_flow_control_window(sid),
                       self.conn.max_outbound_frame_size)
            if size <= 0:
                assert self.pump(lambda: self.conn.local_flow_control_window(sid) > 0), \
                    f"no credit from the server for stream {sid}"
                continue
            self.conn.send_data(sid, rest[:size].tobytes())
            rest = rest[size:]
            self.flush()
        if end_stream:
            self.conn.end_stream(sid)
            self.flush()

    def events(self, sid: int) -> list[ws.Event]:
        """The events in what stream ``sid`` received so far and not yet parsed."""
        stream, socket = self.streams[sid], self.sockets[sid]
        data = bytes(stream.data[self.parsed[sid]:])
        self.parsed[sid] += len(data)
        socket.receive_data(data)
        return list(socket.events())

    def receive(self, sid: int, until: Callable[[list[ws.Event]], bool],
                timeout: float | None = None) -> list[ws.Event]:
        """Read until ``until(events so far)``; the events, text and binary pieces joined
        into whole messages. AssertionError when they do not come in time."""
        got: list[ws.Event] = []
        partial: list[Any] = []

        def ready() -> bool:
            for event in self.events(sid):
                if isinstance(event, ws.Message):
                    partial.append(event.data)
                    if event.message_finished:
                        whole = "".join(partial) if isinstance(event, ws.TextMessage) \
                            else b"".join(partial)
                        got.append(type(event)(data=whole))
                        partial.clear()
                else:
                    got.append(event)
            return until(got)

        assert self.pump(ready, timeout), f"stream {sid}: only {got} ({self.streams[sid]})"
        return got

    def messages(self, sid: int, count: int) -> list[str | bytes]:
        """The next ``count`` whole messages on stream ``sid`` (other events dropped)."""
        events = self.receive(sid, lambda got: sum(isinstance(e, ws.Message)
                                                   for e in got) >= count)
        return [e.data for e in events if isinstance(e, ws.Message)]

    def close_of(self, sid: int) -> ws.CloseConnection:
        """Wait for the server's close frame on stream ``sid``."""
        events = self.receive(sid, lambda got: any(isinstance(e, ws.CloseConnection)
                                                   for e in got))
        return next(e for e in events if isinstance(e, ws.CloseConnection))
