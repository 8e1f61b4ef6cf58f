"""Exercise 8, solution: replace the workers that die, stop when they cannot boot.

See ``starter.py`` for the task. Run it with
``.venv/bin/python lessons/exercises/08-workers/solution.py 8000``; ``curl
http://127.0.0.1:8000/`` names a pid, ``kill -9`` it and a new pid answers; with a syntax error
in ``hello_app.py``, the next worker that boots fails and the master exits with status 3.

Compare with: gunicorn/arbiter.py (``reap_workers``: ``WORKER_BOOT_ERROR``, ``HaltServer``),
toyservers/workers.py (``Arbiter.reap``).
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
        code = os.waitstatus_to_exitcode(status)  # the exit status, or -N for signal N
        if code == WORKER_BOOT_ERROR:
            print(f"worker {pid} failed to boot: stopping (Worker failed to boot.)",
                  flush=True)
            raise SystemExit(WORKER_BOOT_ERROR)
        new = spawn(listener)
        children.add(new)
        print(f"worker {pid} exited ({code}); worker {new} replaces it", flush=True)
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
