"""Exercise 8, reference solution: the master replaces every worker that dies.

See ``starter.py`` for the task.
Run: ``.venv/bin/python lessons/exercises/08-workers/solution.py 8000``.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "code" / "08-workers"))
from step1_prefork import WORKERS, on_stop, spawn, stop  # noqa: E402  (lesson 8, step 1)


# --8<-- [start:exercise]
def supervise(listener: socket.socket, children: set[int]) -> None:
    """Wait for the workers forever; fork a new one for each that exits."""
    while True:
        pid, status = os.waitpid(-1, 0)
        children.discard(pid)
        children.add(spawn(listener))
        print(f"worker {pid} exited ({status}); replaced", flush=True)
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
