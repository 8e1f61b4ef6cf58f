"""What toy-anyio's serving needs around its connections, on asyncio and trio alike.

``listen`` (a listener on the configured address or a given socket, TLS through anyio),
``tick`` (the ``Date`` header, once a second), ``watch_signals`` (SIGINT and SIGTERM) and
``close_when_set`` (a retiring worker stops accepting): the anyio forms of what
``toyservers._server.serve_protocol`` does for the asyncio servers; and ``StreamProtocol``,
the base of a connection on an anyio byte stream, as ``toyservers.protocol.HTTPProtocol`` is
on asyncio. And the one place where
toy-anyio reaches under anyio's public interface, ``read_on_demand``: why, and the test that
fails the day anyio changes, are in its docstring.

Spec: anyio's listeners and signal receivers
(https://anyio.readthedocs.io/en/stable/networking.html, .../signals.html).

Compare with: uvicorn/server.py (``startup``, ``on_tick``, ``capture_signals``),
hypercorn/trio/run.py.
"""

from __future__ import annotations

import contextlib
import math
import signal
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
from anyio.abc import ByteStream, SocketAttribute, TaskGroup
from anyio.streams.tls import TLSAttribute, TLSListener

from toyservers import access_log, proxy_protocol, tls
from toyservers.asgi import scope_template
from toyservers.config import Config
from toyservers.http1_cycle import GracefulShutdown, error_answer
from toyservers.http1_cycle import RequestResponseCycle as HTTP1Cycle
from toyservers.listeners import address, bound_address, describe, listening_socket
from toyservers.protocol import LINGER
from toyservers.proxy import Trusted
from toyservers.proxy_protocol import ProxyHeader
from toyservers.state import ServerState

GONE = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError)


async def listen(config: Config, sock: socket.socket | None,
                 context: ssl.SSLContext | None, rcvbuf: int | None = None
                 ) -> tuple[Any, tuple[str, int], str]:
    """An anyio listener on ``sock`` (bound; listened on here) or on the socket ``config``
    names (``listeners.listening_socket``), wrapped in TLS when ``context`` is given (its
    handshake bounded by ``timeout_headers``); the bound ``(host, port)`` (a UNIX socket:
    ``(path, 0)``); and where it listens, for the start-up line. ``rcvbuf``: the kernel
    receive buffer of every accepted socket, bytes (``SO_RCVBUF``; None: the kernel's
    autotuning). Raises OSError when the address cannot be bound."""
    if sock is None:
        sock = listening_socket(config)
    sock.listen(config.backlog)
    if rcvbuf is not None:  # accepted sockets inherit it from the listening one
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    listener: Any = await anyio.abc.SocketListener.from_socket(sock)
    bound, where = bound_address(sock), describe(sock, "https" if context else "http")
    if context is not None:  # standard_compatible=False: closing never waits on the client
        listener = TLSListener(listener, context, standard_compatible=False,
                               handshake_timeout=config.timeout_headers)
    return listener, bound, where


async def tick(state: ServerState) -> None:
    """Refresh the ``Date`` header once a second, until cancelled."""
    while True:
        await anyio.sleep(1.0)
        state.refresh_default_headers()


