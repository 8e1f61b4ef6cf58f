"""What every asyncio toy server does around its protocol class: listen, tick, shut down.

Each server module defines an ``asyncio.Protocol`` subclass (on ``toyservers.protocol``'s
``HTTPProtocol``) that takes a ``ServerState`` and implements ``shutdown()``; its ``serve()``
hands that class to ``serve_protocol`` and its ``run()`` calls ``run_server``:

- ``serve_protocol``: lifespan startup, ``loop.create_server``, a once-a-second tick that
  refreshes the ``Date`` header, and graceful shutdown on SIGINT/SIGTERM: stop accepting,
  close idle keep-alive connections (under ``idle_close_on_response``, after one more
  response or at their keep-alive timeout: each protocol's ``close_idle``), let in-flight
  requests finish within ``timeout_graceful_shutdown`` seconds, then lifespan shutdown. A
  second signal during the wait cuts it short, as in uvicorn. A worker that retires
  (``toyservers.worker_process``) first only stops accepting, through ``stop_accepting``.
- ``run_server``: pick the event loop (uvloop when asked or available) and run until stopped;
  a failure to start is one line and an exit status, as uvicorn's.

Compare with: uvicorn/server.py (``Server.serve``, ``main_loop``, ``on_tick``, ``shutdown``,
``handle_exit``).
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
from typing import Any

import anyio

from toyservers import proxy_protocol
from toyservers._types import ASGIApp
from toyservers.asgi import scope_template
from toyservers.config import Config
from toyservers.lifespan import Lifespan, LifespanFailure
from toyservers.listeners import (
    address,
    bound_address,
    describe,
    listening_socket,
    release,
    where,
)
from toyservers.state import ServerState
from toyservers.tls import load_tls, ssl_context

logger = logging.getLogger("toyservers.error")


ProtocolFactory = Callable[[ServerState], asyncio.Protocol]


async def serve_protocol(
    protocol_factory: ProtocolFactory,
    app: ASGIApp,
    config: Config,
    *,
    sock: socket.socket | None = None,
    ready: Callable[[tuple[str, int]], object] | None = None,
    shutdown: asyncio.Event | None = None,
    stop_accepting: asyncio.Event | None = None,
    name: str = "toyservers",
    alpn_protocols: list[str] | None = None,
) -> None:
    """Serve ``app`` with connections made by ``protocol_factory`` until ``shutdown`` is set.

    Args:
        protocol_factory: called with the ``ServerState`` once per accepted connection.
        sock: an already bound socket to serve on (tests bind port 0 and pass it; a worker
            gets its master's); otherwise the one ``config`` names
            (``toyservers.listeners.listening_socket``: a descriptor, systemd's, a UNIX
            socket removed again on exit, or ``config.host``/``config.port``).
        ready: called with the bound ``(host, port)`` (a UNIX socket: ``(path, 0)``) once the
            server accepts connections.
        shutdown: set it to stop; when None, SIGINT and SIGTERM set it (main thread only).
        stop_accepting: once set, the listener closes and the open connections are served
            on until ``shutdown`` (a retiring worker hands new clients to its siblings).
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
        if config.proxy_protocol:
            return ProxyProtocolReader(state, protocol_factory)
        return protocol_factory(state)

    own = sock is None  # a socket we bind is ours to release (a UNIX socket's file)
    try:
        if sock is None:
            sock = listening_socket(config)
        server = await loop.create_server(factory, sock=sock, backlog=config.backlog,
                                          ssl=context)
    except BaseException:
        if own:
            release(config.uds)
        await lifespan.shutdown()
        raise
    logger.info("%s running on %s (Press CTRL+C to quit)", name,
                describe(sock, "https" if context else "http"))
    if ready is not None:
        ready(bound_address(sock))

    async def tick() -> None:
        while True:
            await asyncio.sleep(1.0)
            state.refresh_default_headers()

    async def close_listener(event: asyncio.Event) -> None:
        await event.wait()
        server.close()

    services = [asyncio.create_task(tick())]
    if stop_accepting is not None:
        services.append(asyncio.create_task(close_listener(stop_accepting)))
    try:
        await shutdown.wait()
    finally:
        for service in services:
            service.cancel()
        logger.info("shutting down")
        server.close()
        for connection in list(state.connections):
            try:
                connection.shutdown()
            except Exception:  # one connection's bug must not keep the rest (and lifespan) up
                logger.exception("shutting down %r failed; aborting it", connection)
                _abort(connection)
        if own:
            release(config.uds)
        await _drain(state, config.timeout_graceful_shutdown, force_exit)
        await lifespan.shutdown()


class ProxyProtocolReader(asyncio.Protocol):
    """A connection's first protocol under ``--proxy-protocol``: it reads the PROXY header
    (``toyservers.proxy_protocol.take``: believed from a peer in ``state.trusted`` only, a
    malformed one closes the connection, none at all is HTTP from the peer itself), then
    hands the connection and the bytes after the header to the server's protocol, whose
    ``client`` and ``server`` become the header's source and destination. A header that is
    not complete within ``timeout_headers`` seconds closes the connection."""

    def __init__(self, state: ServerState, make: ProtocolFactory) -> None:
        self.state, self.make = state, make
        self.buffer = b""
        self.transport: Any = None
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:  # uvloop's is no asyncio.Transport
        self.transport = transport
        self.timer = asyncio.get_running_loop().call_later(
            self.state.config.timeout_headers, transport.close)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.buffer += data
        peer = address(self.transport.get_extra_info("peername"))
        try:
            header = proxy_protocol.take(self.buffer, peer is not None and
                                         peer[0] in self.state.trusted)
        except proxy_protocol.ProxyHeaderError as exc:
            logger.debug("closing %s: %s", peer, exc)
            self.transport.close()
            return
        if header is not None:
            self.hand_over(header)

    def hand_over(self, header: proxy_protocol.ProxyHeader) -> None:
        """Give the connection to the server's protocol, as if it had been accepted now."""
        assert self.transport is not None
        if self.timer is not None:
            self.timer.cancel()
        protocol = self.make(self.state)
        protocol.connection_made(self.transport)
        if header.source is not None:  # as if it had connected from there
            protocol.client, protocol.server = header.source, header.destination  # type: ignore
            protocol.scope_template = scope_template(protocol)  # type: ignore
        self.transport.set_protocol(protocol)
        rest = self.buffer[header.length:]
        if rest:
            protocol.data_received(rest)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()


def _abort(connection: Any) -> None:
    """Close ``connection`` at once, dropping what its transport still holds (if it has one)."""
    transport = getattr(connection, "transport", None)
    if transport is not None:
        transport.abort()


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
                _abort(connection)
            with contextlib.suppress(BaseException):
                await asyncio.gather(*state.tasks, return_exceptions=True)
            return
        await asyncio.sleep(0.05)


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
        logger.error("cannot listen on %s: %s", where(config), exc.strerror or exc)
        sys.exit(1)
    except KeyboardInterrupt:
        pass
