"""The pre-fork supervisor: a master process keeping N workers of any toy server alive.

Process model (gunicorn's arbiter): the master binds the socket and forks (``os.fork()``) the
workers; each runs the server's own ``serve()`` on the inherited socket (an ASGI toy in a
fresh event loop, toy-wsgi blocking: ``toyservers.worker_process``, what runs after the fork),
and the kernel gives each connection to whichever worker accepts first: no request byte
passes through the master. With ``reuse_port`` each worker binds its own socket
(``SO_REUSEPORT``) and the kernel spreads connections among them. A worker writes on its pipe
to the master: a beat (``.``) every ``BEAT`` seconds, ``R`` once its server listens, ``Q``
when it retires by itself (after ``max_requests`` requests). The master respawns a worker that
dies, SIGKILLs one silent for ``timeout`` seconds, and takes gunicorn's signals: TERM
graceful, INT/QUIT quick, HUP reload (new workers first; the old stop gracefully once the new
listen, told by USR1: a TERM whose WebSockets close with 1012, service restart), TTIN/TTOU one
worker more/less (TTIN refused, with a log line, past ``max_workers``: gunicorn has no such
cap). A signal handler only queues the signal and writes a byte to a pipe the loop's
``select()`` watches; the loop does the work. A worker is forked with every signal blocked
and unblocks them once its own handlers are set: a TERM the master sends at once waits for
them, where it would run the master's handler in the child and be lost there.

Without ``preload`` the master never imports the app and every worker imports it, so a reload
runs new code; with ``preload`` the master imports it once and a reload forks the same app
(so in gunicorn: new code under ``--preload`` takes a restart).

Deliberately left out: gunicorn's ``--graceful-timeout`` (we SIGKILL after
``timeout_graceful_shutdown`` + ``DRAIN`` + 2 s), USR1/USR2/WINCH (reopen logs, re-exec the
master; our USR1 is the master's own), pid files, ``--user``, server hooks, and a fair share
of load: with one socket the least busy worker takes more; with ``reuse_port`` a retiring
worker's accept queue is lost.

Spec: no wire protocol of its own; POSIX process control as Python's ``os`` and ``signal``
expose it (``fork``, ``waitpid`` with ``WNOHANG``, ``SO_REUSEPORT``), and the ``signal``
module's rule that a Python handler runs in the main thread between bytecodes, at any point
of the loop: hence the queue.

Compare with: gunicorn/arbiter.py (``run``, ``manage_workers``, ``murder_workers``,
``reap_workers``, ``reload``, ``SIG_QUEUE``), gunicorn/workers/base.py for the worker's side
(see ``toyservers.worker_process``), uvicorn/supervisors/multiprocess.py.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from toyservers.config import Config
from toyservers.listeners import describe, listening_socket, release, where
from toyservers.worker_process import BOOT_ERROR, DRAIN, WorkerState, init_signals, run_worker

logger = logging.getLogger("toyservers.error")

BEAT = 1.0  # seconds between beats (shorter when the timeout is short: a quarter of it)
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
    replaced: bool = False  # a reload spawned its successor: it stops with USR1, not TERM


# --- master ---------------------------------------------------------------------------------------


def fork_blocked() -> tuple[int, set[int | signal.Signals]]:
    """``os.fork()`` with every signal blocked; the pid (0 in the child) and the signal mask
    before, which the master gets back at once and the child once its own handlers are set
    (``Arbiter.worker_main``). Until then the child has the master's handlers: a TERM the
    master sends at once would be queued in the child's copy of ``signals`` and never read."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    pid = -1
    try:
        pid = os.fork()
    finally:
        if pid:  # the master (or a fork that failed): its signals as before
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return pid, mask


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
        if not self.settings.reuse_port:  # TCP, a UNIX socket, an inherited or systemd's
            return listening_socket(config)
        sock = socket.socket(socket.AF_INET6 if ":" in config.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((config.host, config.port))
        return sock

    def run(self) -> int:
        """Serve until a TERM, INT or QUIT; the exit status."""
        self.sock = self.bind()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        for sig in MASTER_SIGNALS:
            signal.signal(sig, self.on_signal)
        scheme = "https" if self.config.ssl_certfile else "http"  # each worker wraps its own
        logger.info("Listening at: %s (%d)", describe(self.sock, scheme), os.getpid())
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
            release(self.config.uds)
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
            for worker in self.workers.values():
                worker.replaced = True
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
                self.retire(worker, signal.SIGUSR1 if worker.replaced else signal.SIGTERM)

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
        pid, mask = fork_blocked()
        if pid:
            os.close(beat_w)
            self.workers[pid] = Worker(pid, beats, self.ages)
            logger.info("Booting worker with pid: %d", pid)
            return
        status = 1
        try:
            status = self.worker_main(beats, beat_w, mask)
        except SystemExit:
            status = 0  # the master's QUIT while this worker booted
        except BaseException:
            logger.exception("worker %d failed", os.getpid())
        finally:
            logging.shutdown()
            os._exit(status)  # never return into the master's loop

    def worker_main(self, beats: int, beat_w: int, mask: Iterable[int]) -> int:
        """In the forked child, every signal blocked: undo the master's signals (the worker's
        own set, then ``mask``, the master's signal mask before the fork: what came since is
        handled now) and fds, then boot the worker."""
        for sig in MASTER_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        init_signals()
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a TERM that came: stopped, by default
        for fd in (beats, self.wake_r, self.wake_w, *(w.beats for w in self.workers.values())):
            os.close(fd)
        settings = self.settings
        me = WorkerState(beat_w, settings.max_requests, settings.max_requests_jitter)
        load_app = (lambda: self.app) if settings.preload else self.load_app
        return run_worker(self.module, self.interface, load_app, self.config, self.sock, me,
                          interval=self.interval, timeout=settings.timeout,
                          reuse_port=settings.reuse_port)


def run(module: ModuleType, interface: str, load_app: Callable[[], Any], config: Config,
        settings: Settings) -> None:
    """Block supervising ``config.workers`` workers; exit with the master's status."""
    try:
        status = Arbiter(module, interface, load_app, config, settings).run()
    except OSError as exc:
        logger.error("cannot listen on %s: %s", where(config), exc.strerror or exc)
        status = 1
    sys.exit(status)
