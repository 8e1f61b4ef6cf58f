"""Exercise 8, starter: make the master replace every worker that dies.

Lesson 8's step 1 forks ``WORKERS`` workers that ``accept()`` on the master's listening
socket, and the master only waits: kill a worker and the pool shrinks for good. Here the
master's waiting is the function ``supervise(listener, children)``: it must wait for the
children forever and, for each one that exits, fork a new worker with ``spawn(listener)``,
keeping ``children`` (the set of live worker pids) up to date.

YOUR TASK: write the body of ``supervise`` below (look for "EXERCISE"). Check your work with
``make exercise N=8``; the check kills a worker with SIGKILL and expects a new pid to answer
within a second. Try it by hand:
``.venv/bin/python lessons/exercises/08-workers/starter.py 8000``, then
``curl http://127.0.0.1:8000/`` names a pid; ``kill -9`` it and ``curl`` again.

Compare with: gunicorn/arbiter.py (``reap_workers``, ``manage_workers``).
"""

from __future__ import annotations

import os  # noqa: F401  (for your supervise)
import signal
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "code" / "08-workers"))
from step1_prefork import WORKERS, on_stop, spawn, stop  # noqa: E402  (lesson 8, step 1)


# --8<-- [start:exercise]
def supervise(listener: socket.socket, children: set[int]) -> None:
    """Wait for the workers forever; fork a new one for each that exits."""
    # EXERCISE: loop on os.waitpid(-1, 0), which blocks until some child exits and returns
    # (pid, status); take the pid out of ``children`` and add the pid of a new worker,
    # ``spawn(listener)``. Step 1's serve (lessons/code/08-workers/step1_prefork.py) has the
    # loop without the second half.
    raise NotImplementedError("exercise 8: write supervise() so dead workers are replaced")
# --8<-- [end:exercise]


def serve(port: int) -> None:
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
