"""toy-anyio: toy-h11's sans-IO core driven from anyio byte streams, on asyncio or on trio.

I/O model: structured concurrency. In a task group for the connections, the listener's task
accepts (``anyio.create_tcp_listener``; TLS through ``anyio.streams.tls``) and starts one task
per connection: straight-line code that pulls events out of an ``h11.Connection`` and awaits
``stream.receive()`` when h11 says ``NEED_DATA``. Each request's app runs in a task of the
same task group, so the graceful shutdown waits for the apps too; one task runs the apps of a
connection's requests in turn (``app_task``). Where toy-h11 arms ``call_later`` timers,
this server gives one cancel scope around the reading the deadline running (idle, head, body),
moved as toy-h11's timer is, only when it must come sooner; where toy-h11 calls
``pause_reading``, the reading task stops awaiting ``receive()`` until an ``anyio.Event`` says
the app took the body or answered; and the app's ``send()`` awaits ``stream.send()``, which
returns once the bytes are written: the write backpressure. Graceful shutdown cancels the
listener's scope, asks each connection to finish, and gives the connections' task group
``timeout_graceful_shutdown`` seconds before its scope cancels what is left. The same code runs
on trio (``toy-anyio-trio``, ``toyservers/anyio_trio.py``). What h11 lets through is checked by
``toyservers.h11_checks``, shared with toy-h11. A request asking ``Upgrade: websocket`` ends
the reading of HTTP (``websocket_anyio.upgrade``, on wsproto for ``--ws auto``), and the
connection's task runs the WebSocket instead: ``websocket_anyio.AnyioWSProtocol``.

Deliberately left out: what toy-h11 leaves out (upgrades other than WebSocket, CONNECT,
HTTP/1.0 keep-alive, request trailers beyond checking them, ``http.response.debug``);
``sendfile(2)``: anyio's streams have none, so a file body (pathsend, zerocopysend) is read in
64 KiB pieces; ``--workers`` on trio (the supervisor's workers run asyncio). Early hints and
response trailers are toy-h11's, through the shared cycle.

Spec: RFC 9112 §2-§3, §5-§7, §9 (persistence, pipelining); RFC 9110 §10.1.1 (Expect), §15.
ASGI 3.0 HTTP scope and messages (https://asgi.readthedocs.io/en/latest/specs/www.html), the
TLS, HTTP Trailers, Early Hints (RFC 8297), Path Send and Zero Copy Send extensions; lifespan
via ``toyservers.lifespan``. anyio's cancel scopes and task groups
(https://anyio.readthedocs.io/en/stable/cancellation.html).

Compare with: h11's examples/trio-server.py (a task per connection, straight-line reads),
hypercorn/protocol/h11.py with hypercorn/trio/tcp_server.py, and toyservers/h11_server.py;
for WebSocket, hypercorn/protocol/ws_stream.py (wsproto under the same asyncio/trio split).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import socket
import threading
from typing import Any

import anyio
import h11
import sniffio
from anyio.abc import ByteStream, TaskGroup

from toyservers import (
    _server,
    anyio_serving,
    file_response,
    h11_checks,
    listeners,
    tls,
    websocket_anyio,
)
from toyservers._types import ASGIApp, Message, Scope
from toyservers.anyio_serving import GONE, StreamProtocol
from toyservers.asgi import ClientDisconnected, scope_template
from toyservers.config import Config
from toyservers.h11_checks import H11Framer, H11Steps
from toyservers.http1_cycle import RequestResponseCycle as HTTP1Cycle
from toyservers.lifespan import Lifespan, LifespanFailure
from toyservers.state import ServerState

logger = logging.getLogger("toyservers.error")

# --- Constants ------------------------------------------------------------------------------------

MAX_RECEIVE = 256 * 1024  # bytes asked of receive(): uvloop's read size (anyio copies to split)
MAX_EVENTS = 512  # events pulled out of h11 before other tasks get a turn (as toy-h11)


# --- Protocol interface ---------------------------------------------------------------------------


class AnyioProtocol(H11Steps, StreamProtocol):
    """One HTTP/1.1 connection: its task reads requests into h11 and starts their cycles
    (``StreamProtocol``: the connection's task, deadlines, writes and close path)."""

    __slots__ = ("conn", "body_size", "app_waits", "next_request", "handed", "ended")

    def __init__(self, state: ServerState, stream: ByteStream, task_group: TaskGroup) -> None:
        super().__init__(state, stream, task_group)
        config = self.config  # h11 answers 431 to a head still incomplete past this size
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=config.max_request_line
                                   + config.max_header_size)
        self.body_size = 0  # request body bytes received, for max_body_size
        self.app_waits = False  # an app task waits on next_request to be handed a request
        self.next_request = anyio.Semaphore(0)  # released once per request handed over
        self.handed: RequestResponseCycle | None = None  # the request handed to that task
        self.ended = False  # reading is over: no app task waits for another request

    # Reading requests

    # --8<-- [start:read_requests]
    async def read_requests(self) -> None:
        """Pull events out of h11 and act on each; return when the connection must end."""
        conn, config, events = self.conn, self.config, 0
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                self.error = h11_checks.protocol_error_status(exc, conn, config, self.cycle is None)
                return
            kind = type(event)
            if kind is h11.Request:
                if not self.on_request(event):  # type: ignore[arg-type]
                    return
            elif kind is h11.Data:
                self.clear_deadline()  # body bytes came: a new silence starts at NEED_DATA
                status = h11_checks.take_body(self, self.cycle, event.data)  # type: ignore[union-attr]
                if status == 413:
                    self.error = 413
                    return
                if status:  # enough for the app: read on once its receive() took it
                    await self.pause_reading()
            elif kind is h11.EndOfMessage:
                trailers = event.headers  # type: ignore[union-attr]
                if trailers and (status := h11_checks.fields_status(trailers.raw_items(), config)):
                    self.error = status  # RFC 9112 §7.1.2: a trailer section, as a head
                    return
                self.clear_deadline()
                cycle = self.cycle
                if cycle is not None and not cycle.response_complete:
                    cycle.more_body = False
                    cycle.wake()
                    if conn.their_state is h11.MUST_CLOSE:
                        # The last request (RFC 9112 §9.6): whatever follows is never parsed;
                        # read on only to see the client leave.
                        with contextlib.suppress(*GONE):
                            while await self.stream.receive(MAX_RECEIVE):
                                pass
                        return
                    # The app has the whole request. What next_event would say now is known
                    # without asking it (as toy-h11): PAUSED when h11 holds bytes of the next
                    # request, else NEED_DATA.
                    if conn.trailing_data[0]:
                        await self.pause_reading()
                    elif not await self.receive():
                        return
                    events = 0
                elif conn.our_state is h11.DONE:  # we answered before the body ended
                    self.start_next_cycle()
            elif event is h11.NEED_DATA:
                cycle = self.cycle
                if cycle is not None and cycle.more_body and self.kind != "body":  # SEND_BODY
                    self.set_deadline("body", config.timeout_body)  # silence since the last bytes
                elif cycle is None and self.kind == "idle" and conn.trailing_data[0]:
                    self.set_deadline("head", config.timeout_headers)  # a head began
                if not await self.receive():
                    return
                events = 0
            elif event is h11.PAUSED:
                # RFC 9112 §9.3.2: answer pipelined requests in order. h11 holds the next
                # request until start_next_cycle; read nothing more until then.
                await self.pause_reading()
            else:  # ConnectionClosed
                return
            events += 1
            if events >= MAX_EVENTS:  # let the other connections run
                events = 0
                await anyio.lowlevel.checkpoint()
    # --8<-- [end:read_requests]

    async def receive(self) -> bool:
        """Feed h11 the next bytes from the stream; False once the client is gone."""
        try:
            data = await self.stream.receive(MAX_RECEIVE)
        except GONE:
            return False
        if self.kind == "idle":  # between requests: h11 is IDLE
            # RFC 9112 §2.2: "a server that is expecting to receive and parse a request-line
            # SHOULD ignore at least one empty line (CRLF) received prior to the request-line"
            while data[:2] == b"\r\n":
                data = data[2:]
        if data:
            self.conn.receive_data(data)
        return True

    def on_request(self, event: h11.Request) -> bool:
        """Start the request's cycle in the task group; False when refused or a WebSocket."""
        self.clear_deadline()
        self.body_size = 0
        checked = h11_checks.request_scope(self, event)
        if isinstance(checked, int):
            self.error = checked
            return False
        scope, upgrade = checked
        if upgrade and (switched := websocket_anyio.upgrade(
                self, scope, self.conn.trailing_data[0], "wsproto")) is not None:
            self.switched = switched  # a WebSocket: run() runs it once reading ends
            return False
        expect_100 = self.conn.client_is_waiting_for_100_continue  # as toy-h11's on_request
        framer = H11Framer(self.conn, scope["method"] == "HEAD")
        self.cycle = cycle = RequestResponseCycle(self, scope, framer, expect_100)
        self.run_app(cycle)
        return True

    # Running the apps

    # --8<-- [start:run_app]
    def run_app(self, cycle: RequestResponseCycle) -> None:
        """Run ``cycle``'s app: in the app task that waits for this connection's next request,
        or in a new task of ``task_group`` (the connections') when none waits."""
        if self.app_waits:
            self.app_waits, self.handed = False, cycle
            self.next_request.release()
        else:
            self.task_group.start_soon(self.app_task, cycle, name="asgi")

    async def app_task(self, cycle: RequestResponseCycle | None) -> None:
        """Run the apps of this connection's requests, one after another.

        HTTP/1.1 answers a connection's requests in turn, so one task can run their apps,
        waiting between them on the ``next_request`` semaphore. An anyio task costs ~100k
        instructions to start and end (a task handle with a cancel scope and an Event of its
        own): on toy-anyio, a task per request cost 73k instructions a request more than this
        (736k -> 663k, callgrind), and waiting on a new ``anyio.Event`` each time 20k more
        than on the semaphore (630k -> 610k). The task returns, and the next request gets a
        new one, when its app set a context variable (a request must not see another's:
        ``copy_context()`` compares equal until then), when another app task already waits
        (this app went on after its response), or when reading is over (``stop_reading``
        wakes a waiting one with no request)."""
        context, tasks = contextvars.copy_context(), self.state.tasks
        while cycle is not None:
            tasks.add(cycle)  # a running app, for limit_concurrency
            try:
                await cycle.run_asgi(self.app)
            finally:
                tasks.discard(cycle)
            if self.ended or self.app_waits or contextvars.copy_context() != context:
                return
            self.app_waits = True
            await self.next_request.acquire()
            cycle, self.handed = self.handed, None

    def stop_reading(self) -> None:
        self.ended = True
        if self.app_waits:  # wake it with no request: it returns
            self.app_waits = False
            self.next_request.release()
    # --8<-- [end:run_app]

    # Between requests

    def start_next_cycle(self) -> None:
        """Both sides are DONE: reset h11, start the keep-alive deadline, read on."""
        self.conn.start_next_cycle()
        self.cycle = None
        self.set_deadline("idle", self.config.timeout_keep_alive)
        self.resume_reading()

    # --- ASGI interface ---------------------------------------------------------------------------
    # The shared cycle's hooks (toyservers.http1_cycle), as toy-h11's; its send() writes into
    # the outbox, and the cycle below awaits the write.

    def on_response_complete(self) -> None:
        """Nothing yet: the response's last bytes are still in the outbox. The cycle's ``send``
        calls ``after_response`` once they are written (closing first would lose them)."""

    # Close, start the next cycle, or read and drop the rest of an unread body (h11_checks).
    after_response = H11Steps.next_step

    def end_connection(self) -> None:
        self.close()

    def drain_body(self) -> None:
        self.resume_reading()

    def unread_body(self) -> int | None:
        assert self.cycle is not None
        return h11_checks.unread_body(self.cycle.scope, self.body_size)


