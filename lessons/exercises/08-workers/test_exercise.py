"""Checks for exercise 8 (a master that replaces dead workers). Run: ``make exercise N=8``.

Tests ``starter.py`` by default; ``EXERCISE_IMPL=solution`` tests the reference solution.
Each check starts the program on a free port, kills a worker with SIGKILL and waits for the
pool to be whole again, within a bound, polling (no sleep stands in for synchronisation). On
failure the message ends with the server's output, where a traceback from ``supervise`` is.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from bench.process import ServerProcess, free_port

IMPL = os.environ.get("EXERCISE_IMPL", "starter")
PATH = Path(__file__).with_name(f"{IMPL}.py")


@contextmanager
def started(workers: int) -> Iterator[ServerProcess]:
    port = free_port()
    argv = [sys.executable, str(PATH), str(port)]
    with ServerProcess(argv, port=port, env={"WORKERS": str(workers)}) as server:
        try:
            yield server
        except (AssertionError, OSError) as exc:  # the server's output says why (a traceback)
            raise AssertionError(f"{exc}\nserver output:\n{server.log_tail()}") from None


def ask(server: ServerProcess, timeout: float) -> int:
    """One request on a new connection; the pid of the worker that answered."""
    with socket.create_connection((server.host, server.port), timeout=timeout) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200 OK"), data
    return int(data.rpartition(b"pid ")[2])


def workers(server: ServerProcess) -> set[int]:
    """The pids of the master's live children (a reaped child is gone from the list)."""
    found = set()
    for child in psutil.Process(server.pid).children():
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                found.add(child.pid)
        except psutil.NoSuchProcess:
            pass
    return found


def test_a_new_worker_answers_within_a_second_after_a_kill() -> None:
    with started(workers=1) as server:
        first = ask(server, timeout=5)
        os.kill(first, signal.SIGKILL)
        # kill() returns before the worker is dead: a connection made meanwhile can still be
        # accept()ed by it and reset as it dies. Wait until it is gone, then ask.
        deadline = time.monotonic() + 1
        while first in workers(server):
            assert time.monotonic() < deadline, f"worker {first} still alive a second after kill"
            time.sleep(0.01)  # a poll interval
        try:
            # the connection waits in the master's backlog until a worker accept()s it
            second = ask(server, timeout=1)
        except OSError as exc:
            raise AssertionError(f"no answer within a second after the kill ({exc!r})") from None
        assert second != first


def test_the_pool_keeps_its_size() -> None:
    with started(workers=2) as server:
        deadline = time.monotonic() + 1  # the port opens before the master forks the workers
        while len(workers(server)) != 2:
            assert time.monotonic() < deadline, f"workers {workers(server)} at start"
            time.sleep(0.01)  # a poll interval
        for _ in range(2):  # twice: the replacement is a worker like the others
            before = workers(server)
            assert len(before) == 2, before
            victim = min(before)
            os.kill(victim, signal.SIGKILL)
            deadline = time.monotonic() + 1
            while (now := workers(server)) == before or len(now) != 2:
                assert time.monotonic() < deadline, (
                    f"workers {now} a second after killing {victim}")
                time.sleep(0.01)  # a poll interval, not a wait for something to happen
            assert victim not in now
