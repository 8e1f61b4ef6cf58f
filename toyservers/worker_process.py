"""One pre-forked worker: what runs in the child once ``toyservers.workers``' master forks it.

Process model: in the child, the master's code (``Arbiter.worker_main``) first closes the
master's fds and resets its signal handlers; then the worker takes its own signals, imports
the app (unless the master preloaded it), and runs the toy server's own ``serve()`` on the
inherited socket, or with ``reuse_port`` on its own bound beside it: an ASGI toy in a fresh
event loop, toy-wsgi blocking in its threads. It speaks to the master over one pipe, a byte a
message: a beat (``.``) every ``interval`` seconds, ``R`` once its server listens, ``Q`` when it
retires by itself (after ``max_requests`` requests plus a jitter). Its signals: TERM
graceful, INT and QUIT quick; while it boots, QUIT ends it at once. USR1 is TERM from a master
that replaced it by a reload: its open WebSockets close with 1012, service restart, not 1001.

A beat comes from where a stuck worker stops: in an ASGI worker, a timer on its event loop
(an app blocking the loop stops it); in toy-wsgi, a thread that stays silent while a request
has run past ``timeout`` (so such a worker dies up to twice ``timeout`` after the request
began). A thin wrapper around the app counts requests, so ``serve()`` is used unchanged. A
retiring ASGI worker stops accepting, answers on its open connections with ``Connection:
close`` for ``DRAIN`` seconds, and only then sets its ``shutdown`` (clients leave cleanly
instead of writing a request to a connection being closed). A worker whose master dies (its
parent pid changes) stops gracefully.

Deliberately left out: gunicorn's worker classes (the toy server's ``serve()`` is the worker
class here), its temporary-file heartbeat (a pipe instead), gunicorn's USR1 (reopen the logs:
ours is the reload's TERM), WINCH, and the ``post_fork``/``worker_int``/``worker_exit`` hooks.
(toy-wsgi drains its idle ``gthread`` connections in its own graceful shutdown: its DRAIN.)

Spec: PEP 3333 (``wsgi.multiprocess``: "true if an equivalent application object may be
simultaneously invoked by another process"); ASGI lifespan 2.0 (a failed startup ends the
worker with ``BOOT_ERROR``, gunicorn's status for a worker that cannot boot).

Compare with: gunicorn/workers/base.py (``init_process``, ``init_signals``, ``notify``,
``handle_exit``, ``handle_quit``, the ``max_requests`` jitter in ``__init__``),
gunicorn/workers/sync.py (``is_parent_alive``), uvicorn/supervisors/multiprocess.py
(``Process.target``, ``pong``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import socket
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from toyservers._server import new_event_loop_factory
from toyservers.config import Config
from toyservers.lifespan import LifespanFailure

logger = logging.getLogger("toyservers.error")

DRAIN = 0.2  # seconds a retiring ASGI worker answers what it accepted before it stops
BOOT_ERROR = 3  # a worker's exit status when the app cannot be imported or started (gunicorn)


# --- signals and state ----------------------------------------------------------------------------


def init_signals() -> None:
    """The worker's signals while it boots; its server's own handlers replace TERM, INT, QUIT."""
    # The master's commands are not the worker's; a terminal's Ctrl+C reaches every
    # process of the group: while the worker boots, the master's QUIT stops it instead.
    for sig in (signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(signal.SIGQUIT, _exit_now)  # SIG_DFL would dump core


def _exit_now(signum: int, frame: object) -> None:
    raise SystemExit(0)


class WorkerState:
    """What a worker knows of itself: its pipe, its requests, whether it is retiring."""

    def __init__(self, beat_fd: int, max_requests: int, max_requests_jitter: int) -> None:
        self.beat_fd, self.master = beat_fd, os.getppid()
        jitter = random.randint(0, max_requests_jitter)  # so they do not all restart at once
        self.max_requests = max_requests + jitter if max_requests else 0
        self.requests = 0
        self.retiring = False
        self.running: dict[object, float] = {}  # toy-wsgi: request -> when it started

    def notify(self, byte: bytes = b".") -> None:
        # a full pipe has beaten enough; a broken one: the master is gone (see the beats)
        with contextlib.suppress(BlockingIOError, BrokenPipeError):
            os.write(self.beat_fd, byte)

    def count(self) -> bool:
        """One more request; True when it is the last one this worker serves."""
        self.requests += 1  # gthread threads may race here: >=, so no count is ever skipped
        last = bool(self.max_requests) and self.requests >= self.max_requests \
            and not self.retiring
        if last:
            logger.info("Worker %d: %d requests, retiring", os.getpid(), self.requests)
            self.retiring = True
            self.notify(b"Q")  # the master spawns the next one now, not once this one exits
        return last


# --- boot -----------------------------------------------------------------------------------------


def run_worker(module: ModuleType, interface: str, load_app: Callable[[], Any], config: Config,
               sock: socket.socket, me: WorkerState, *, interval: float, timeout: float,
               reuse_port: bool) -> int:
    """Import the app, take the socket, serve until stopped; the worker's exit status (0, or
    ``BOOT_ERROR`` when the app cannot be imported, the socket bound, or the app started)."""
    try:
        app = load_app()
        if reuse_port:  # a socket of its own beside the master's: the kernel spreads connections
            own = socket.socket(sock.family)
            own.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            own.bind(sock.getsockname()[:2])
            sock = own
    except Exception as exc:  # the CLI's one-line refusal (a bad module:app), a bind
        logger.error("Worker %d cannot boot: %s", os.getpid(), exc)
        return BOOT_ERROR
    try:
        if interface == "wsgi":
            wsgi_worker(module, app, config, sock, me, interval, timeout)
        else:
            asgi_worker(module, app, config, sock, me, interval)
    except LifespanFailure as exc:
        logger.error("application startup failed: %s", exc)
        return BOOT_ERROR
    return 0


# --- ASGI worker ----------------------------------------------------------------------------------


def asgi_worker(module: ModuleType, app: Any, config: Config, sock: socket.socket,
                me: WorkerState, interval: float) -> None:
    """Run an ASGI toy's ``serve()`` in a fresh event loop, the beats on a timer of that loop."""
    shutdown = asyncio.Event()
    stop_accepting = asyncio.Event()  # every server's serve() closes its listener on it

    def graceful(restart: bool = False) -> None:
        # The server's shutdown stops accepting and closes idle connections at once: one
        # accepted an instant before, its request not yet read, would be closed under the
        # client. So stop accepting first, answer what comes on the open connections for
        # DRAIN seconds with Connection: close, and only then shut down.
        if restart:  # USR1: a reload replaced this worker; the service goes on elsewhere
            config.ws_shutdown_code = 1012  # "Service Restart" (IANA close code registry)
        me.retiring = True
        stop_accepting.set()
        asyncio.get_running_loop().call_later(DRAIN, shutdown.set)

    async def counted(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)  # lifespan and websocket pass untouched
            return
        last = me.count()

        async def send_closing(message: Any) -> None:
            if me.retiring and message["type"] == "http.response.start":
                headers = [*message.get("headers", ()), (b"connection", b"close")]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await app(scope, receive, send_closing)
        finally:
            if last:
                graceful()

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def quick() -> None:  # this worker's own copy of config: cancel what runs, now
            config.timeout_graceful_shutdown = 0
            shutdown.set()

        def beat() -> None:  # a loop blocked by sync code runs no timer: the beats stop
            me.notify()
            if os.getppid() != me.master and not me.retiring:  # orphaned: the master died
                graceful()
            loop.call_later(interval, beat)

        loop.add_signal_handler(signal.SIGTERM, graceful)
        loop.add_signal_handler(signal.SIGUSR1, graceful, True)
        loop.add_signal_handler(signal.SIGINT, quick)
        loop.add_signal_handler(signal.SIGQUIT, quick)
        beat()
        await module.serve(counted, config, sock=sock, shutdown=shutdown,
                           stop_accepting=stop_accepting, ready=lambda address: me.notify(b"R"))

    with asyncio.Runner(loop_factory=new_event_loop_factory(config.loop)) as runner:
        runner.run(main())


