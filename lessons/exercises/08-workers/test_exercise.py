"""Checks for exercise 8 (replace dead workers, stop when they cannot boot). Run:
``make exercise N=8``.

Tests ``starter.py`` by default; ``EXERCISE_IMPL=solution`` tests the reference solution.
Each check starts the program on a free port with an app file of its own (``APP``), kills or
crashes a worker or breaks the app, and waits for the outcome within a bound, polling (no
sleep stands in for synchronisation). On failure the message ends with the master's output,
where a traceback from ``supervise`` is.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from bench.process import ServerProcess, free_port, kill_tree, wait_for_port

IMPL = os.environ.get("EXERCISE_IMPL", "starter")
PATH = Path(__file__).with_name(f"{IMPL}.py")
GOOD = 'GREETING = "hello"\n'
BROKEN = "GREETING = \n"  # a syntax error: what a bad deploy ships
BOOT_ERROR = 3
BOUND = 5.0  # seconds: far more than a fork and a boot take


@pytest.fixture
def app(tmp_path: Path) -> Path:
    path = tmp_path / "app.py"
    path.write_text(GOOD)
    return path


@contextmanager
def started(app: Path, workers: int) -> Iterator[ServerProcess]:
    port = free_port()
    argv = [sys.executable, str(PATH), str(port)]
    env = {"WORKERS": str(workers), "APP": str(app)}
    with ServerProcess(argv, port=port, env=env) as server:
        try:
            yield server
        except (AssertionError, OSError) as exc:  # the server's output says why (a traceback)
            raise AssertionError(f"{exc}\nmaster's output:\n{server.log_tail()}") from None


def ask(server: ServerProcess, timeout: float, path: str = "/") -> bytes:
    """One request on a new connection; everything the server sent back."""
    with socket.create_connection((server.host, server.port), timeout=timeout) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


def pid_of(answer: bytes) -> int:
    """The pid of the worker that wrote ``answer`` (``hello from pid N``)."""
    assert answer.startswith(b"HTTP/1.1 200 OK") and b" from pid " in answer, answer
    return int(answer.rpartition(b"pid ")[2])


def alive(pid: int) -> bool:
    """``pid`` runs (a zombie, dead but not reaped yet, does not count)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def workers(server: ServerProcess) -> set[int]:
    """The pids of the master's live children."""
    return {child.pid for child in psutil.Process(server.pid).children() if alive(child.pid)}


def wait_until(condition: object, what: str) -> None:
    """Poll ``condition()`` until true; AssertionError(``what``) after :data:`BOUND`."""
    deadline = time.monotonic() + BOUND
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.01)  # a poll interval


def test_a_killed_worker_is_replaced(app: Path) -> None:
    with started(app, workers=1) as server:
        first = pid_of(ask(server, timeout=5))
        os.kill(first, signal.SIGKILL)
        # kill() returns before the worker is dead: a connection made meanwhile can still be
        # accept()ed by it and reset as it dies. Wait until it is gone, then ask.
        wait_until(lambda: not alive(first), f"worker {first} still alive after SIGKILL")
        try:
            # the connection waits in the master's backlog until a worker accept()s it
            second = pid_of(ask(server, timeout=BOUND))
        except OSError as exc:
            raise AssertionError(f"no answer after the kill ({exc!r}): was the killed "
                                 "worker replaced?") from None
        assert second != first


def test_the_pool_keeps_its_size(app: Path) -> None:
    with started(app, workers=2) as server:
        # the port opens before the master forks the workers
        wait_until(lambda: len(workers(server)) == 2, "two workers at start")
        for _ in range(2):  # twice: the replacement is a worker like the others
            before = workers(server)
            victim = min(before)
            os.kill(victim, signal.SIGKILL)
            wait_until(lambda before=before: (now := workers(server)) != before and len(now) == 2,
                       f"workers {workers(server)} after killing {victim}: two expected")
            assert victim not in workers(server)


def test_a_worker_that_crashes_after_booting_is_replaced(app: Path) -> None:
    with started(app, workers=1) as server:
        first = pid_of(ask(server, timeout=5))
        assert ask(server, timeout=5, path="/crash") == b""  # the worker exits with status 1
        wait_until(lambda: not alive(first), f"worker {first} still alive after /crash")
        assert server.proc is not None
        try:
            second = pid_of(ask(server, timeout=BOUND))
        except OSError:
            status = server.proc.poll()
            raise AssertionError(
                f"no answer after a worker exited with status 1 (the master's status: "
                f"{status}): only WORKER_BOOT_ERROR (3) says the app cannot boot; a worker "
                "that booted and then died is replaced") from None
        assert second != first


@contextmanager
def master(app: Path, workers: int) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """The program started by hand, for the checks where it must exit: (process, its log)."""
    port = free_port()
    log = app.with_name("master.log")
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(PATH), str(port)], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONUNBUFFERED": "1",
                                     "WORKERS": str(workers), "APP": str(app)})
    try:
        yield proc, log
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid, grace=1)
        proc.wait(timeout=10)


def exit_status(proc: subprocess.Popen[bytes], log: Path) -> int:
    """Wait up to :data:`BOUND` for the master to exit; its status, or AssertionError with
    the hint for a master still forking."""
    try:
        return proc.wait(timeout=BOUND)
    except subprocess.TimeoutExpired:
        failures = log.read_text(errors="replace").count("failed to boot")
        raise AssertionError(
            f"the master still runs {BOUND:g} s after its workers began to fail to boot "
            f"({failures} boot failures in its output): a worker that exits with "
            "WORKER_BOOT_ERROR must stop the master with that status. os.waitpid's status "
            "is a wait status, not the exit status (exit status 3 is 768, 3 << 8): "
            "os.waitstatus_to_exitcode(status) gives 3") from None


def stopped_for_boot_errors(proc: subprocess.Popen[bytes], log: Path) -> None:
    """The master exits with ``WORKER_BOOT_ERROR`` within :data:`BOUND` (AssertionError
    with a hint otherwise)."""
    status = exit_status(proc, log)
    tail = log.read_text(errors="replace")[-2000:]
    assert status == BOOT_ERROR, (
        f"the master exited with status {status}, not {BOOT_ERROR}: raise "
        f"SystemExit(WORKER_BOOT_ERROR), so whoever started it can tell why\n{tail}")


def test_workers_that_cannot_boot_stop_the_master_with_status_3(app: Path) -> None:
    app.write_text(BROKEN)
    with master(app, workers=2) as (proc, log):
        stopped_for_boot_errors(proc, log)


def test_a_deploy_that_breaks_the_app_stops_the_whole_server(app: Path) -> None:
    with master(app, workers=2) as (proc, log):
        port = int(proc.args[2])  # type: ignore[index]
        wait_for_port("127.0.0.1", port, BOUND, proc)
        deadline = time.monotonic() + BOUND
        while len(pool := [c.pid for c in psutil.Process(proc.pid).children()]) < 2:
            assert time.monotonic() < deadline, f"workers {pool} at start"
            time.sleep(0.01)  # a poll interval
        app.write_text(BROKEN)  # the deploy
        os.kill(pool[0], signal.SIGKILL)  # its replacement loads the broken app
        stopped_for_boot_errors(proc, log)
        # the healthy worker must not go on serving the old app on its own
        deadline = time.monotonic() + BOUND
        while alive(pool[1]):
            assert time.monotonic() < deadline, (
                f"worker {pool[1]} still serves after the master stopped: stop the others "
                "on the way out (serve's finally does, if supervise raises)")
            time.sleep(0.01)  # a poll interval
