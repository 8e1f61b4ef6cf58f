"""Start a server as a subprocess on a free port, wait until it answers, stop its whole tree.

Shared by ``bench`` and the tests: readiness is polled (a TCP connect every few ms until a
deadline), never slept; stopping sends SIGTERM to the process and all its children (granian
and gunicorn fork workers), then SIGKILL to whatever is left after a grace period.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import psutil


class ServerStartError(RuntimeError):
    """The server exited or never accepted a connection; the message ends with its log tail."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def process_tree(pid: int) -> list[psutil.Process]:
    """Process ``pid`` and all its descendants (granian's and gunicorn's workers), or [] once
    it is gone."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def wait_for_port(host: str, port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None
                  ) -> None:
    """Poll until ``host:port`` accepts a TCP connection (given ``proc``: one that ``proc``'s
    process tree listens for, see :data:`FOREIGN_GRACE`).

    Raises:
        TimeoutError: nothing accepted within ``timeout`` seconds.
        ChildProcessError: ``proc`` exited first (as it does when another process took its
            port).
    """
    deadline = time.monotonic() + timeout
    foreign_until: float | None = None  # how long an answer from another process is doubted
    while True:
        if proc is not None and proc.poll() is not None:
            raise ChildProcessError(f"exited with status {proc.returncode}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                pass
        except OSError:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"nothing accepted on {host}:{port} in {timeout:g} s") from None
        else:
            # The port was free when picked, but another process (a test running beside this
            # one) may have bound it first: then ``proc`` fails to bind and exits. Wait for
            # ``proc``'s own listener, or its exit, a while (FOREIGN_GRACE); then take it.
            if proc is None or listens(proc.pid, port):
                return
            now = time.monotonic()
            foreign_until = foreign_until or now + FOREIGN_GRACE
            if now >= foreign_until:
                return
        time.sleep(0.02)  # polling interval, not synchronisation


#: Seconds :func:`wait_for_port` waits for the started process's own listener when the port
#: answers but no process of its tree listens on it (then the process normally exits).
FOREIGN_GRACE = 5.0


def listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` or one of its descendants has a TCP socket listening on
    ``port`` (psutil; False once the process is gone)."""
    for process in process_tree(pid):
        try:
            sockets = process.net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if any(s.status == psutil.CONN_LISTEN and s.laddr and s.laddr.port == port
               for s in sockets):
            return True
    return False


def kill_tree(pid: int, grace: float = 5.0) -> None:
    """SIGTERM ``pid`` and its descendants; SIGKILL what is still alive after ``grace`` seconds."""
    procs = process_tree(pid)
    for proc in procs:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace)


def tree_rss(pid: int) -> int:
    """Resident set size of ``pid`` and all its descendants, bytes (0 if it is gone)."""
    total = 0
    for proc in process_tree(pid):
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def tree_cpu_seconds(pid: int) -> float:
    """User plus system CPU time of ``pid`` and all its descendants, seconds (0.0 if it is
    gone); the children it has already reaped count too (a worker that was recycled)."""
    total = 0.0
    for proc in process_tree(pid):
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


class ServerProcess:
    """A server subprocess: ``with ServerProcess(argv, port=p) as server: ...``.

    Output (stdout and stderr) goes to a log file; ``log_tail()`` returns its last lines.
    ``cpu`` pins the server (and the children it forks) to that CPU with ``taskset``-like
    affinity. Entering waits up to ``startup_timeout`` seconds for the port to accept.

    Raises:
        ServerStartError: on enter, when the server exits or never listens.
    """

    def __init__(self, argv: Sequence[str], *, host: str = "127.0.0.1", port: int,
                 cwd: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None,
                 cpu: int | None = None, startup_timeout: float = 20.0,
                 log_path: Path | None = None) -> None:
        self.argv = list(argv)
        self.host = host
        self.port = port
        self.cwd = cwd
        self.env = env
        self.cpu = cpu
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        if log_path is None:
            handle, name = tempfile.mkstemp(prefix="server-", suffix=".log")
            os.close(handle)
            log_path = Path(name)
        self.log_path = log_path

    @property
    def pid(self) -> int:
        assert self.proc is not None, "server not started"
        return self.proc.pid

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        """:meth:`launch`, then :meth:`wait_ready`."""
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Start the process and return at once (several servers can then start together)."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(self.env or {})}
        cpu = self.cpu if hasattr(os, "sched_setaffinity") else None  # Linux-only

        def pin() -> None:
            if cpu is not None:
                os.sched_setaffinity(0, {cpu})

        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.cwd, env=env, preexec_fn=pin if cpu is not None else None,
            )

    def wait_ready(self) -> None:
        """Wait until the launched server accepts a connection.

        Raises:
            ServerStartError: it exited or did not listen within ``startup_timeout`` seconds
                (it is stopped; the message ends with its log tail).
        """
        assert self.proc is not None, "wait_ready before launch"
        try:
            wait_for_port(self.host, self.port, self.startup_timeout, self.proc)
        except (TimeoutError, ChildProcessError) as exc:
            self.stop()
            raise ServerStartError(f"{exc}\n{self.log_tail()}") from None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            kill_tree(self.proc.pid)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def rss(self) -> int:
        """RSS of the server's whole process tree, bytes."""
        return tree_rss(self.pid)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
