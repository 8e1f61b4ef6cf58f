"""The pre-fork supervisor: a master process keeping N workers of any toy server alive.

Process model (gunicorn's arbiter): the master binds the socket and forks (``os.fork()``) the
workers; each runs the server's own ``serve()`` on the inherited socket (an ASGI toy in a
fresh event loop, toy-wsgi blocking), and the kernel gives each connection to whichever
worker accepts first: no request byte passes through the master. With ``reuse_port`` each
worker binds its own socket (``SO_REUSEPORT``) and the kernel spreads connections among them.
A worker writes on its pipe to the master: a beat (``.``) every ``BEAT`` seconds, ``R`` once
its server listens, ``Q`` when it retires by itself (after ``max_requests`` requests). The
master respawns a worker that dies, SIGKILLs one silent for ``timeout`` seconds, and takes
gunicorn's signals: TERM graceful, INT/QUIT quick, HUP reload (new workers first; the old
stop gracefully once the new listen), TTIN/TTOU one worker more/less (TTIN refused, with a
log line, past ``max_workers``: gunicorn has no such cap).

A beat comes from where a stuck worker stops: in an ASGI worker, a timer on its event loop
(an app blocking the loop stops it); in toy-wsgi, a thread that stays silent while a request
has run past ``timeout`` (so such a worker dies up to twice ``timeout`` after the request
began). A thin wrapper around the app counts requests, so ``serve()`` is used unchanged. A
retiring ASGI worker stops accepting, answers on its open connections with ``Connection:
close`` for ``DRAIN`` seconds, and only then sets its ``shutdown`` (clients leave cleanly
instead of writing a request to a connection being closed).
Without ``preload`` the master never imports the app and every worker imports it, so a reload
runs new code; with ``preload`` the master imports it once and a reload forks the same app
(so in gunicorn: new code under ``--preload`` takes a restart).

Deliberately left out: gunicorn's ``--graceful-timeout`` (we SIGKILL after
``timeout_graceful_shutdown`` + ``DRAIN`` + 2 s), USR1/USR2/WINCH (reopen logs, re-exec the
master), pid files, ``--user``, server hooks, and a fair share of load: with one socket the
least busy worker takes more; with ``reuse_port`` a retiring worker's accept queue is lost.
(toy-wsgi drains its idle ``gthread`` connections in its own graceful shutdown: its DRAIN.)

Compare with: gunicorn/arbiter.py (``run``, ``manage_workers``, ``murder_workers``,
``reap_workers``, ``reload``), gunicorn/workers/base.py (``notify``, ``init_signals``,
``max_requests`` jitter), uvicorn/supervisors/multiprocess.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from toyservers._server import new_event_loop_factory
from toyservers.config import Config
from toyservers.lifespan import LifespanFailure

logger = logging.getLogger("toyservers.error")

BEAT = 1.0  # seconds between beats (shorter when the timeout is short: a quarter of it)
DRAIN = 0.2  # seconds a retiring ASGI worker answers what it accepted before it stops
BOOT_ERROR = 3  # a worker's exit status when the app cannot be imported or started (gunicorn)
MASTER_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP,
                  signal.SIGTTIN, signal.SIGTTOU, signal.SIGCHLD)


@dataclass
class Settings:
    """What ``toyserve --workers N`` adds to ``Config``, with gunicorn's names: ``timeout``
    (seconds a worker may stay silent before SIGKILL; 0: never), ``max_requests`` (0: never)
    plus ``randint(0, max_requests_jitter)``, ``reuse_port`` and ``preload`` as above; and
    ``max_workers``, the most workers TTIN may raise the count to (None: no cap)."""

    reuse_port: bool = False
    timeout: float = 30.0
    max_requests: int = 0
    max_requests_jitter: int = 0
    preload: bool = False
    max_workers: int | None = None


@dataclass
class Worker:
    """The master's view of one worker."""

    pid: int
    beats: int  # the read end of the worker's pipe
    age: int  # spawn order: the oldest retire first
    last_beat: float = field(default_factory=time.monotonic)
    booted: bool = False  # its server listens (it wrote ``R``)
    retiring: bool = False  # sent a signal to stop: no longer counted


class WorkerState:
    """What a worker knows of itself: its pipe, its requests, whether it is retiring."""

    def __init__(self, beat_fd: int, settings: Settings) -> None:
        self.beat_fd, self.master = beat_fd, os.getppid()
        jitter = random.randint(0, settings.max_requests_jitter)  # so they do not all restart
        self.max_requests = settings.max_requests + jitter if settings.max_requests else 0
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


# --- worker ---------------------------------------------------------------------------------------


