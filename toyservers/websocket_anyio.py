"""WebSocket on anyio for toy-anyio and toy-anyio-trio: the way out of HTTP (``upgrade``) and
the connection after it (``AnyioWSProtocol``), on asyncio or trio alike.

I/O model: structured concurrency, as the HTTP side. toy-anyio's connection task parses a
request asking ``Upgrade: websocket`` and calls ``upgrade()``: ``asgi_websocket.opening``,
shared with asyncio's toys, checks the handshake (``websocket_handshake.check_handshake``: a
bad one gets its 400 or 426, then a lingering close) and makes an engine for ``--ws``
(``auto``: wsproto here; ``toyservers``: the project's own ``websocket.Connection``); it is
fed the bytes read after the request, and the connection task goes on in
``AnyioWSProtocol.run``.
Its task groups hold everything the connection does:

- the app, in the outer group (``AnyioCycle``: the shared ``asgi_websocket.WebSocketCycle``,
  waiting on an ``anyio.Event`` and started in that group), so the connection ends only once
  its app has; the 101 leaves when the app accepts;
- the reading, in this task: once the app answered the handshake, ``stream.receive()`` feeds
  the engine and its events are acted on as ``websocket_protocol.WSProtocol`` acts on them
  (a message to the app's queue, waiting while ``ws_max_queue`` wait; a ping answered within
  ``MAX_PINGS`` a ``PING_INTERVAL``; a close frame answered; a protocol error closed with its
  code). It runs in a cancel scope, ``reading``: our close frame gives it ``CLOSE_TIMEOUT``
  seconds for the client's, and ``close()`` cancels it;
- the writing, in an inner group: the cycle writes synchronously (``write``), a task sends
  what was written in order (``Sender``), and the app's ``send()`` waits while more than
  ``HIGH_WATER_LIMIT`` bytes are unsent: the write backpressure;
- the keepalive, in the inner group: every ``ws_ping_interval`` seconds a ping, and
  ``anyio.move_on_after(ws_ping_timeout)`` around the wait for its pong (none: close 1011).

When the reading ends, what was written is sent (at most ``LINGER`` seconds), the inner group
is cancelled, and the stream closes (after a failure, lingering: RFC 9112 §9.6). A graceful
shutdown closes with 1001 (going away), or 1012 in a worker retired by a reload.

Deliberately left out: what ``websocket_protocol.py`` leaves out (WebSocket over HTTP/2,
compression settings beyond on and off, a per-message timeout).

Spec: RFC 6455 §4.2 (handshake), §5.5.2-§5.5.3 (ping, pong), §7.1 (closing: "the server
SHOULD close the underlying TCP connection first"), §7.4 (codes); ASGI WebSocket spec 2.4;
anyio's cancel scopes and task groups (https://anyio.readthedocs.io/en/stable/cancellation.html).

Compare with: hypercorn/protocol/ws_stream.py (wsproto's events to the ASGI app) with
hypercorn/trio/tcp_server.py (a task group per connection, a read loop, ``move_on_after``
for the keep-alive), and toyservers/websocket_protocol.py (the same connection on asyncio
callbacks and one ``Deadline``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup

from toyservers import websocket
from toyservers._types import ASGIApp, Scope
from toyservers.anyio_serving import GONE, StreamProtocol
from toyservers.asgi_websocket import (
    CLOSE_TIMEOUT,
    CONNECTED,
    CONNECTING,
    MAX_PINGS,
    PING_INTERVAL,
    Engine,
    WebSocketCycle,
    opening,
)
from toyservers.http1 import HIGH_WATER_LIMIT
from toyservers.protocol import LINGER

logger = logging.getLogger("toyservers.error")

MAX_RECEIVE = 256 * 1024  # bytes asked of receive() (as the HTTP side)
MAX_EVENTS = 512  # events acted on before other tasks get a turn (as the HTTP side)
MAX_TURNS = 8  # turns given to the app to answer the messages before a close or an error

Switched = Callable[[], Awaitable[None]]  # what the connection task runs instead of HTTP


def upgrade(protocol: StreamProtocol, scope: Scope, data: bytes, auto: str) -> Switched | None:
    """What the connection of ``protocol`` runs once its request (``scope``, the ``http``
    scope; ``data``, the bytes read after it) turned out to be an opening handshake: the
    WebSocket, or the refusal of a bad handshake (400, 426). None when the request asks no
    ``Upgrade: websocket`` or ``--ws`` is ``none``: answer it as HTTP. ``auto``: the engine
    ``--ws auto`` means on this server."""
    opened = opening(protocol, scope, auto)
    if opened is None:
        return None
    if isinstance(opened, bytes):  # a bad handshake: its 400 or 426
        return functools.partial(refuse, protocol, opened)
    engine, ws_scope = opened
    engine.receive_data(data)  # kept until the 101: a client waits for it (RFC 6455 §4.1)
    return AnyioWSProtocol(protocol, ws_scope, engine).run


async def refuse(protocol: StreamProtocol, answer: bytes) -> None:
    """Write the ``answer`` refusing a bad handshake, then a lingering close (the connection
    task closes the stream)."""
    with anyio.move_on_after(protocol.config.timeout_keep_alive), \
            contextlib.suppress(*GONE):
        await protocol.write(answer)
        await protocol.linger()


# --- Protocol interface ---------------------------------------------------------------------------


class Sender:
    """The connection's writes (``asgi_websocket.WSConnection.flow``): ``write`` collects bytes
    at once, ``run`` (a task) sends them in order, and ``write_paused`` says more than
    ``HIGH_WATER_LIMIT`` bytes are unsent: ``drain()`` waits until they are not (or the
    connection ended), as asyncio's transport buffer and ``FlowControl`` do there."""

    __slots__ = ("stream", "parts", "unsent", "more", "drained", "ended")

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.parts: list[bytes] = []
        self.unsent = 0  # bytes written and not yet sent, the ones being sent included
        self.more = anyio.Event()  # set when parts has bytes for the task
        self.drained = anyio.Event()  # set when unsent fell to the high-water mark or less
        self.ended = False

    @property
    def write_paused(self) -> bool:
        return self.unsent > HIGH_WATER_LIMIT and not self.ended

    def write(self, data: bytes) -> None:
        self.parts.append(data)
        self.unsent += len(data)
        self.more.set()

    async def drain(self) -> None:
        while self.write_paused:
            self.drained = anyio.Event()
            await self.drained.wait()

    async def run(self) -> None:
        """Send what was written, until cancelled or the client is gone (then ``end()``)."""
        try:
            while True:
                await self.more.wait()
                self.more = anyio.Event()
                data = b"".join(self.parts)
                self.parts.clear()
                await self.stream.send(data)
                self.unsent -= len(data)
                if self.unsent <= HIGH_WATER_LIMIT:
                    self.drained.set()
        except GONE:
            self.end()

    async def flush(self) -> None:
        """Return once everything written is sent (or the client is gone)."""
        while self.unsent and not self.ended:
            self.drained = anyio.Event()
            await self.drained.wait()

    def end(self) -> None:
        """Nothing more will be sent: wake a ``drain()`` (the app's ``send()`` then raises)."""
        self.ended = True
        self.drained.set()