async def watch_signals(stop: Any, force_exit: Callable[[], object]) -> None:
    """On SIGINT/SIGTERM set ``stop``; on a second one call ``force_exit`` (as uvicorn: a
    second Ctrl+C does not wait any more). Main thread only."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            if stop.is_set():
                force_exit()
            stop.set()


async def close_when_set(event: Any, listener: Any) -> None:
    """Close ``listener`` once ``event`` (an ``asyncio.Event`` or an ``anyio.Event``) is set:
    its ``serve()`` then ends with ClosedResourceError. Closing, not cancelling, is how to stop
    accepting: a cancel that lands in ``accept()`` after the kernel handed it a connection
    (anyio's asyncio ``accept`` awaits ``connect_accepted_socket`` then) drops that connection,
    reset under its client: with ``--max-requests`` recycling workers under wrk, 33 read errors
    in 46 retirements; ``aclose()`` only stops the wait for the next one."""
    await event.wait()
    await listener.aclose()


# --- the connection -------------------------------------------------------------------------------


class Outbox(list[bytes]):
    """What the shared cycle's ``send()`` (``toyservers.http1_cycle``) writes to on anyio,
    standing in for asyncio's transport and ``FlowControl``: a list of the pieces collected,
    ``write(data)`` and ``writelines(pieces)`` its ``append`` and ``extend`` (no call into
    Python for them), and ``write_paused`` is never set (the cycle awaits ``stream.send`` for
    what it collected: that await is the backpressure). ``take()`` gives the bytes collected,
    once."""

    __slots__ = ()
    write_paused = False
    write = list.append
    writelines = list.extend

    def take(self) -> bytes:
        data = b"".join(self)
        self.clear()
        return data


class StreamProtocol(GracefulShutdown):
    """The base of an HTTP/1.1 connection on an anyio byte stream: anyio's ``HTTPProtocol``.

    What a connection is besides parsing: the addresses, scheme and ``tls`` extension, the
    entry in ``state.connections``, the connection's task (``run``: read requests in a cancel
    scope that expires at the ``"idle"``, ``"head"`` or ``"body"`` deadline, then answer
    the error that ended it), the one close path (the error answer of
    ``http1_cycle.error_answer``, then a lingering close: RFC 9112 §9.6), writes that take
    turns, and a reading pause; ``shutdown()`` is asyncio's (``http1_cycle.GracefulShutdown``).
    A subclass implements ``read_requests``.
    """

    __slots__ = ("state", "config", "app", "stream", "cycle", "access_log", "client", "server",
                 "scheme", "tls", "reading", "kind", "when", "armed", "closed", "error",
                 "resumed", "task_group", "writing", "outbox", "transport", "flow",
                 "scope_template", "switched", "closing")

    def __init__(self, state: ServerState, stream: ByteStream, task_group: TaskGroup) -> None:
        self.state, self.config, self.app = state, state.config, state.app
        self.stream = stream
        self.cycle: HTTP1Cycle | None = None  # the request whose response goes out
        self.access_log = access_log.enabled(state.config)
        # the shared cycle's send() writes here (asyncio's transport and FlowControl there)
        self.outbox = self.transport = self.flow = Outbox()
        self.client = address(stream.extra(SocketAttribute.remote_address, None))
        self.server = address(stream.extra(SocketAttribute.local_address, None))
        ssl_object = stream.extra(TLSAttribute.ssl_object, None)
        self.scheme = "http" if ssl_object is None else "https"
        self.tls = tls.tls_extension(ssl_object, state)
        self.scope_template = scope_template(self)
        self.reading = anyio.CancelScope()  # around the reading loop (see set_deadline)
        self.kind: str | None = None  # the deadline running: "idle", "head", "body"
        self.when = math.inf  # when it expires, time.monotonic() seconds
        self.armed = math.inf  # when the reading scope expires, the same clock
        self.closed = False  # close() cancelled the reading
        self.error = 0  # the status to answer once reading stops (0: none, just close)
        self.resumed: anyio.Event | None = None  # set to let a paused reading go on
        # Where the connection's apps run: the server's group of connections, whose graceful
        # deadline reaches them there (a group of the connection's own, between them, cost
        # toy-anyio 3.7k instructions a request: two scopes more for each cancel scope and
        # checkpoint of the app's task to walk past, callgrind, POST /user: 582.6k -> 578.8k)
        self.task_group = task_group
        self.writing = anyio.Lock()  # one write at a time: a 100 Continue or 103, an error
        # What the connection runs instead of HTTP once a request switched it (a WebSocket)
        self.switched: Callable[[], Awaitable[None]] | None = None
        self.closing = False  # shutting down: the next response is the last (close_idle)

    # Deadlines: the reading's cancel scope, whose deadline is the running one's or earlier

    def set_deadline(self, kind: str, seconds: float) -> None:
        """Start deadline ``kind``, ``seconds`` from now. As ``protocol.Deadline`` on asyncio,
        the scope's deadline moves only when it must come sooner: moving it arms a timer
        (``anyio.current_time()`` and a ``call_at``), and a keep-alive connection moved it
        twice a request (toy-anyio: 663.4k instructions a request, 645.9k without). A scope
        that expires at a deadline that has since moved on or been cleared ends the reading
        early, and ``read`` goes on in a new scope: once per keep-alive timeout at most. So
        ``read_requests``, run again then, must not start a deadline that is running: the
        body's silence would start over at each such expiry and never end (toy-anyio's
        ``h11.Data`` clears it; bytes came)."""
        self.kind, self.when = kind, time.monotonic() + seconds
        if self.when < self.armed:
            self.arm()

    def clear_deadline(self) -> None:
        self.kind = None

    def arm(self) -> None:
        self.armed = self.when if self.kind is not None else math.inf
        self.reading.deadline = anyio.current_time() + (self.armed - time.monotonic())

    # --8<-- [start:run]
    async def run(self) -> None:
        """The connection's task: read requests until the connection ends, answer the error
        that ended it (if any), close. An app still running then, told of the disconnect,
        ends in its own time, in ``task_group``. A request that switched protocols
        (``switched``: a WebSocket) runs that protocol here instead."""
        self.state.connections.add(self)
        read_on_demand(self.stream)
        try:
            self.set_deadline("idle", self.config.timeout_keep_alive)
            kind = await self.read()
            self.stop_reading()
            if self.switched is not None:  # handle_upgrade: another protocol now
                await self.switched()
            else:
                # RFC 9112 §9.5: an idle connection closes silently; a head or body that
                # came too slowly gets 408 (RFC 9110 §15.5.9), then the connection closes.
                await self.finish(self.error or (408 if kind in ("head", "body") else 0))
        finally:
            self.state.connections.discard(self)
            with anyio.CancelScope(shield=True):
                await self.stream.aclose()

    async def read(self) -> str | None:
        """Read requests (``read_requests``) in the reading scope until the connection must
        end; return the kind of the deadline that ended it, or None (the client left, an
        error, ``close()``)."""
        while True:
            with self.reading:
                await self.read_requests()
            if not self.reading.cancelled_caught or self.closed:
                return None
            if self.kind is not None and time.monotonic() >= self.when:
                return self.kind  # the running deadline passed
            # The scope expired at a deadline that has since moved on or been cleared (see
            # set_deadline): h11 and this object hold where the reading was, so it goes on.
            self.reading = anyio.CancelScope()
            self.arm()
    # --8<-- [end:run]

    async def finish(self, status: int) -> None:
        """Stop the request in flight, answer ``status`` while no response byte is out, and
        close now (the app, told of the disconnect, may take its time to end)."""
        cycle = self.cycle
        if cycle is not None:
            cycle.disconnect()
        if status and (data := error_answer(self, cycle, status)):
            with anyio.move_on_after(self.config.timeout_keep_alive):
                try:
                    await self.write(data)
                    await self.linger()
                except GONE:
                    pass  # the client is gone: just close
        await self.stream.aclose()

    async def linger(self) -> None:
        """RFC 9112 §9.6, "the TCP reset problem": after an error answer, send FIN and read
        and drop what the client still sends (at most ``LINGER`` seconds), so the
        close does not reset the answer away. Over TLS (no half-close) it returns at once."""
        with anyio.move_on_after(LINGER), contextlib.suppress(NotImplementedError):
            await self.stream.send_eof()
            with contextlib.suppress(anyio.EndOfStream):
                while await self.stream.receive():
                    pass

    def send_error(self, status: int) -> None:
        """Answer ``status`` and close (from any task: ``run_asgi`` calls it with 500)."""
        self.close(status)

    def close(self, status: int = 0) -> None:
        """Stop reading: ``run`` then answers ``status`` (0: none) and closes."""
        self.error = self.error or status
        self.kind, self.closed = None, True
        self.reading.cancel()

    def stop_reading(self) -> None:
        """Reading is over (a subclass whose app task waits for a next request ends it)."""

    async def read_requests(self) -> None:
        """Read and start requests until the connection must end (``run`` answers
        ``self.error`` then)."""
        raise NotImplementedError

    async def write(self, data: bytes) -> None:
        """Send ``data``; writes from several tasks (a 100 Continue, 103 Early Hints or the
        response from the app's tasks, an error answer from the connection's) take turns:
        anyio lets one task at a time send on a stream.

        The response's bytes skip this lock, unless a write holds it (the cycle's ``write``),
        as no other write can start once the head is framed: h11 makes no 100 Continue after
        our Response, an early hint after ``http.response.start`` is refused, and an error
        answer is written only while no byte of the response is out (``error_answer``), the
        cycle disconnected first, so that ``send`` raises before it writes. The lock cost
        toy-anyio 7.7k instructions a request there (callgrind, POST /user: 591.5k -> 583.9k).

        The lock is nearly always free, and then taken without awaiting: ``async with`` checks
        for cancellation and yields, as ``stream.send`` does anyway. Measured on toy-anyio,
        instructions a request: ``Lock(fast_acquire=True)``, which does not yield, took 32k
        off (768k -> 736k), and this 21k more (652k -> 631k)."""
        writing = self.writing
        try:
            writing.acquire_nowait()
        except anyio.WouldBlock:
            await writing.acquire()
        try:
            await self.stream.send(data)
        finally:
            writing.release()

    async def pause_reading(self) -> None:
        """Read nothing until ``resume_reading()`` (the app took the body, or answered)."""
        self.resumed = resumed = anyio.Event()
        await resumed.wait()
        self.resumed = None

    def resume_reading(self) -> None:
        if self.resumed is not None:
            self.resumed.set()


# --- a workaround under anyio's interface ---------------------------------------------------------

# The kernel receive buffer of a connection on asyncio, bytes: what libuv may read into anyio's
# queue before read_on_demand runs (up to 8 MB with the kernel's autotuning: 1 run in 12).
RCVBUF = 256 * 1024


def read_on_demand(stream: ByteStream) -> bool:
    """Make the asyncio transport under ``stream`` read only for a waiting ``receive()``;
    True when it did (on asyncio), False where there is nothing to do (trio reads only when
    asked).

    Why: anyio's asyncio stream reads while a ``receive()`` waits and pauses once it wakes;
    but uvloop (libuv) reads up to 32 times 256 KiB per wake-up: 8 MB of a 10 MB upload sat in
    anyio's queue (the conformance suite's RSS bound failed). Paused now and after every read,
    it reads once per wait. Before this runs (from accept to the connection's task), libuv
    reads already: ``RCVBUF`` bounds that.

    anyio offers no public way to bound its read-ahead, so this reads two private attributes
    of its asyncio ``SocketStream``, ``_transport`` and ``_protocol``, and wraps the
    protocol's ``data_received``. ``tests/test_anyio_server.py::test_read_on_demand_reaches
    _anyio_transport`` fails if an anyio release renames them (this function would then
    quietly do nothing and the read-ahead come back).
    """
    inner = getattr(stream, "transport_stream", stream)  # a TLSStream wraps the socket's
    transport, protocol = getattr(inner, "_transport", None), getattr(inner, "_protocol", None)
    if transport is None or protocol is None or not hasattr(transport, "pause_reading"):
        return False
    data_received = protocol.data_received

    def one_read(data: bytes) -> None:
        data_received(data)
        transport.pause_reading()

    protocol.data_received = one_read
    transport.set_protocol(protocol)  # uvloop keeps the bound method: make it look again
    transport.pause_reading()
    return True


class Prefixed(ByteStream):
    """``stream`` with ``first`` put back in front: the bytes that came after a PROXY header
    are the first the connection reads. ``transport_stream`` is the stream underneath (as a
    TLS stream's is), so :func:`read_on_demand` still finds the socket's transport."""

    def __init__(self, stream: ByteStream, first: bytes) -> None:
        self.transport_stream, self.first = stream, first

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self.first:
            data, self.first = self.first[:max_bytes], self.first[max_bytes:]
            return data
        return await self.transport_stream.receive(max_bytes)

    async def send(self, item: bytes) -> None:
        await self.transport_stream.send(item)

    async def send_eof(self) -> None:
        await self.transport_stream.send_eof()

    async def aclose(self) -> None:
        await self.transport_stream.aclose()

    @property
    def extra_attributes(self) -> Any:
        return self.transport_stream.extra_attributes


async def proxy_header(stream: ByteStream, trusted: Trusted, timeout: float
                       ) -> tuple[ByteStream, ProxyHeader] | None:
    """Read the PROXY header a connection starts with (``toyservers.proxy_protocol.take``,
    believed from a peer in ``trusted`` only): the stream to serve, and the header
    (``proxy_protocol.NO_HEADER``: the connection is HTTP from the peer itself); None when
    the connection must close (a header from an untrusted peer, a malformed one, or none
    within ``timeout`` seconds)."""
    peer = address(stream.extra(SocketAttribute.remote_address, None))
    data = b""
    with anyio.move_on_after(timeout):
        try:
            while (header := proxy_protocol.take(data, peer is not None and
                                                 peer[0] in trusted)) is None:
                data += await stream.receive()
            return Prefixed(stream, data[header.length:]), header
        except (proxy_protocol.ProxyHeaderError, *GONE):
            return None
    return None
