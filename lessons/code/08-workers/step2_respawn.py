"""Lesson 8, step 2: the master replaces every worker that dies.

Run: ``.venv/bin/python lessons/code/08-workers/step2_respawn.py 8000``;
``curl http://127.0.0.1:8000/`` names a worker's pid; ``kill -9`` that pid and ``curl`` again: a new
pid answers. ``WORKERS`` (env var, default 2).

Step 1's worker and ``spawn``, and one change in the master: when ``os.waitpid`` returns a
dead child, fork a new one in its place. The listening socket belongs to the master, so it
stays open while no worker accepts: connections that arrive meanwhile wait in its backlog and
the new worker answers them.

Deliberately left out: a worker that hangs without dying (heartbeats and a timeout), a
worker that keeps crashing at start (gunicorn stops the master: "Worker failed to boot"),
signals beyond TERM/INT, max-requests, reload.
Compare with: gunicorn/arbiter.py (``reap_workers``, ``manage_workers``),
uvicorn/supervisors/multiprocess.py (``keep_subprocess_alive``).
"""

from __future__ import annotations

import os
import signal
import socket
import sys

from step1_prefork import WORKERS, on_stop, spawn, stop


# --8<-- [start:serve]
def serve(port: int) -> None:
    listener = socket.create_server(("127.0.0.1", port), backlog=128)
    children = {spawn(listener) for _ in range(WORKERS)}
    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    print(f"Listening on http://127.0.0.1:{port}, workers {sorted(children)}", flush=True)
    try:
        while True:
            pid, status = os.waitpid(-1, 0)
            children.discard(pid)
            new = spawn(listener)  # the pool keeps its size
            children.add(new)
            print(f"worker {pid} exited ({status}); worker {new} replaces it", flush=True)
    finally:
        stop(children)
# --8<-- [end:serve]


if __name__ == "__main__":
    serve(int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
