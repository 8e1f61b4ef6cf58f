"""Lesson 1, step 0b: the blocking echo server of step 0a, with one thread per connection.

Run: ``.venv/bin/python lessons/code/01-bytes/step0b_threads.py 8000``. ``handle`` is step 0a's,
unchanged; only ``serve`` differs: it hands each accepted connection to a new thread and goes
straight back to ``accept``. A slow client now holds only its own thread.

The price: one thread per connection, each with its own stack (8 MiB of address space by
default on Linux), and the kernel switching between them. Ten thousand idle keep-alive
connections are ten thousand threads. Step 1 serves them all from one thread instead.

Deliberately left out: a cap on the number of threads (a pool, as in lesson 7), timeouts.
Spec: none yet; ``threading`` from the standard library.
"""

from __future__ import annotations

import socket
import sys
import threading

from step0a_blocking import handle  # the same per-connection code as step 0a


# --8<-- [start:serve]
def serve_one(conn: socket.socket) -> None:
    """Run step 0a's ``handle`` on one connection, then close it (in its own thread)."""
    with conn:
        try:
            handle(conn)
        except ConnectionError:
            pass


def serve(port: int) -> None:
    """Accept connections on 127.0.0.1:``port``; serve each one in a new thread."""
    with socket.create_server(("127.0.0.1", port)) as listener:
        print(f"listening on http://127.0.0.1:{port}", flush=True)
        while True:
            conn, peer = listener.accept()
            print(f"connection from {peer}", flush=True)
            # daemon: Ctrl-C ends the program without waiting for connected clients
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()
# --8<-- [end:serve]


if __name__ == "__main__":
    try:
        serve(int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
    except KeyboardInterrupt:
        pass