class AnyioWSProtocol:
    """One WebSocket connection on an anyio byte stream, after the HTTP connection ``http``
    (its stream, addresses, settings): engine events in, the ASGI cycle out (module docstring)."""

    __slots__ = ("http", "state", "config", "app", "stream", "client", "access_log", "engine",
                 "cycle", "flow", "apps", "io", "reading", "answered", "resumed", "pong",
                 "ping_payload", "budget_start", "budget", "failed")

    def __init__(self, http: StreamProtocol, scope: Scope, engine: Engine) -> None:
        self.http, self.state, self.config, self.app = http, http.state, http.config, http.app
        self.stream, self.client, self.access_log = http.stream, http.client, http.access_log
        self.engine = engine
        self.cycle = AnyioCycle(self, scope, engine, self.config.ws_max_queue)
        self.flow = Sender(self.stream)
        self.apps: TaskGroup | None = None  # the app's task group
        self.io: TaskGroup | None = None  # the writing's and the keepalive's
        self.reading = anyio.CancelScope()  # its deadline: our close frame's CLOSE_TIMEOUT
        self.answered = anyio.Event()  # the app answered the handshake (101 or HTTP)
        self.resumed: anyio.Event | None = None  # set when the app's queue has room again
        self.pong: anyio.Event | None = None  # set when our keepalive ping's pong came
        self.ping_payload: bytes | None = None  # that ping's payload, until its pong
        self.budget_start, self.budget = anyio.current_time(), 0  # pings this interval
        self.failed = False  # closed for the client's error: linger (RFC 9112 §9.6)

    async def run(self) -> None:
        """The connection task from the handshake on: the app in the outer task group, writing
        and keepalive in the inner one, the reading here. Returns once the app has."""
        self.state.connections.discard(self.http)  # this takes its place: for shutdown()
        self.state.connections.add(self)  # and limit_concurrency
        try:
            async with anyio.create_task_group() as self.apps:
                async with anyio.create_task_group() as self.io:
                    self.io.start_soon(self.send_all)
                    self.cycle.start_task(self.app)
                    with self.reading:
                        await self.answered.wait()
                        if self.cycle.state is not CONNECTING:
                            await self.receive_events()
                    self.cycle.disconnect(websocket.ABNORMAL)  # a no-op after a close frame
                    with anyio.move_on_after(LINGER):
                        await self.flow.flush()  # the last frames (a close, an HTTP answer)
                    self.flow.end()
                    self.io.cancel_scope.cancel()
                if self.failed:
                    with contextlib.suppress(*GONE):
                        await self.http.linger()
                await self.stream.aclose()
        finally:
            self.state.connections.discard(self)

    def write(self, data: bytes) -> None:
        """Write, unless the client is gone or the connection ends (then nothing is owed)."""
        if not self.cycle.disconnected and not self.flow.ended:
            self.flow.write(data)

    async def send_all(self) -> None:  # the writing task; the client gone, the reading ends
        await self.flow.run()
        self.close()

    def close(self) -> None:
        """End the reading now: the connection sends what it wrote, and closes."""
        self.reading.cancel()

    # --- the client's side ---

    async def receive_events(self) -> None:
        """Feed the engine and act on its events until a close frame, an error or the client's
        leaving; wait while ``ws_max_queue`` messages wait (the app's ``receive()`` resumes)."""
        engine, cycle, events = self.engine, self.cycle, 0
        try:
            while True:
                if len(cycle.queue) >= cycle.max_queue and cycle.state is CONNECTED:
                    cycle.reading_paused = True
                    self.resumed = resumed = anyio.Event()
                    await resumed.wait()
                event = engine.next_event()
                if event is None:
                    try:
                        data = await self.stream.receive(MAX_RECEIVE)
                    except GONE:
                        return
                    engine.receive_data(data)
                    events = 0
                elif isinstance(event, websocket.Message):
                    cycle.put(event.data)
                elif isinstance(event, websocket.Close):
                    await self.after_app()
                    return self.on_close(event)
                else:
                    self.spend_budget()
                    if isinstance(event, websocket.Ping):
                        if not engine.close_sent:  # §5.5.3: a pong with the same payload
                            self.write(engine.send_pong(event.payload))
                    elif event.payload == self.ping_payload and self.pong is not None:
                        self.ping_payload = None  # our keepalive ping's pong
                        self.pong.set()
                events += 1
                if events >= MAX_EVENTS:  # let the other connections run
                    events = 0
                    await anyio.lowlevel.checkpoint()
        except websocket.ProtocolError as exc:
            await self.after_app()
            self.fail(exc.code, exc.reason)

    async def after_app(self) -> None:
        """A few turns for the app to answer the messages read before a close or an error,
        before our close frame (as ``WSProtocol.after_app``; one turn may not do on trio,
        which runs a batch of tasks in either order)."""
        for _ in range(MAX_TURNS):
            if not self.cycle.queue:
                return
            await anyio.lowlevel.checkpoint()

    def spend_budget(self) -> None:
        """Count a ping or pong: past ``MAX_PINGS`` in ``PING_INTERVAL`` seconds, a flood."""
        now = anyio.current_time()
        if now - self.budget_start >= PING_INTERVAL:
            self.budget_start, self.budget = now, 0
        self.budget += 1
        if self.budget > MAX_PINGS:
            raise websocket.ProtocolError(websocket.POLICY, "ping flood")

    def on_close(self, event: websocket.Close) -> None:
        """The client's close frame: answer it with its code (§5.5.1) unless ours went first,
        tell the app; the reading ends and the connection closes (§7.1.1: server first)."""
        if not self.engine.close_sent:
            code = None if event.code == websocket.NO_STATUS else event.code
            self.write(self.engine.send_close(code))
        self.cycle.disconnect(event.code, event.reason)

    def fail(self, code: int, reason: str) -> None:
        """§7.1.7, "Fail the WebSocket Connection": our close frame with ``code``, then a
        lingering close (a client still sending gets the frame, not a reset)."""
        logger.debug("closing the WebSocket of %s with %d: %s", self.client, code, reason)
        if not self.engine.close_sent:
            self.write(self.engine.send_close(code, reason))
        self.cycle.disconnect(code, reason)
        self.failed = True

    def resume_reading(self) -> None:
        """The app took a message: the reading goes on."""
        if self.resumed is not None:
            self.resumed.set()
            self.resumed = None

    # --- the hooks of the ASGI side (WebSocketCycle) ---

    def on_accept(self) -> None:
        """The 101 is out: read, and start the keepalive pings."""
        self.answered.set()
        if self.config.ws_ping_interval and self.io is not None:
            self.io.start_soon(self.keepalive)

    def on_close_sent(self) -> None:
        """Our close frame is out: read on for the client's, ``CLOSE_TIMEOUT`` seconds at
        most, dropping its messages."""
        self.ping_payload = None  # a pong now must not count for the keepalive
        self.reading.deadline = min(self.reading.deadline,
                                    anyio.current_time() + CLOSE_TIMEOUT)
        self.cycle.reading_paused = False
        self.resume_reading()

    def on_response_complete(self) -> None:
        """An HTTP answer to the handshake is out (403, 500, 503, a denial): close, lingering."""
        self.failed = True
        self.answered.set()
        self.close()

    # --- timers and shutdown ---

    async def keepalive(self) -> None:
        """Every ``ws_ping_interval`` seconds a ping (4 random bytes, to know its pong); none
        within ``ws_ping_timeout`` seconds: close 1011, as uvicorn does. The next interval
        starts at the pong."""
        config = self.config
        assert config.ws_ping_interval
        while True:
            await anyio.sleep(config.ws_ping_interval)
            if self.cycle.state is not CONNECTED:
                return
            self.ping_payload = payload = os.urandom(4)
            self.pong = anyio.Event()
            self.write(self.engine.send_ping(payload))
            if config.ws_ping_timeout:
                with anyio.move_on_after(config.ws_ping_timeout):
                    await self.pong.wait()
                if not self.pong.is_set() and self.cycle.state is CONNECTED:
                    self.cycle.close(websocket.INTERNAL_ERROR, "keepalive ping timeout")
                    self.close()
                    return

    def shutdown(self) -> None:
        """Graceful shutdown: 1001 (1012 for a reload) for an open WebSocket, 503 for a
        handshake the app has not answered (``WebSocketCycle.shutdown``)."""
        self.cycle.shutdown(self.config.ws_shutdown_code)


# --- ASGI interface -------------------------------------------------------------------------------


class AnyioCycle(WebSocketCycle):
    """The shared WebSocket cycle on anyio: ``receive()`` waits on an ``anyio.Event``, and the
    app runs in the connection's task group (kept in ``state.tasks`` while it runs, for
    ``limit_concurrency``)."""

    __slots__ = ("event",)
    protocol: AnyioWSProtocol

    def __init__(self, protocol: AnyioWSProtocol, scope: Scope, engine: Engine,
                 max_queue: int) -> None:
        super().__init__(protocol, scope, engine, max_queue)
        self.event: anyio.Event | None = None  # receive() waits on it

    def wait(self) -> Awaitable[None]:
        self.event = event = anyio.Event()
        return event.wait()

    def wake(self) -> None:
        event, self.event = self.event, None
        if event is not None:
            event.set()

    def start_task(self, app: ASGIApp) -> None:
        assert self.protocol.apps is not None
        self.task = self
        self.protocol.state.tasks.add(self)
        self.protocol.apps.start_soon(self.run_asgi, app, name="asgi-websocket")
