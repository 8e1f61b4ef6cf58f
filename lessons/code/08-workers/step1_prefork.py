"""Lesson 8, step 1: a pre-fork server on ``socket`` and ``os.fork()``.

Run: ``.venv/bin/python lessons/code/08-workers/step1_prefork.py 8000``, then
``curl http://127.0.0.1:8000/`` a few times: each answer names the pid of the worker that took the
connection. ``WORKERS`` (env var, default 2) is the number of workers.

The master binds and listens, then forks the workers; each inherits the listening socket and
loops on ``accept()``, and the kernel gives each connection to one of them. The master only
waits for its children with ``os.waitpid``. The problem: a worker that dies is not replaced
(``kill -9`` one and the pool shrinks; kill them all and the server is gone).

Deliberately left out: HTTP parsing (every request gets the same answer), keep-alive,
replacing dead workers (step 2), signals beyond TERM/INT, heartbeats, max-requests, reload.
Compare with: gunicorn/arbiter.py (``spawn_worker``), uvicorn/supervisors/multiprocess.py.
"""

from __future__ import annotations

import os
import signal
import socket
import sys

WORKERS = int(os.environ.get("WORKERS", "2"))


# --8<-- [start:worker]
def worker(listener: socket.socket) -> None:
    """Forever: take one connection, read the request head, answer with this pid, close."""
    body = f"pid {os.getpid()}\n".encode()
    response = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    while True:
        conn, _ = listener.accept()  # the kernel hands this connection to one accept()er
        with conn:
            conn.settimeout(5)
            data = b""
            try:
                while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
                    data += chunk
                conn.sendall(response)
            except OSError:
                pass  # a client that went away costs this worker nothing more
# --8<-- [end:worker]


# --8<-- [start:spawn]
def spawn(listener: socket.socket) -> int:
    """Fork one worker; in the child, run ``worker`` and never return."""
    pid = os.fork()
    if pid == 0:  # the child: the same program, a copy of the master's memory and sockets
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the master and us
        try:
            worker(listener)
        finally:
            os._exit(0)  # never run the master's code (its finally blocks, its loop)
    return pid
# --8<-- [end:spawn]


def stop(children: set[int]) -> None:
    for pid in children:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def on_stop(signum: int, frame: object) -> None:
    raise SystemExit(0)


# --8<-- [start:serve]
def serve(port: int) -> None:
    listener = socket.create_server(("127.0.0.1", port), backlog=128)  # bound once, here
    children = {spawn(listener) for _ in range(WORKERS)}
    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    print(f"Listening on http://127.0.0.1:{port}, workers {sorted(children)}", flush=True)
    try:
        while children:
            pid, status = os.waitpid(-1, 0)  # blocks until some child exits
            children.discard(pid)
            print(f"worker {pid} exited ({status}); {len(children)} left", flush=True)
    finally:
        stop(children)
# --8<-- [end:serve]


if __name__ == "__main__":
    serve(int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
