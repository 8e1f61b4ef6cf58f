"""What every toy server does around its protocol class: listen, lifespan, shut down gracefully.

Each server module defines an ``asyncio.Protocol`` subclass that takes a ``ServerState`` and
implements ``shutdown()``; its ``serve()`` hands that class to ``serve_protocol`` and its
``run()`` calls ``run_server``. This module holds only what is truly the same for all of them:

- ``ServerState``: what the connections of one server share (app, config, the lifespan
  ``state`` dict, the live connections and ASGI tasks, the cached ``Date``/``Server`` headers).
- ``HTTPProtocol``: the base of every server's protocol class: connection bookkeeping (the
  addresses, scheme and ``tls`` extension, ``TCP_NODELAY``), ``FlowControl`` for both
  directions, the ``Deadline`` that closes a connection which never sends a byte, and
  ``lingering_close`` (close in stages, RFC 9112 §9.6: a peer still sending gets our last
  bytes, not a reset).
- ``Deadline``: one timer per connection for whichever deadline runs (idle, head, body).
- ``serve_protocol``: lifespan startup, ``loop.create_server``, a once-a-second tick that
  refreshes the ``Date`` header, and graceful shutdown on SIGINT/SIGTERM: stop accepting,
  close idle keep-alive connections, let in-flight requests finish within
  ``timeout_graceful_shutdown`` seconds, then lifespan shutdown. A second signal during the
  wait cuts it short, as in uvicorn.
- ``run_server``: pick the event loop (uvloop when asked or available) and run until stopped.
- for toy-anyio, which runs on anyio instead of ``asyncio.Protocol``: ``anyio_listener`` (a
  listener on the configured address or a given socket, TLS through anyio), ``anyio_tick``
  (the ``Date`` header) and ``anyio_signals`` (SIGINT/SIGTERM), on asyncio and trio alike.

Compare with: uvicorn/server.py (Server.serve, main_loop, on_tick, shutdown,
handle_exit), uvicorn/protocols/http/httptools_impl.py (``connection_made``,
``timeout_keep_alive``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.abc
from anyio.streams.tls import TLSListener

from toyservers._types import ASGIApp
from toyservers.config import Config
from toyservers.flow_control import FlowControl
from toyservers.lifespan import Lifespan, LifespanFailure
from toyservers.state import ServerState

logger = logging.getLogger("toyservers.error")


class Connection(Protocol):
    """What ``serve_protocol`` needs of a connection: to be asked to finish and close."""

    def shutdown(self) -> None:
        """Close now if idle; otherwise finish the request in flight and then close."""


def _first_certificate(pem: str) -> str | None:
    """The first ``CERTIFICATE`` block of a PEM file (the server's own, before its chain)."""
    begin, end = pem.find("-----BEGIN CERTIFICATE-----"), pem.find("-----END CERTIFICATE-----")
    if begin < 0 or end < begin:
        return None
    return pem[begin:end + len("-----END CERTIFICATE-----")] + "\n"


TLS_VERSIONS = {"TLSv1": 0x0301, "TLSv1.1": 0x0302, "TLSv1.2": 0x0303, "TLSv1.3": 0x0304}


def tls_extension(ssl_object: ssl.SSLObject | None, state: ServerState
                  ) -> dict[str, Any] | None:
    """The ``tls`` entry of ``scope["extensions"]`` for a connection over TLS (its
    ``ssl_object``, from the transport or the stream), else None.

    Shape: ``server_cert`` (PEM str), ``client_cert_chain`` ([]: no client certificates are
    requested), ``client_cert_name`` and ``client_cert_error`` (None), ``tls_version`` (e.g.
    0x0304 for TLS 1.3) and ``cipher_suite`` (its IANA number). Computed once per connection,
    after the handshake. Spec: ASGI TLS extension
    (https://asgi.readthedocs.io/en/latest/specs/tls.html).
    """
    if ssl_object is None:
        return None
    cipher = ssl_object.cipher()
    return {
        "server_cert": state.server_cert,
        "client_cert_chain": [],
        "client_cert_name": None,
        "client_cert_error": None,
        "tls_version": TLS_VERSIONS.get(ssl_object.version() or ""),
        "cipher_suite": state.cipher_ids.get(cipher[0]) if cipher else None,
    }


class Deadline:
    """One timer per connection for whichever deadline is running.

    ``set(kind, seconds)`` starts the deadline ``kind`` (for example ``"idle"``, ``"head"``,
    ``"body"``), replacing the one before; ``clear()`` stops it; when one expires,
    ``on_timeout(kind)`` is called. Both are cheap on the hot path: the loop's timer is
    re-armed only when the new deadline is earlier than the armed one, and a timer that
    fires early (the deadline moved later, or was cleared) re-arms itself for what is left.
    A keep-alive connection serving thousands of requests a second so arms about one timer
    per ``timeout_keep_alive`` instead of one per request (``call_later`` costs ~2 µs in
    uvloop; uvicorn arms and cancels one per request). ``close()`` cancels for good.
    """

    __slots__ = ("loop", "on_timeout", "kind", "when", "handle")

    def __init__(self, loop: asyncio.AbstractEventLoop, on_timeout: Callable[[str], None]
                 ) -> None:
        self.loop, self.on_timeout = loop, on_timeout
        self.kind: str | None = None  # the deadline running, if any
        self.when = 0.0  # when it expires, loop time in seconds
        self.handle: asyncio.TimerHandle | None = None

    def set(self, kind: str, seconds: float) -> None:
        """Start deadline ``kind``, ``seconds`` from now."""
        when = self.loop.time() + seconds
        self.kind, self.when = kind, when
        handle = self.handle
        if handle is None or handle.when() > when:
            if handle is not None:
                handle.cancel()
            self.handle = self.loop.call_at(when, self._fire)

    def clear(self) -> None:
        """Stop the running deadline (its timer, if armed, finds nothing to do)."""
        self.kind = None

    def close(self) -> None:
        """Stop for good: the connection is gone."""
        self.kind = None
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None

    def _fire(self) -> None:
        self.handle = None
        kind = self.kind
        if kind is None:
            return
        if self.loop.time() < self.when:
            self.handle = self.loop.call_at(self.when, self._fire)
            return
        self.kind = None
        self.on_timeout(kind)


def _address(info: Any) -> tuple[str, int] | None:
    """``(host, port)`` from a socket address; None for a UNIX socket or an unknown one."""
    if isinstance(info, tuple) and len(info) >= 2:
        return str(info[0]), int(info[1])
    return None


LINGER = 2.0  # seconds a connection closed in stages reads (and drops) before closing


class _Lingering(asyncio.Protocol):
    """The protocol of a half-closed connection: drops what comes; passes the loss on."""

    def __init__(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def data_received(self, data: bytes) -> None:
        pass

    def connection_lost(self, exc: Exception | None) -> None:
        self.protocol.connection_lost(exc)


class HTTPProtocol(asyncio.Protocol):
    """The base of every toy server's protocol class: what a connection is, besides parsing.

    ``connection_made`` registers the connection in ``state.connections``, reads the
    addresses (``client``, ``server``: ``(host, port)`` or None), the ``scheme`` and the ASGI
    ``tls`` extension, turns Nagle's algorithm off (a response head and its body are one
    write; waiting for an ACK before the next small write only adds latency), makes the
    ``FlowControl`` (``flow``), and starts the ``idle`` deadline: a client that connects and
    never sends a byte is closed after ``timeout_keep_alive`` seconds, as uvicorn does.
    ``connection_lost`` undoes the bookkeeping. A subclass extends both (calling ``super()``)
    and implements ``data_received``, ``on_timeout(kind)``, ``send_error(status)`` and
    ``shutdown()``.
    """

    __slots__ = ("state", "config", "app", "loop", "transport", "flow", "deadline", "client",
                 "server", "scheme", "tls")

    def __init__(self, state: ServerState) -> None:
        self.state, self.config, self.app = state, state.config, state.app
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.flow: FlowControl = None  # type: ignore[assignment]
        self.deadline = Deadline(self.loop, self.on_timeout)
        self.client: tuple[str, int] | None = None
        self.server: tuple[str, int] | None = None
        self.scheme = "http"
        self.tls: dict[str, Any] | None = None  # the ASGI tls extension, over TLS

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.flow = FlowControl(self.transport)
        self.state.connections.add(self)
        self.client = _address(transport.get_extra_info("peername"))
        self.server = _address(transport.get_extra_info("sockname"))
        self.scheme = "https" if transport.get_extra_info("sslcontext") else "http"
        self.tls = tls_extension(transport.get_extra_info("ssl_object"), self.state)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.deadline.set("idle", self.config.timeout_keep_alive)

    def connection_lost(self, exc: Exception | None) -> None:
        self.state.connections.discard(self)
        self.deadline.close()
        if self.flow is not None:
            self.flow.resume_writing()  # wake a send() waiting to drain: it sees the disconnect

    def pause_writing(self) -> None:
        self.flow.pause_writing()

    def resume_writing(self) -> None:
        self.flow.resume_writing()

    def lingering_close(self) -> None:
        """Close in stages, as RFC 9112 §9.6 advises against "the TCP reset problem": closing
        a socket whose peer still sends makes the kernel answer RST, which can destroy our
        last bytes (an error response, a GOAWAY) before the peer reads them. So: send FIN
        (``write_eof``), read and drop what still comes until the peer closes or ``LINGER``
        seconds pass, then close; ``connection_lost`` still comes here. Over TLS (asyncio has
        no half-close there) the transport just closes."""
        transport = self.transport
        if not transport.can_write_eof() or transport.is_closing():
            transport.close()
            return
        transport.write_eof()
        transport.set_protocol(_Lingering(self))
        transport.resume_reading()  # a no-op unless reading was paused
        self.loop.call_later(LINGER, transport.close)

    def on_timeout(self, kind: str) -> None:
        """Deadline ``kind`` expired. This base closes on ``idle``; a subclass answers 408 to
        a slow head or body (RFC 9110 §15.5.9) and calls this for the rest."""
        self.transport.close()

    def send_error(self, status: int) -> None:
        """Answer ``status`` with ``Connection: close`` and close; only close when part of a
        response is already on the wire (no valid answer is left)."""
        raise NotImplementedError

    def shutdown(self) -> None:
        """Graceful shutdown: close now if idle, else after the response in flight."""
        raise NotImplementedError


ProtocolFactory = Callable[[ServerState], asyncio.Protocol]


def ssl_context(config: Config, alpn_protocols: list[str] | None = None
                ) -> ssl.SSLContext | None:
    """The server's TLS context when ``ssl_certfile`` and ``ssl_keyfile`` are set, else None.
    ``alpn_protocols``: the protocols offered by ALPN, preferred first (RFC 7301).
    Raises ssl.SSLError for files that hold no usable certificate and key (or none at all)."""
    if not (config.ssl_certfile and config.ssl_keyfile):
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    if alpn_protocols:
        context.set_alpn_protocols(alpn_protocols)  # RFC 7301: the client's pick comes first
    try:
        context.load_cert_chain(config.ssl_certfile, config.ssl_keyfile)
    except ssl.SSLError:
        raise
    except OSError as exc:  # unreadable file: not a failure to listen, say so
        raise ssl.SSLError(f"cannot read {exc.filename or 'the files'}: {exc.strerror}") from exc
    return context


def load_tls(state: ServerState, config: Config, context: ssl.SSLContext | None) -> None:
    """Fill ``state.server_cert`` and ``state.cipher_ids`` for the ASGI tls extension."""
    if context is not None and config.ssl_certfile:
        state.server_cert = _first_certificate(Path(config.ssl_certfile).read_text())
        # the low 16 bits of OpenSSL's id are the suite's number in the IANA registry
        state.cipher_ids = {c["name"]: c["id"] & 0xFFFF for c in context.get_ciphers()}


async def serve_protocol(
    protocol_factory: ProtocolFactory,
    app: ASGIApp,
    config: Config,
    *,
    sock: socket.socket | None = None,
    ready: Callable[[tuple[str, int]], object] | None = None,
    shutdown: asyncio.Event | None = None,
    name: str = "toyservers",
    alpn_protocols: list[str] | None = None,
) -> None:
    """Serve ``app`` with connections made by ``protocol_factory`` until ``shutdown`` is set.

    Args:
        protocol_factory: called with the ``ServerState`` once per accepted connection.
        sock: an already bound socket to serve on (tests bind port 0 and pass it); otherwise
            ``config.host``/``config.port`` are bound.
        ready: called with the bound ``(host, port)`` once the server accepts connections.
        shutdown: set it to stop; when None, SIGINT and SIGTERM set it (main thread only).
        alpn_protocols: over TLS, the protocols offered by ALPN, preferred first (RFC 7301;
            toy-h2: ``["h2", "http/1.1"]``).

    Raises:
        LifespanFailure: the app's lifespan startup failed; nothing was served.
        ssl.SSLError: ``config.ssl_certfile``/``ssl_keyfile`` hold no usable certificate
            and key (raised before lifespan startup).
        OSError: the address could not be bound (for example, the port is in use).
    """
    loop = asyncio.get_running_loop()
    # before startup: a bad certificate starts nothing
    context = ssl_context(config, alpn_protocols)
    lifespan = Lifespan(app, config.lifespan)
    await lifespan.startup()
    state = ServerState(app, config, lifespan.state)
    load_tls(state, config, context)

    force_exit = asyncio.Event()
    if shutdown is None:
        shutdown = asyncio.Event()
        if threading.current_thread() is threading.main_thread():
            stop = shutdown

            def on_signal() -> None:  # uvicorn: a second Ctrl+C does not wait any more
                (force_exit if stop.is_set() else stop).set()

            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, on_signal)

    def factory() -> asyncio.Protocol:
        return protocol_factory(state)

    try:
        if sock is not None:
            server = await loop.create_server(
                factory, sock=sock, backlog=config.backlog, ssl=context
            )
        else:
            server = await loop.create_server(
                factory, config.host, config.port, backlog=config.backlog, ssl=context
            )
    except BaseException:
        await lifespan.shutdown()
        raise
    host, port = server.sockets[0].getsockname()[:2]
    scheme = "https" if context else "http"
    logger.info("%s running on %s://%s:%d (Press CTRL+C to quit)", name, scheme, host, port)
    if ready is not None:
        ready((host, port))

    async def tick() -> None:
        while True:
            await asyncio.sleep(1.0)
            state.refresh_default_headers()

    ticker = asyncio.create_task(tick())
    try:
        await shutdown.wait()
    finally:
        ticker.cancel()
        logger.info("shutting down")
        server.close()
        for connection in list(state.connections):
            connection.shutdown()
        await _drain(state, config.timeout_graceful_shutdown, force_exit)
        await lifespan.shutdown()


async def _drain(state: ServerState, timeout: float | None, force_exit: asyncio.Event
                 ) -> None:
    """Wait for connections to close and tasks to end; past ``timeout`` seconds, or once
    ``force_exit`` is set, cancel the tasks and abort the connections."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while state.connections or state.tasks:
        if force_exit.is_set() or (deadline is not None and time.monotonic() >= deadline):
            logger.warning("%s; cancelling %d tasks", "forced exit" if force_exit.is_set()
                           else "graceful shutdown timed out", len(state.tasks))
            for task in list(state.tasks):
                task.cancel()
            for connection in list(state.connections):
                transport = getattr(connection, "transport", None)
                if transport is not None:
                    transport.abort()
            with contextlib.suppress(BaseException):
                await asyncio.gather(*state.tasks, return_exceptions=True)
            return
        await asyncio.sleep(0.05)


# --- on anyio (toy-anyio, on asyncio or trio) -------------------------------------------------


async def anyio_listener(config: Config, sock: socket.socket | None,
                         context: ssl.SSLContext | None, rcvbuf: int | None = None
                         ) -> tuple[Any, tuple[str, int]]:
    """An anyio listener on ``sock`` (bound; listened on here) or on ``config.host``/``port``,
    wrapped in TLS when ``context`` is given (its handshake bounded by ``timeout_headers``),
    and the bound ``(host, port)``. ``rcvbuf``: the kernel receive buffer of every accepted
    socket, bytes (``SO_RCVBUF``; None: the kernel's autotuning). Raises OSError when the
    address cannot be bound."""
    if sock is not None:
        sock.listen(config.backlog)
        listener: Any = await anyio.abc.SocketListener.from_socket(sock)
        listeners = [listener]
    else:
        listener = await anyio.create_tcp_listener(
            local_host=config.host, local_port=config.port, backlog=config.backlog)
        listeners = listener.listeners
    if rcvbuf is not None:  # accepted sockets inherit it from the listening one
        for one in listeners:
            one.extra(anyio.abc.SocketAttribute.raw_socket).setsockopt(
                socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    host, port = listeners[0].extra(anyio.abc.SocketAttribute.local_address)[:2]
    if context is not None:  # standard_compatible=False: closing never waits on the client
        listener = TLSListener(listener, context, standard_compatible=False,
                               handshake_timeout=config.timeout_headers)
    return listener, (host, port)


async def anyio_tick(state: ServerState) -> None:
    """Refresh the ``Date`` header once a second, until cancelled."""
    while True:
        await anyio.sleep(1.0)
        state.refresh_default_headers()


async def anyio_signals(stop: Any, force_exit: Callable[[], object]) -> None:
    """On SIGINT/SIGTERM set ``stop``; on a second one call ``force_exit`` (as uvicorn: a
    second Ctrl+C does not wait any more). Main thread only."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            if stop.is_set():
                force_exit()
            stop.set()


def new_event_loop_factory(loop: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """The event loop factory for ``loop``.

    ``"uvloop"``: uvloop (ImportError if missing); ``"auto"``: uvloop if installed; else asyncio.
    """
    if loop in ("uvloop", "auto"):
        try:
            import uvloop
        except ImportError:
            if loop == "uvloop":
                raise
        else:
            return uvloop.new_event_loop
    return asyncio.new_event_loop


def run_server(
    serve: Callable[..., Coroutine[Any, Any, None]], app: ASGIApp, config: Config,
    *, backend: str = "asyncio",
) -> None:
    """Block running ``serve(app, config)`` on the configured loop; exit with a clear message.

    ``backend="trio"`` runs it on trio through ``anyio.run`` instead (toy-anyio-trio).

    Exits the process (``SystemExit``) with status 3 when lifespan startup fails and 1 when the
    address cannot be bound or the TLS certificate and key cannot be loaded, printing one line,
    as uvicorn does.
    """
    factory = new_event_loop_factory(config.loop)
    try:
        if backend == "asyncio":
            with asyncio.Runner(loop_factory=factory) as runner:
                runner.run(serve(app, config))
        else:
            anyio.run(serve, app, config, backend=backend)
    except LifespanFailure as exc:
        logger.error("application startup failed: %s", exc)
        sys.exit(3)
    except ssl.SSLError as exc:
        logger.error("cannot use the TLS certificate %s with the key %s: %s",
                     config.ssl_certfile, config.ssl_keyfile, exc.reason or exc)
        sys.exit(1)
    except OSError as exc:
        logger.error("cannot listen on %s:%d: %s", config.host, config.port, exc.strerror or exc)
        sys.exit(1)
    except KeyboardInterrupt:
        pass