class RequestResponseCycle(HTTP1Cycle):
    """One request, run by its connection's app task: the shared HTTP/1 cycle, its ``send``
    and ``receive``, with the writes awaited and ``receive`` waiting on an anyio Event."""

    __slots__ = ("waker", "pending")
    protocol: AnyioProtocol  # type: ignore[assignment]

    def __init__(self, protocol: AnyioProtocol, scope: Scope, framer: H11Framer,
                 expect_100: bool) -> None:
        # the base's __init__ named, not super(), as http1_cycle's (0.7k instructions less)
        HTTP1Cycle.__init__(self, protocol, scope, framer, expect_100)  # type: ignore[arg-type]
        self.waker: anyio.Event | None = None  # receive() waits on it
        self.pending = b""  # a 100 Continue to write before receive() waits

    def wake(self) -> None:
        if self.waker is not None:
            self.waker.set()

    async def wait_for_body(self) -> None:
        # The waker exists before the 100 Continue is written: the write yields, and a body
        # that arrives meanwhile must find a waker to set (else receive() waits forever).
        self.waker = waker = anyio.Event()
        if self.pending:  # from write_continue, just before this wait
            data, self.pending = self.pending, b""
            with contextlib.suppress(ClientDisconnected):  # receive() then says so
                await self.write(data)
        self.resume_reading()
        await waker.wait()
        self.waker = None

    def write_continue(self) -> None:
        # receive() calls this only when it is about to wait for body: written there.
        self.pending = self.framer.continue_bytes()

    # --8<-- [start:send]
    async def send(self, message: Message) -> None:
        """The shared ``send``, into the protocol's outbox; then its bytes are written, awaited
        (the backpressure), and only then what follows the response. Raises what the shared
        ``send`` raises, and ClientDisconnected when the write finds the client gone. A file
        body (pathsend, zerocopysend) goes by the read loop: anyio's streams have no
        sendfile, and each piece then passes here as a body message."""
        if message["type"] in file_response.KINDS and self.response_started and not (
                self.response_complete):
            return await file_response.send_file(self.send, message, self.framer.no_body,
                                                 self.framer)
        await super().send(message)
        protocol = self.protocol
        if protocol.outbox:
            await self.write(protocol.outbox.take())
        if self.response_complete:
            protocol.after_response()
    # --8<-- [end:send]

    async def write(self, data: bytes) -> None:
        protocol = self.protocol
        try:
            if self.framer.head_sent and not protocol.writing.locked():
                await protocol.stream.send(data)  # no turn to take: see StreamProtocol.write
            else:  # a 100 Continue or 103 Early Hints
                await protocol.write(data)
        except GONE as exc:
            self.disconnect()
            raise ClientDisconnected("the client has disconnected") from exc


