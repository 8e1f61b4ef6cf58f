"""Exercise 8, a plausible wrong answer: the wait status read as the exit status.

``os.waitpid`` returns ``(pid, status)``, and ``status == WORKER_BOOT_ERROR`` reads as the
obvious test. But ``status`` is a wait status, the exit status shifted left by 8 bits
(exit status 3 arrives as 768), or the signal that killed the process: it is never 3 for a
worker that exited with 3. So this master replaces every worker, those that cannot boot too,
and forks in a loop. ``EXERCISE_IMPL=wrong make exercise N=8`` shows what a student who wrote
it reads; ``tests/test_exercises.py`` checks that it fails with this hint:

Fails: test_workers_that_cannot_boot_stop_the_master_with_status_3: AssertionError: the master
"""

from __future__ import annotations

import os
import runpy
import signal
import socket
import sys
import traceback
from pathlib import Path

WORKERS = int(os.environ.get("WORKERS", "2"))
"""How many workers the master keeps."""

APP = Path(os.environ.get("APP", Path(__file__).with_name("hello_app.py")))
"""The app each worker loads as it boots: a Python file that defines ``GREETING``."""

WORKER_BOOT_ERROR = 3
"""A worker's exit status when it could not boot (gunicorn's ``Arbiter.WORKER_BOOT_ERROR``)."""


def boot() -> bytes:
    """Load the app: ``APP``'s ``GREETING``, encoded. Raises whatever loading it raises."""
    return str(runpy.run_path(str(APP))["GREETING"]).encode()


def worker(listener: socket.socket, greeting: bytes) -> None:
    """Forever: take one connection, read the request head, answer with the greeting and this
    pid, close. ``GET /crash`` ends this process with status 1 instead."""
    body = b"%s from pid %d\n" % (greeting, os.getpid())
    response = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    while True:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(5)
            data = b""
            try:
                while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
                    data += chunk
                if data.startswith(b"GET /crash "):
                    os._exit(1)  # a bug that kills a worker which had booted
                conn.sendall(response)
            except OSError:
                pass


def spawn(listener: socket.socket) -> int:
    """Fork one worker; in the child, boot, then serve, and never return."""
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            greeting = boot()
        except Exception:
            traceback.print_exc()
            print(f"worker {os.getpid()} failed to boot", flush=True)
            os._exit(WORKER_BOOT_ERROR)
        try:
            worker(listener, greeting)
        finally:
            os._exit(0)
    return pid


# --8<-- [start:exercise]
def supervise(listener: socket.socket, children: set[int]) -> None:
    """Wait for the workers forever: replace each one that exits, unless it exited with
    ``WORKER_BOOT_ERROR``; then print why and raise ``SystemExit(WORKER_BOOT_ERROR)``
    (``serve`` stops the other workers on the way out). ``children``: the live workers' pids,
    kept up to date."""
    while True:
        pid, status = os.waitpid(-1, 0)
        children.discard(pid)
        if status == WORKER_BOOT_ERROR:
            print(f"worker {pid} failed to boot: stopping (Worker failed to boot.)",
                  flush=True)
            raise SystemExit(WORKER_BOOT_ERROR)
        new = spawn(listener)
        children.add(new)
        print(f"worker {pid} exited ({status}); worker {new} replaces it", flush=True)
# --8<-- [end:exercise]


def stop(children: set[int]) -> None:
    """SIGTERM every worker that is still there."""
    for pid in children:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def on_stop(signum: int, frame: object) -> None:
    raise SystemExit(0)


def serve(port: int) -> None:
    """Bind, fork ``WORKERS`` workers, supervise them; stop them however that ends."""
    listener = socket.create_server(("127.0.0.1", port), backlog=128)
    children = {spawn(listener) for _ in range(WORKERS)}
    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    print(f"Listening on http://127.0.0.1:{port}, workers {sorted(children)}", flush=True)
    try:
        supervise(listener, children)
    finally:
        stop(children)


if __name__ == "__main__":
    serve(int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
