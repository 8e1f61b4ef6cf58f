"""WebSocket on asyncio for every HTTP/1.1 toy server: the way out of HTTP (``upgrade``) and
the connection after it (``WSProtocol``).

I/O model: an HTTP/1.1 protocol that parsed a request asking ``Upgrade: websocket`` calls
``upgrade()`` from its ``handle_upgrade()`` (toy-raw's ``RawHTTPProtocol``, on our engine;
toy-httptools' ``RequestReader``, on ours too, and toy-h2's HTTP/1.1 side through it;
toy-h11's ``H11Protocol``, on wsproto). ``asgi_websocket.opening``, shared with toy-anyio,
checks the handshake (``websocket_handshake.check_handshake``: a bad one gets its 400 or 426
here) and makes an engine for ``--ws`` (``toyservers``: the project's own
``websocket.Connection``; ``wsproto``: wsproto's); ``switch_protocol`` hands the connection
to a ``WSProtocol``, with the bytes read after the request. That protocol runs the app at
once with the ``websocket`` scope; the 101 leaves when the app accepts
(``asgi_websocket.WebSocketCycle``).
From then on ``data_received`` feeds the engine and acts on its events: a message goes to
the app's queue (reading stops while ``ws_max_queue`` wait), a ping gets its pong (within
``MAX_PINGS`` a ``PING_INTERVAL``: a flood closes with 1008), a close frame is answered and
the connection closed, a protocol error closes with its code. One ``Deadline`` runs the
timers: ``"ping"`` (every ``ws_ping_interval`` seconds we ping), ``"pong"`` (no pong within
``ws_ping_timeout``: close 1011) and ``"close"`` (our close frame got no answer in
``CLOSE_TIMEOUT``: drop the connection). A graceful shutdown closes with 1001 (going away),
or 1012 (service restart) in a worker retired by a reload (``config.ws_shutdown_code``).

Deliberately left out: WebSocket over HTTP/2 (RFC 8441), compression settings beyond on and
off, a per-message timeout.

Spec: RFC 6455 §4.2 (handshake), §5.5.2-§5.5.3 (ping, pong), §7.1 (closing: "the server
SHOULD close the underlying TCP connection first"), §7.4 (codes); ASGI WebSocket spec 2.4.

Compare with: uvicorn/protocols/websockets/wsproto_impl.py (``WSProtocol``: keepalive pings,
``shutdown``, ``handle_close``), uvicorn/protocols/http/httptools_impl.py and h11_impl.py
(``handle_websocket_upgrade``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any

from toyservers import access_log, websocket
from toyservers._types import Scope
from toyservers.asgi_websocket import (
    CLOSE_TIMEOUT,
    CONNECTED,
    CONNECTING,
    MAX_PINGS,
    PING_INTERVAL,
    RESPONDING,
    Engine,
    WebSocketCycle,
    opening,
)
from toyservers.http1_cycle import HTTP1Protocol
from toyservers.protocol import HTTPProtocol
from toyservers.state import ServerState

logger = logging.getLogger("toyservers.error")


# --8<-- [start:upgrade]
def upgrade(protocol: HTTP1Protocol, scope: Scope, data: bytes, auto: str) -> bool:
    """Take the connection of ``protocol`` for WebSocket, when its request (``scope``, the
    ``http`` scope; ``data``, the bytes after it) is an opening handshake and ``--ws`` is not
    ``none``: to a ``WSProtocol``, or answering a bad handshake (400, 426) and closing. True
    when it took it (the caller parses no more); False: answer the request as HTTP.
    ``auto``: the engine ``--ws auto`` means on this server."""
    opened = opening(protocol, scope, auto)
    if opened is None:
        return False
    protocol.stop_reading()
    if isinstance(opened, bytes):  # a bad handshake: its 400 or 426, then close
        protocol.transport.write(opened)
        protocol.lingering_close()
    else:
        engine, ws_scope = opened
        protocol.switch_protocol(WSProtocol(protocol.state, ws_scope, engine), data)
    return True
# --8<-- [end:upgrade]


class WSProtocol(HTTPProtocol):
    """One WebSocket connection: engine events in, the ASGI cycle out (see the module
    docstring). ``HTTPProtocol``: the bookkeeping (``state.connections``, which
    ``--limit-concurrency`` counts), flow control, the deadline and the lingering close."""

    __slots__ = ("scope", "engine", "cycle", "access_log", "ping_payload", "budget_start",
                 "budget")

    def __init__(self, state: ServerState, scope: Scope, engine: Engine) -> None:
        super().__init__(state)
        self.scope, self.engine = scope, engine
        self.cycle = WebSocketCycle(self, scope, engine, self.config.ws_max_queue)
        self.access_log = access_log.enabled(self.config)
        self.ping_payload: bytes | None = None  # our keepalive ping's, until its pong
        self.budget_start, self.budget = self.loop.time(), 0  # pings and pongs this interval

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.deadline.clear()  # no idle deadline: the app decides (keepalive pings from accept)
        self.cycle.start_task(self.app)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.cycle.disconnect(websocket.ABNORMAL)  # a no-op after a close frame

    def write(self, data: bytes) -> None:
        """Write, unless the client is gone or the connection ends (then nothing is owed)."""
        if not self.cycle.disconnected and not self.transport.is_closing():
            self.transport.write(data)

    # --- the client's side ---

    def data_received(self, data: bytes) -> None:
        self.engine.receive_data(data)
        if self.cycle.state is CONNECTING or self.cycle.state is RESPONDING:
            self.flow.pause_reading()  # a client waits for the 101 before it sends (RFC 6455
        else:  # §4.1): keep what came, read no more
            self.read_events()

    # --8<-- [start:read_events]
    def read_events(self) -> None:
        """Act on the engine's events until it needs more bytes, or ``ws_max_queue`` messages
        wait for the app (then stop reading: ``receive()`` resumes)."""
        engine, cycle = self.engine, self.cycle
        try:
            # Room in the app's queue, or closing (then none are kept): an inline test, not a
            # property, which cost 2 % of a 1 KiB echo message's instructions.
            while len(cycle.queue) < cycle.max_queue or cycle.state is not CONNECTED:
                event = engine.next_event()
                if event is None:
                    return
                if isinstance(event, websocket.Message):
                    cycle.put(event.data)
                elif isinstance(event, websocket.Close):
                    return self.after_app(self.on_close, event)
                else:
                    self.spend_budget()
                    if isinstance(event, websocket.Ping):
                        if not engine.close_sent:  # §5.5.3: a pong with the same payload
                            self.write(engine.send_pong(event.payload))
                    elif event.payload == self.ping_payload:  # our keepalive ping's pong
                        self.ping_payload = None
                        self.deadline.set("ping", self.config.ws_ping_interval or 0.0)
            cycle.reading_paused = True
            self.flow.pause_reading()
        except websocket.ProtocolError as exc:
            self.after_app(self.fail, exc.code, exc.reason)
    # --8<-- [end:read_events]

    def after_app(self, then: Callable[..., None], *args: Any) -> None:
        """Stop reading, and call ``then`` at the loop's next turn: the app answers the
        messages read before a close frame or an error first, so its answers go out before
        our close frame (Autobahn's case 3.2: "Echo for first message is received, but then
        connection is failed immediately"; answered after the close, it is non-strict)."""
        self.flow.pause_reading()
        self.loop.call_soon(then, *args)

    def spend_budget(self) -> None:
        """Count a ping or pong: past ``MAX_PINGS`` in ``PING_INTERVAL`` seconds, a flood."""
        now = self.loop.time()
        if now - self.budget_start >= PING_INTERVAL:
            self.budget_start, self.budget = now, 0
        self.budget += 1
        if self.budget > MAX_PINGS:
            raise websocket.ProtocolError(websocket.POLICY, "ping flood")

    # --8<-- [start:close]
    def on_close(self, event: websocket.Close) -> None:
        """The client's close frame: answer it with its code (§5.5.1) unless ours went first,
        tell the app, and close the TCP connection (§7.1.1: the server closes first)."""
        if not self.engine.close_sent:
            code = None if event.code == websocket.NO_STATUS else event.code
            self.write(self.engine.send_close(code))
        self.cycle.disconnect(event.code, event.reason)
        self.transport.close()

    def fail(self, code: int, reason: str) -> None:
        """§7.1.7, "Fail the WebSocket Connection": our close frame with ``code``, then a
        lingering close (a client still sending gets the frame, not a reset)."""
        logger.debug("closing the WebSocket of %s with %d: %s", self.client, code, reason)
        if not self.engine.close_sent:
            self.write(self.engine.send_close(code, reason))
        self.cycle.disconnect(code, reason)
        self.deadline.close()
        self.lingering_close()
    # --8<-- [end:close]

    def resume_reading(self) -> None:
        """The app took a message: act on the events already read, then read the socket."""
        self.read_events()
        if not self.cycle.reading_paused and not self.transport.is_closing():
            self.flow.resume_reading()

    # --- the hooks of the ASGI side (WebSocketCycle) ---

    def on_accept(self) -> None:
        """The 101 is out: start the keepalive pings, read what waited for it."""
        if self.config.ws_ping_interval:
            self.deadline.set("ping", self.config.ws_ping_interval)
        self.resume_reading()

    def on_close_sent(self) -> None:
        """Our close frame is out: read on, for the client's (dropping its messages)."""
        self.ping_payload = None  # a pong now must not restart the keepalive
        self.deadline.set("close", CLOSE_TIMEOUT)
        self.cycle.reading_paused = False
        self.resume_reading()

    def on_response_complete(self) -> None:
        """An HTTP answer to the handshake is out (403, 500, 503, a denial): close."""
        self.lingering_close()

    # --- timers and shutdown ---

    def on_timeout(self, kind: str) -> None:
        """``ping``: send one (4 random bytes, to know its pong); ``pong``: none came in
        ``ws_ping_timeout`` seconds, close 1011 as uvicorn does; ``close``: drop the
        connection."""
        config = self.config
        if kind == "ping" and self.cycle.state is CONNECTED:
            self.ping_payload = payload = os.urandom(4)
            self.write(self.engine.send_ping(payload))
            if config.ws_ping_timeout:
                self.deadline.set("pong", config.ws_ping_timeout)
            elif config.ws_ping_interval:
                self.deadline.set("ping", config.ws_ping_interval)
        elif kind == "pong" and self.cycle.state is CONNECTED:
            self.cycle.close(websocket.INTERNAL_ERROR, "keepalive ping timeout")
            self.transport.close()
        elif kind == "close":
            self.transport.close()

    def shutdown(self) -> None:
        """Graceful shutdown: 1001 (1012 for a reload) for an open WebSocket, 503 for a
        handshake the app has not answered (``WebSocketCycle.shutdown``)."""
        self.cycle.shutdown(self.config.ws_shutdown_code)
