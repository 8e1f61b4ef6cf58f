"""Lesson 8 (pre-fork workers): its step programs run and show what the page says, and the
page's "Run it" commands run as printed.

- Each step under ``lessons/code/08-workers/`` is started on a free port
  (``tests.test_lessons.step``); workers are found in the process table (the master's live
  children, via psutil) and killed with SIGKILL.
- Nothing waits with a sleep: each check polls the process table or the socket with a
  deadline, and a request sent while no worker accepts waits in the master's backlog.
- The "Run it" commands are cut out of ``lessons/08-workers.md`` and run with the port and
  ``.venv/bin/`` swapped for this test's (``tests.support.pages``): the server and its curl,
  then the signals block, typed into one bash a line at a time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from bench.process import ServerProcess, free_port
from tests.support.pages import ROOT, blocks, localize, run_tab, section, started
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


def workers(master: int) -> set[int]:
    """The pids of ``master``'s live children (a dead one not reaped yet does not count)."""
    found = set()
    for child in psutil.Process(master).children():
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
        until(lambda: len(workers(server.pid)) == 2)
        pool = workers(server.pid)
        assert {ask(server) for _ in range(4)} <= pool  # only workers answer, never the master


def test_step1_a_killed_worker_is_not_replaced() -> None:
    with step(f"{STEPS}/step1_prefork.py", env={"WORKERS": "2"}) as server:
        until(lambda: len(workers(server.pid)) == 2)
        first, last = sorted(workers(server.pid))
        os.kill(first, signal.SIGKILL)
        until(lambda: workers(server.pid) == {last})  # the pool shrank, and stays shrunk:
        assert ask(server) == last  # the survivor takes every connection
        assert workers(server.pid) == {last}
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
        until(lambda: first not in workers(server.pid))
        second = ask(server, timeout=1)  # waits in the backlog for the new worker
        assert second != first
        until(lambda: workers(server.pid) == {second})


def test_run_it_toyserve_command_runs_as_printed() -> None:
    server_command, curl, _ = blocks(section(PAGE, "Run it"), "sh")  # the last: below
    assert "--workers 2" in server_command
    with started(server_command) as server:
        until(lambda: len(workers(server.pid)) == 2, seconds=TIMEOUT)
        if shutil.which("curl") is not None:
            out = run_tab("sh", curl, server.port)
            assert json.loads(out) == {"id": 1, "name": "ada", "email": "ada@example.com"}


def test_run_it_signal_commands_run_as_printed_one_line_at_a_time(tmp_path: Path) -> None:
    """The signals block, typed into one bash a line at a time as the page says; before each
    next line the test waits for what the previous line's comment promises: the workers it
    names in the process table (one snapshot per look: two can straddle a kill), and the
    master's "Booting worker" line of each new one, which the last check counts."""
    (_, _, typed) = blocks(section(PAGE, "Run it"), "sh")
    lines = localize(typed, free_port()).splitlines()
    assert len(lines) == 8 and lines[1] == "MASTER=$!", lines
    path = tmp_path / "terminal.log"
    log = path.open("w")
    shell = subprocess.Popen(["bash"], stdin=subprocess.PIPE, stdout=log, stderr=log,
                             cwd=ROOT, text=True)
    assert shell.stdin is not None

    def type_line(index: int) -> None:
        shell.stdin.write(lines[index] + "\n")  # type: ignore[union-attr]
        shell.stdin.flush()  # type: ignore[union-attr]

    def terminal() -> str:
        # Its own open file: a seek on the shell's would move the offset the shell and the
        # server write at (one open file description), so they could write over the log.
        return path.read_text()

    def pool_becomes(condition: Callable[[set[int]], bool]) -> set[int]:
        """Wait until ``condition`` holds for one snapshot of the master's live workers, then
        until the master logged booting each of them; that snapshot."""
        seen: list[set[int]] = []

        def holds() -> bool:
            seen.append(workers(pool))
            return condition(seen[-1])

        until(holds, TIMEOUT)
        now = seen[-1]
        until(lambda: all(f"Booting worker with pid: {pid}\n" in terminal() for pid in now),
              TIMEOUT)
        return now

    try:
        type_line(0)
        until(lambda: len(psutil.Process(shell.pid).children()) == 1, seconds=TIMEOUT)
        master = psutil.Process(shell.pid).children()[0]
        pool = master.pid
        first = pool_becomes(lambda now: len(now) == 2)
        until(lambda: "Listening at" in terminal(), TIMEOUT)
        type_line(1)
        type_line(2)  # ps --ppid $MASTER: a header, then one line per worker, its pid first
        until(lambda: "PID" in terminal() and all(
            re.search(rf"^ *{pid} ", terminal(), re.MULTILINE) for pid in first), TIMEOUT)
        type_line(3)  # TTIN
        (third,) = pool_becomes(lambda now: len(now) == 3) - first
        type_line(4)  # TTOU: the oldest leaves
        before = pool_becomes(lambda now: len(now) == 2 and third in now)
        type_line(5)  # HUP: two new, the old gone
        before = pool_becomes(lambda now: len(now) == 2 and not now & before)
        # pgrep -o also sees a worker that has exited but is not reaped yet: wait for the
        # master to reap the two the HUP retired, so the oldest child is a live one
        until(lambda: {c.pid for c in psutil.Process(pool).children()} == before, TIMEOUT)
        type_line(6)  # kill -9 the oldest worker: a replacement
        pool_becomes(lambda now: len(now) == 2 and len(now & before) == 1)
        type_line(7)  # TERM and wait
        until(lambda: not master.is_running() or master.status() == psutil.STATUS_ZOMBIE,
              TIMEOUT)
        shell.stdin.close()
        assert shell.wait(timeout=TIMEOUT) == 0, terminal()
        assert terminal().count("Booting worker") == 2 + 1 + 2 + 1, terminal()
    finally:
        if shell.poll() is None:
            for child in psutil.Process(shell.pid).children(recursive=True):
                child.kill()
            shell.kill()
        log.close()