def _asgi_worker(module: ModuleType, app: Any, config: Config, sock: socket.socket,
                 me: WorkerState, interval: float) -> None:
    shutdown = asyncio.Event()
    stop_accepting = asyncio.Event()  # every server's serve() closes its listener on it

    def graceful() -> None:
        # The server's shutdown stops accepting and closes idle connections at once: one
        # accepted an instant before, its request not yet read, would be closed under the
        # client. So stop accepting first, answer what comes on the open connections for
        # DRAIN seconds with Connection: close, and only then shut down.
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
        loop.add_signal_handler(signal.SIGINT, quick)
        loop.add_signal_handler(signal.SIGQUIT, quick)
        beat()
        await module.serve(counted, config, sock=sock, shutdown=shutdown,
                           stop_accepting=stop_accepting, ready=lambda address: me.notify(b"R"))

    with asyncio.Runner(loop_factory=new_event_loop_factory(config.loop)) as runner:
        runner.run(main())


def _wsgi_worker(module: ModuleType, app: Any, config: Config, sock: socket.socket,
                 me: WorkerState, interval: float, timeout: float) -> None:
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

    signal.signal(signal.SIGTERM, lambda signum, frame: shutdown.set())
    signal.signal(signal.SIGINT, quick)
    signal.signal(signal.SIGQUIT, quick)
    threading.Thread(target=beat, daemon=True).start()
    module.serve(counted, config, sock=sock, shutdown=shutdown,
                 ready=lambda address: me.notify(b"R"))


# --- master ---------------------------------------------------------------------------------------