# --- Serving --------------------------------------------------------------------------------------


async def serve(app: ASGIApp, config: Config, *, sock: socket.socket | None = None,
                ready: Any = None, shutdown: asyncio.Event | anyio.Event | None = None,
                stop_accepting: asyncio.Event | anyio.Event | None = None) -> None:
    """Serve ``app`` until ``shutdown`` is set (or SIGINT/SIGTERM), on the running anyio
    backend (asyncio or trio).

    Args:
        sock: a bound socket to serve on (tests bind port 0); else the one ``config`` names
            (``toyservers.listeners``: a UNIX socket is removed again on exit).
        ready: called with the bound ``(host, port)`` once connections are accepted.
        shutdown: an event to set to stop (an ``asyncio.Event`` on asyncio, or an
            ``anyio.Event`` on either); when None, SIGINT and SIGTERM stop (main thread only).
        stop_accepting: an event like ``shutdown``: once set, the listener closes and the open
            connections are served on until ``shutdown`` (a retiring worker).

    Raises:
        LifespanFailure: the app's lifespan startup failed; nothing was served.
        ssl.SSLError: the TLS certificate and key cannot be used (before lifespan startup).
        OSError: the address could not be bound.
    """
    context = tls.ssl_context(config)  # before startup: a bad certificate starts nothing
    lifespan = Lifespan(app, config.lifespan)
    async with anyio.create_task_group() as services:  # lifespan, the Date tick, signals
        try:
            await lifespan.startup(services)
            rcvbuf = anyio_serving.RCVBUF if sniffio.current_async_library() == "asyncio" else None
            listener, bound, where = await anyio_serving.listen(config, sock, context, rcvbuf)
        except (LifespanFailure, OSError) as exc:  # raised below, not in an ExceptionGroup
            failure: BaseException | None = exc
        else:
            failure = None
            state = ServerState(app, config, lifespan.state)
            tls.load_tls(state, config, context)
            logger.info("toy-anyio (%s) running on %s (Press CTRL+C to quit)",
                        sniffio.current_async_library(), where)
            await _serve(state, listener, ready, bound, services, shutdown, stop_accepting)
            listeners.release(config.uds if sock is None else None)
        if not isinstance(failure, LifespanFailure):
            await lifespan.shutdown()
        services.cancel_scope.cancel()
    if failure is not None:
        raise failure