# --- WSGI worker ----------------------------------------------------------------------------------


def wsgi_worker(module: ModuleType, app: Any, config: Config, sock: socket.socket,
                me: WorkerState, interval: float, timeout: float) -> None:
    """Run toy-wsgi's blocking ``serve()``, the beats from a thread that watches the requests."""
    shutdown = threading.Event()

    def done(request: object, last: bool) -> None:
        me.running.pop(request, None)
        if last:
            shutdown.set()  # the server finishes the response in flight before it stops

    class Closing:  # an iterable result, its close() (PEP 3333) telling us the request ended
        def __init__(self, result: Any, request: object, last: bool) -> None:
            self.result, self.request, self.last = result, request, last

        def __iter__(self) -> Any:
            return iter(self.result)

        def close(self) -> None:
            try:
                getattr(self.result, "close", lambda: None)()
            finally:
                done(self.request, self.last)

    def counted(environ: Any, start_response: Any) -> Any:
        environ["wsgi.multiprocess"] = True  # PEP 3333: other processes run this app too
        request = object()
        me.running[request] = time.monotonic()
        last = me.count()
        try:
            result = app(environ, start_response)
        except BaseException:
            done(request, last)
            raise
        # A list or a file wrapper goes to the server as it is: the app's work is over, and
        # the server frames a one-item list with Content-Length and sends a file with sendfile.
        if isinstance(result, (list, tuple, environ.get("wsgi.file_wrapper", list))):
            done(request, last)
            return result
        return Closing(result, request, last)

    def beat() -> None:  # silent while a request has run past the timeout
        while not shutdown.wait(interval):
            oldest = min(list(me.running.values()), default=time.monotonic())
            if not timeout or time.monotonic() - oldest < timeout:
                me.notify()
            if os.getppid() != me.master:  # orphaned: the master died
                shutdown.set()

    def quick(signum: int, frame: object) -> None:
        config.timeout_graceful_shutdown = 0
        shutdown.set()

    for sig in (signal.SIGTERM, signal.SIGUSR1):  # USR1: TERM after a reload (no WebSocket)
        signal.signal(sig, lambda signum, frame: shutdown.set())
    signal.signal(signal.SIGINT, quick)
    signal.signal(signal.SIGQUIT, quick)
    threading.Thread(target=beat, daemon=True).start()
    module.serve(counted, config, sock=sock, shutdown=shutdown,
                 ready=lambda address: me.notify(b"R"))