class Arbiter:
    """Keep ``config.workers`` workers of ``module`` (a toy server) serving ``load_app()``."""

    def __init__(self, module: ModuleType, interface: str, load_app: Callable[[], Any],
                 config: Config, settings: Settings) -> None:
        self.module, self.interface, self.config, self.settings = module, interface, config, \
            settings
        self.load_app = load_app
        self.app = load_app() if settings.preload else None
        self.num_workers = config.workers
        self.workers: dict[int, Worker] = {}
        self.ages = 0
        self.signals: list[int] = []
        self.interval = min(BEAT, settings.timeout / 4) if settings.timeout else BEAT

    def bind(self) -> socket.socket:
        """The shared listening socket; with ``reuse_port``, a bound one that only holds the
        port (the workers bind their own beside it and the kernel spreads connections)."""
        config = self.config
        if not self.settings.reuse_port:
            return socket.create_server((config.host, config.port), backlog=config.backlog)
        sock = socket.socket(socket.AF_INET6 if ":" in config.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((config.host, config.port))
        return sock

    def run(self) -> int:
        """Serve until a TERM, INT or QUIT; the exit status."""
        self.sock = self.bind()
        host, port = self.sock.getsockname()[:2]
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        for sig in MASTER_SIGNALS:
            signal.signal(sig, self.on_signal)
        scheme = "https" if self.config.ssl_certfile else "http"  # each worker wraps its own
        logger.info("Listening at: %s://%s:%d (%d)", scheme, host, port, os.getpid())
        try:
            while True:
                while self.signals:  # queued by on_signal (gunicorn's SIG_QUEUE)
                    signum = self.signals.pop(0)
                    if signum in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
                        return self.stop(graceful=signum == signal.SIGTERM)
                    self.on_command(signum)
                if self.reap() == BOOT_ERROR:
                    logger.error("Worker failed to boot.")
                    self.stop(graceful=False)
                    return BOOT_ERROR
                self.murder()
                self.manage()
                self.sleep()
        finally:
            self.sock.close()
            for fd in (self.wake_r, self.wake_w):
                os.close(fd)

    def on_signal(self, signum: int, frame: object) -> None:
        """Queue the signal and wake the loop: the work happens there, not in a handler."""
        self.signals.append(signum)
        with contextlib.suppress(BlockingIOError):
            os.write(self.wake_w, b".")

    def on_command(self, sig: int) -> None:
        """HUP, TTIN, TTOU (CHLD only wakes the loop, to reap at once)."""
        if sig == signal.SIGHUP:  # new workers now; manage() retires the old once they listen
            logger.info("Hang up: reloading, %d new workers", self.num_workers)
            for _ in range(self.num_workers):
                self.spawn()
        elif sig == signal.SIGTTIN:
            cap = self.settings.max_workers
            if cap is not None and self.num_workers >= cap:  # a signal cannot say "no" back
                logger.warning("TTIN refused: %d workers, --max-workers %d", self.num_workers,
                               cap)
            else:
                self.num_workers += 1
        elif sig == signal.SIGTTOU and self.num_workers > 1:  # gunicorn keeps one at least
            self.num_workers -= 1

    def sleep(self) -> None:
        """Wait for a signal or a beat, reading the beats that came."""
        by_fd = {w.beats: w for w in self.workers.values()}
        readable, _, _ = select.select([self.wake_r, *by_fd], [], [], self.interval)
        for fd in readable:
            with contextlib.suppress(BlockingIOError):
                data = os.read(fd, 4096)
                if fd in by_fd:
                    by_fd[fd].last_beat = time.monotonic()
                    by_fd[fd].booted |= b"R" in data
                    by_fd[fd].retiring |= b"Q" in data

    def reap(self) -> int:
        """Forget the workers that exited; the last boot failure's status, else 0."""
        failed = 0
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0  # no child left
            if pid == 0:
                return failed
            worker = self.workers.pop(pid, None)
            if worker is None:
                continue
            os.close(worker.beats)
            code = os.waitstatus_to_exitcode(status)
            if code == BOOT_ERROR:
                failed = BOOT_ERROR
            elif not worker.retiring and code != 0:
                logger.warning("Worker (pid:%d) exited with %s", pid, code)

    def murder(self) -> None:
        """SIGKILL the workers silent for ``timeout`` seconds (gunicorn's ``murder_workers``)."""
        timeout = self.settings.timeout
        for worker in list(self.workers.values()):
            if timeout and time.monotonic() - worker.last_beat > timeout:
                logger.critical("WORKER TIMEOUT (pid:%d)", worker.pid)
                self.retire(worker, signal.SIGKILL)  # no longer counted: replaced at once

    def manage(self) -> None:
        """Spawn up to ``num_workers``; retire the oldest beyond it, once all others listen."""
        live = sorted((w for w in self.workers.values() if not w.retiring), key=lambda w: w.age)
        for _ in range(self.num_workers - len(live)):
            self.spawn()
        excess = len(live) - self.num_workers
        if excess > 0 and all(w.booted for w in live):
            for worker in live[:excess]:
                self.retire(worker, signal.SIGTERM)

    def retire(self, worker: Worker, sig: int) -> None:
        worker.retiring = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, sig)

    def stop(self, graceful: bool) -> int:
        """Close the master's listening socket, stop every worker (TERM: gracefully, else
        QUIT), SIGKILL what outlives the wait."""
        # First, as gunicorn's ``stop`` does: the kernel keeps a listening socket open while
        # any process holds it, so with the master's copy open new clients would queue in a
        # backlog nobody accepts from until the master exits, then get a reset. Each worker
        # closes its own inherited copy as it stops accepting; then they are refused.
        self.sock.close()
        logger.info("Shutting down: %s", "graceful" if graceful else "quick")
        for worker in list(self.workers.values()):
            self.retire(worker, signal.SIGTERM if graceful else signal.SIGQUIT)
        wait = (self.config.timeout_graceful_shutdown or 0) + DRAIN + 2.0
        deadline = time.monotonic() + wait
        while self.workers and time.monotonic() < deadline:
            self.reap()
            self.sleep()
        for worker in list(self.workers.values()):  # what outlived the wait
            self.retire(worker, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(worker.pid, 0)
            os.close(worker.beats)
        self.workers.clear()
        return 0

    def spawn(self) -> None:
        self.ages += 1
        beats, beat_w = os.pipe()
        os.set_blocking(beat_w, False)
        pid = os.fork()
        if pid:
            os.close(beat_w)
            self.workers[pid] = Worker(pid, beats, self.ages)
            logger.info("Booting worker with pid: %d", pid)
            return
        status = 1
        try:
            status = self.worker_main(beats, beat_w)
        except SystemExit:
            status = 0  # the master's QUIT while this worker booted
        except BaseException:
            logger.exception("worker %d failed", os.getpid())
        finally:
            logging.shutdown()
            os._exit(status)  # never return into the master's loop

    def worker_main(self, beats: int, beat_w: int) -> int:
        """In the forked child: undo the master's signals and fds, then serve."""
        for sig in MASTER_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        # The master's commands are not the worker's; a terminal's Ctrl+C reaches every
        # process of the group: while the worker boots, the master's QUIT stops it instead.
        for sig in (signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        signal.signal(signal.SIGQUIT, _exit_now)  # SIG_DFL would dump core
        for fd in (beats, self.wake_r, self.wake_w, *(w.beats for w in self.workers.values())):
            os.close(fd)
        try:
            app = self.app if self.settings.preload else self.load_app()
            sock = self.sock
            if self.settings.reuse_port:
                sock = socket.socket(self.sock.family)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                sock.bind(self.sock.getsockname()[:2])
        except Exception as exc:  # the CLI's one-line refusal (a bad module:app), a bind
            logger.error("Worker %d cannot boot: %s", os.getpid(), exc)
            return BOOT_ERROR
        me = WorkerState(beat_w, self.settings)
        try:
            if self.interface == "wsgi":
                _wsgi_worker(self.module, app, self.config, sock, me, self.interval,
                             self.settings.timeout)
            else:
                _asgi_worker(self.module, app, self.config, sock, me, self.interval)
        except LifespanFailure as exc:
            logger.error("application startup failed: %s", exc)
            return BOOT_ERROR
        return 0


def _exit_now(signum: int, frame: object) -> None:
    raise SystemExit(0)


def run(module: ModuleType, interface: str, load_app: Callable[[], Any], config: Config,
        settings: Settings) -> None:
    """Block supervising ``config.workers`` workers; exit with the master's status."""
    try:
        status = Arbiter(module, interface, load_app, config, settings).run()
    except OSError as exc:
        logger.error("cannot listen on %s:%d: %s", config.host, config.port, exc.strerror or exc)
        status = 1
    sys.exit(status)
