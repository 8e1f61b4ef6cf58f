"""One toy-h2 connection in memory: the server's protocol on a mock transport, an h2 client.

``H2Harness`` puts toy-h2's ``H2Protocol`` (or, with ``http1=True``, the ``HTTP1ToH2Protocol`` every
cleartext connection starts on) on a ``SwitchingTransport`` and a ``FakeClockLoop``, and talks
to it with an ``h2.connection.H2Connection`` client: no socket, no waiting. ``pump()`` moves
bytes both ways and lets the loop run until both sides are quiet, and returns the client's new
h2 events (GOAWAY frames are kept apart, in ``goaways``); with ``auto_ack`` the client grants
back the credit of the DATA it receives, as a reading client does. Raw frames
(``send_frames``) and raw bytes (``send_bytes``) reach what an h2 client refuses to send.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import h2.config
import h2.connection
import h2.events
from hyperframe.frame import Frame

from tests.support.mock import FakeClockLoop, MockTransport
from toyservers.config import Config
from toyservers.h2_server import H2Protocol, HTTP1ToH2Protocol
from toyservers.state import ServerState

T = TypeVar("T")
AUTHORITY = b"example.com"
GOAWAY = 0x7  # the frame type (RFC 9113 §6.8)


def split_frames(data: bytes) -> list[tuple[int, int, bytes, bytes]]:
    """The whole frames in ``data`` as ``(type, stream id, payload, frame bytes)``."""
    frames, at = [], 0
    while at + 9 <= len(data):
        length = int.from_bytes(data[at:at + 3], "big")
        frame = data[at:at + 9 + length]
        sid = int.from_bytes(frame[5:9], "big") & 0x7FFFFFFF
        frames.append((frame[3], sid, frame[9:], frame))
        at += 9 + length
    return frames


class SwitchingTransport(MockTransport):
    """A MockTransport whose protocol can change hands (``set_protocol``), as after ALPN, an
    HTTP/2 preface or an h2c upgrade."""

    def __init__(self) -> None:
        super().__init__()
        self.protocol: asyncio.BaseProtocol | None = None

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self.protocol is not None
        return self.protocol


class H2Harness:
    """A toy-h2 connection serving ``app`` with ``Config(**config)``, and its h2 client."""

    def __init__(self, loop: FakeClockLoop, app: Any, *, http1: bool = False,
                 client_settings: dict[int, int] | None = None, **config: Any) -> None:
        config.setdefault("access_log", False)
        self.loop = loop
        self.state = ServerState(app, Config(**config), {})
        self.transport = SwitchingTransport()
        protocol_class = HTTP1ToH2Protocol if http1 else H2Protocol
        protocol = self.call(lambda: protocol_class(self.state))
        self.transport.set_protocol(protocol)
        self.call(lambda: protocol.connection_made(self.transport))
        self.client = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding=None))
        self.auto_ack = True
        self.events: list[h2.events.Event] = []
        self.goaways: list[tuple[int, int]] = []  # (error code, last stream id) received
        if not http1:
            self.client.initiate_connection()
            if client_settings:
                self.client.update_settings(client_settings)
            self.pump()

    @property
    def protocol(self) -> Any:
        return self.transport.get_protocol()

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` inside the loop, as asyncio runs protocol callbacks."""
        async def inside() -> T:
            return fn()
        return self.loop.run_until_complete(inside())

    def spin(self, rounds: int = 10) -> None:
        for _ in range(rounds):
            self.loop.run_until_complete(asyncio.sleep(0))

    def send_bytes(self, data: bytes) -> None:
        """Deliver ``data`` to the server as one read."""
        if data and not self.transport.closed:
            self.call(lambda: self.protocol.data_received(data))

    def send_frames(self, frames: Iterable[Frame]) -> None:
        self.send_bytes(b"".join(frame.serialize() for frame in frames))

    def pump(self, rounds: int = 50) -> list[h2.events.Event]:
        """Client bytes to the server, server bytes to the client, until both are quiet."""
        new: list[h2.events.Event] = []
        for _ in range(rounds):
            out = self.client.data_to_send()
            self.send_bytes(out)
            self.spin()
            data = self.take_goaways(self.transport.take())
            if data:
                events = self.client.receive_data(data)
                for event in events:
                    if self.auto_ack and isinstance(event, h2.events.DataReceived):
                        self.client.acknowledge_received_data(
                            event.flow_controlled_length or 0, event.stream_id or 0)
                new += events
            if not out and not data:
                break
        self.events += new
        return new

    def take_goaways(self, data: bytes) -> bytes:
        """``data`` without its GOAWAY frames, which go to ``goaways`` as ``(error_code,
        last_stream_id)``: h2 as a client refuses every frame after a GOAWAY, while RFC 9113
        §6.8 lets the streams below its last stream id finish (a real client, curl or a
        browser, reads on)."""
        kept = []
        for kind, _, payload, frame in split_frames(data):
            if kind == GOAWAY:
                self.goaways.append((int.from_bytes(payload[4:8], "big"),
                                     int.from_bytes(payload[:4], "big") & 0x7FFFFFFF))
            else:
                kept.append(frame)
        return b"".join(kept)

    def request(self, path: bytes = b"/", method: bytes = b"GET", body: bytes | None = None,
                headers: Iterable[tuple[bytes, bytes]] = (), end: bool = True) -> int:
        """Open a stream with a request (and its body); the stream id."""
        sid: int = self.client.get_next_available_stream_id()
        self.client.send_headers(sid, [
            (b":method", method), (b":scheme", b"http"), (b":authority", AUTHORITY),
            (b":path", path), *headers], end_stream=end and body is None)
        if body is not None:
            self.client.send_data(sid, body, end_stream=end)
        return sid

    def response(self, sid: int) -> tuple[int, dict[bytes, bytes], bytes]:
        """Status, fields and body of stream ``sid``'s response, from the events so far."""
        status, fields, body = 0, {}, b""
        for event in self.events:
            if getattr(event, "stream_id", None) != sid:
                continue
            if isinstance(event, h2.events.ResponseReceived):
                fields = dict(event.headers or ())
                status = int(fields.pop(b":status"))
            elif isinstance(event, h2.events.DataReceived):
                body += event.data or b""
        return status, fields, body

    def of(self, kind: type[T], sid: int | None = None) -> list[T]:
        """The client's events of type ``kind`` so far (on stream ``sid``, when given)."""
        return [e for e in self.events if isinstance(e, kind)
                and (sid is None or getattr(e, "stream_id", None) == sid)]

    def advance(self, seconds: float) -> None:
        self.loop.advance(seconds)
        self.spin()
