"""Exercise 8, starter: replace the workers that die, stop when they cannot boot.

Lesson 8's step 2 replaces every worker that dies. That is right for a worker that a bug or
the kernel's OOM killer took down after it booted, and wrong for one that dies as it boots:
when the app cannot load (a deploy shipped a syntax error, a setting is missing), the
replacement dies the same way, and step 2's master forks in a loop, a new worker as fast as
each can start and fail, while nothing serves. gunicorn's answer: a worker that cannot boot
exits with status 3 (``WORKER_BOOT_ERROR``), and a master that reaps one stops the whole
server with the same status and "Worker failed to boot.", for whoever started it to read.

Here each worker boots by loading the app from the file ``APP`` (env var; default
``hello_app.py`` beside this file) and taking its ``GREETING``; when that raises, the worker
exits with ``WORKER_BOOT_ERROR``. A worker that booted answers every request with its greeting
and its pid, except ``GET /crash``, which makes it exit with status 1 on the spot (a bug that
kills a worker after it booted).

YOUR TASK: write the body of ``supervise`` below (look for "EXERCISE"). Check your work with
``make exercise N=8``; the failures tell you what is still wrong. Try it by hand:
``.venv/bin/python lessons/exercises/08-workers/starter.py 8000``, then
``curl http://127.0.0.1:8000/`` names a pid; ``kill -9`` it and ``curl`` again; then put a
syntax error in ``hello_app.py``, kill a worker once more, and read the master's last lines
(``git checkout lessons/exercises/08-workers/hello_app.py`` mends it).

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
    # ---- EXERCISE: replace the line below with your code. ----------------------------------
    # Hints: os.waitpid(-1, 0) blocks until some child exits and returns (pid, status), and
    # status is a wait status, not the exit status (read os.waitpid's documentation, then
    # os.waitstatus_to_exitcode's). Step 2's serve (lessons/code/08-workers/step2_respawn.py)
    # has the loop that replaces every worker.
    raise NotImplementedError("exercise 8: write supervise()")
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
