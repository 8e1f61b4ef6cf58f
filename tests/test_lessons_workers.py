"""Lesson 8 (pre-fork workers): its step programs run and show what the page says, and the
page's "Run it" server command runs as printed.

- Each step under ``lessons/code/08-workers/`` is started on a free port
  (``tests.test_lessons.step``); workers are found in the process table (the master's live
  children, via psutil) and killed with SIGKILL.
- Nothing waits with a sleep: each check polls the process table or the socket with a
  deadline, and a request sent while no worker accepts waits in the master's backlog.
- The toyserve command is cut out of ``lessons/08-workers.md`` and run with the port and
  ``.venv/bin/`` swapped for this test's (``tests.support.pages.started``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import time

import psutil
import pytest

from bench.process import ServerProcess
from tests.support.pages import blocks, run_tab, started
from tests.test_lessons import LESSONS, TIMEOUT, step

PAGE = LESSONS / "08-workers.md"
STEPS = "08-workers"


def ask(server: ServerProcess, timeout: float = TIMEOUT) -> int:
    """One request on a new connection; the pid of the worker that answered."""
    with socket.create_connection((server.host, server.port), timeout=timeout) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200 OK") and b"Connection: close" in data, data
    return int(data.rpartition(b"pid ")[2])


def workers(server: ServerProcess) -> set[int]:
    """The master's live children (a dead one that is not reaped yet does not count)."""
    found = set()
    for child in psutil.Process(server.pid).children():
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                found.add(child.pid)
        except psutil.NoSuchProcess:
            pass
    return found


def until(condition: object, seconds: float = 2.0) -> None:
    """Poll ``condition()`` (a callable) until it is true; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not true after {seconds} s"
        time.sleep(0.01)  # a poll interval


def test_step1_workers_share_the_socket_and_answer_with_their_pid() -> None:
    with step(f"{STEPS}/step1_prefork.py", env={"WORKERS": "2"}) as server:
        until(lambda: len(workers(server)) == 2)
        pool = workers(server)
        assert {ask(server) for _ in range(4)} <= pool  # only workers answer, never the master


def test_step1_a_killed_worker_is_not_replaced() -> None:
    with step(f"{STEPS}/step1_prefork.py", env={"WORKERS": "2"}) as server:
        until(lambda: len(workers(server)) == 2)
        first, last = sorted(workers(server))
        os.kill(first, signal.SIGKILL)
        until(lambda: workers(server) == {last})  # the pool shrank, and stays shrunk:
        assert ask(server) == last  # the survivor takes every connection
        assert workers(server) == {last}
        os.kill(last, signal.SIGKILL)
        assert server.proc is not None
        server.proc.wait(timeout=TIMEOUT)  # no child left to wait for: the master exits
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((server.host, server.port), timeout=TIMEOUT)


def test_step2_a_killed_worker_is_replaced() -> None:
    with step(f"{STEPS}/step2_respawn.py", env={"WORKERS": "1"}) as server:
        first = ask(server)
        os.kill(first, signal.SIGKILL)
        # kill() returns before the worker is dead: a connection made meanwhile can still be
        # accept()ed by it and then reset as it dies. Wait until it is gone, then ask.
        until(lambda: first not in workers(server))
        second = ask(server, timeout=1)  # waits in the backlog for the new worker
        assert second != first
        until(lambda: workers(server) == {second})


def test_run_it_toyserve_command_runs_as_printed() -> None:
    text = PAGE.read_text()
    match = re.search(r"^## Run it\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match
    server_command, curl = blocks(match.group(1), "sh")
    assert "--workers 2" in server_command
    with started(server_command) as server:
        until(lambda: len(workers(server)) == 2, seconds=TIMEOUT)
        if shutil.which("curl") is not None:
            out = run_tab("sh", curl, server.port)
            assert json.loads(out) == {"id": 1, "name": "ada", "email": "ada@example.com"}