async def _serve(state: ServerState, listener: Any, ready: Any, bound: tuple[str, int],
                 services: TaskGroup, shutdown: Any, stop_accepting: Any) -> None:
    stop = shutdown if shutdown is not None else anyio.Event()
    services.start_soon(anyio_serving.tick, state)
    if stop_accepting is not None:
        services.start_soon(anyio_serving.close_when_set, stop_accepting, listener)

    async def handle(stream: ByteStream) -> None:
        header = None
        if state.config.proxy_protocol:  # --proxy-protocol: a PROXY header first
            read = await anyio_serving.proxy_header(stream, state.trusted,
                                                    state.config.timeout_headers)
            if read is None:
                await stream.aclose()
                return
            stream, header = read
        protocol = AnyioProtocol(state, stream, connections)
        if header is not None and header.source is not None:  # as if it had connected
            protocol.client, protocol.server = header.source, header.destination
            protocol.scope_template = scope_template(protocol)
        await protocol.run()

    # --8<-- [start:serve]
    async with anyio.create_task_group() as connections:
        draining = connections.cancel_scope  # its deadline: the graceful timeout
        if shutdown is None and threading.current_thread() is threading.main_thread():
            services.start_soon(anyio_serving.watch_signals, stop, draining.cancel)

        async def accept() -> None:
            try:
                await listener.serve(handle, connections)
            except* anyio.ClosedResourceError:  # (from each address's listener)
                pass  # the listener was closed: accepting is over

        connections.start_soon(accept)
        if ready is not None:
            ready(bound)
        await stop.wait()
        logger.info("shutting down")
        await listener.aclose()  # stop accepting (not a cancel: see close_when_set)
        for connection in list(state.connections):
            connection.shutdown()  # idle ones close now, busy ones after their response
        timeout = state.config.timeout_graceful_shutdown
        if timeout is not None:
            draining.deadline = anyio.current_time() + timeout
        # leaving the task group waits for every connection, and so for every app
    if draining.cancelled_caught:
        logger.warning("graceful shutdown timed out or was cut short; cancelled the rest")
    # --8<-- [end:serve]


def run(app: ASGIApp, config: Config, backend: str = "asyncio") -> None:
    """Block serving ``app`` (``toyserve --server toy-anyio``): on asyncio with the
    configured event loop (uvloop where chosen), or on ``backend="trio"``."""
    _server.run_server(serve, app, config, backend=backend)
