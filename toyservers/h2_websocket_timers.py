"""The timers of the WebSocket streams of one toy-h2 connection, on one ``Deadline``.

Over HTTP/1.1 each WebSocket is a connection with its own ``Deadline``, whose kinds are
``"ping"`` (every ``ws_ping_interval`` seconds a keepalive ping), ``"pong"`` (no pong within
``ws_ping_timeout``: close 1011) and ``"close"`` (our close frame got no answer in
``CLOSE_TIMEOUT``: drop the connection): ``websocket_protocol.WSProtocol.on_timeout``. Over
HTTP/2 (RFC 8441) many WebSockets share a connection, one per stream
(``h2_websocket.WebSocketStream``); they keep the same three deadlines, with the same
meaning, but the connection arms one timer for all of them (``StreamTimers``), not one per
stream: a deadline per stream in a dict, the timer set for the earliest. The connection's own
``Deadline`` cannot serve: it runs ``"idle"`` or ``"body"`` for the requests beside them.

Deliberately left out: a heap of deadlines (a fired timer scans the dict: a connection has at
most ``http2.MAX_CONCURRENT_STREAMS`` streams, and the timer fires about once an interval).

Spec: RFC 6455 §5.5.2-§5.5.3 (ping and pong: "identical Application data"), §7.4.1 (1011);
RFC 8441 §5 (RST_STREAM is the stream's TCP reset); RFC 9113 §5.4.2 (a stream error ends one
stream, the connection goes on).

Compare with: uvicorn/protocols/websockets/wsproto_impl.py (``send_keepalive_ping``, its
``ws_ping_timeout`` deadline); hypercorn/protocol/ws_stream.py (``_send_pings``: pings on
every WebSocket, HTTP/1.1 or HTTP/2 alike, with no deadline for the pong).
"""

from __future__ import annotations

import asyncio
import os
from typing import Protocol

from h2.errors import ErrorCodes

from toyservers import websocket
from toyservers.asgi_websocket import CONNECTED, Engine, WebSocketCycle
from toyservers.config import Config
from toyservers.protocol import Deadline


class Timed(Protocol):
    """What the timers need of a WebSocket stream (``h2_websocket.WebSocketStream``)."""

    @property
    def cycle(self) -> WebSocketCycle: ...
    @property
    def engine(self) -> Engine: ...

    def write(self, data: bytes) -> None: ...
    def reset(self, code: ErrorCodes) -> None: ...


class StreamTimers:
    """The deadlines of one connection's WebSocket streams: at most one each, of the kinds
    ``"ping"``, ``"pong"`` and ``"close"`` (the module docstring), on one ``Deadline``.

    ``set(ws, kind, seconds)`` replaces the deadline of ``ws``; ``clear(ws)`` drops it;
    ``start(ws)`` starts the keepalive pings of an accepted WebSocket and ``pong(ws,
    payload)`` takes its pongs. The ``Deadline`` is armed for the earliest deadline, or
    earlier: a deadline moved later (a pong came) leaves the timer alone, which then fires,
    finds nothing due, and is set again for the earliest.
    """

    __slots__ = ("loop", "interval", "timeout", "deadline", "due")

    def __init__(self, loop: asyncio.AbstractEventLoop, config: Config) -> None:
        self.loop = loop
        self.interval, self.timeout = config.ws_ping_interval, config.ws_ping_timeout
        self.deadline = Deadline(loop, self.on_timeout)
        # Each stream's deadline: its kind, when (loop time, seconds), and for "pong" the
        # payload of the ping it answers (4 random bytes: a client's own pongs do not count)
        self.due: dict[Timed, tuple[str, float, bytes]] = {}

    def set(self, ws: Timed, kind: str, seconds: float, payload: bytes = b"") -> None:
        """The deadline of ``ws`` is now ``kind``, ``seconds`` from now."""
        when = self.loop.time() + seconds
        self.due[ws] = (kind, when, payload)
        if self.deadline.kind is None or when < self.deadline.when:
            self.deadline.set("stream", seconds)

    def clear(self, ws: Timed) -> None:
        """``ws`` is done: no deadline (with none left, the timer is cancelled)."""
        self.due.pop(ws, None)
        if not self.due:
            self.deadline.close()

    def start(self, ws: Timed) -> None:
        """The app accepted ``ws``: a ping in ``ws_ping_interval`` seconds (None or 0: never)."""
        if self.interval:
            self.set(ws, "ping", self.interval)

    def pong(self, ws: Timed, payload: bytes) -> None:
        """A pong from ``ws``: the answer to our ping (the same payload) means the next ping
        goes ``ws_ping_interval`` seconds from now; any other is ignored (RFC 6455 §5.5.3: an
        unsolicited pong)."""
        kind, _, pinged = self.due.get(ws, ("", 0.0, b""))
        if kind == "pong" and payload == pinged:
            self.start(ws)

    # --8<-- [start:on_timeout]
    def on_timeout(self, _: str) -> None:
        """The timer fired: act on every deadline due, then set the timer for the next."""
        now = self.loop.time()
        for ws, entry in list(self.due.items()):
            if entry[1] <= now and self.due.get(ws) is entry:  # (not moved meanwhile)
                del self.due[ws]
                self.expire(ws, entry[0])
        if self.due:
            first = min(when for _, when, _ in self.due.values())
            self.deadline.set("stream", max(0.0, first - self.loop.time()))
        else:
            self.deadline.close()

    def expire(self, ws: Timed, kind: str) -> None:
        """``ping``: send one (4 random bytes, to know its pong), wait ``ws_ping_timeout``
        seconds for the pong (None or 0: ping again an interval later); ``pong``: none came,
        close with 1011 as over HTTP/1.1 (the app's receive() says so, our close frame ends
        the stream); ``close``: the client never answered our close frame, RST_STREAM
        CANCEL."""
        if kind == "ping" and ws.cycle.state is CONNECTED:
            payload = os.urandom(4)
            ws.write(ws.engine.send_ping(payload))
            if self.timeout:
                self.set(ws, "pong", self.timeout, payload)
            else:
                self.start(ws)
        elif kind == "pong" and ws.cycle.state is CONNECTED:
            ws.cycle.close(websocket.INTERNAL_ERROR, "keepalive ping timeout")
        elif kind == "close":
            ws.reset(ErrorCodes.CANCEL)
    # --8<-- [end:on_timeout]

