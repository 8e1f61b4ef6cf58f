"""Lesson 1, step 0a: a blocking echo server that serves one connection at a time.

Run: ``.venv/bin/python lessons/code/01-bytes/step0a_blocking.py 8000``, then connect with any
client. Nothing but the ``socket`` module: ``accept`` a connection, ``recv`` what the client
sends, ``sendall`` it back, until the client closes; then ``accept`` the next one.

While it loops on one client's ``recv``, nobody calls ``accept``: a second client's
connection waits in the kernel's listen queue, and its bytes in the kernel's receive buffer,
until the first client leaves. One slow or idle client holds everyone (step 0b fixes it with
threads, step 1 with an event loop).

Deliberately left out: everything HTTP (steps 2 to 5), timeouts, more than one client.
Spec: none yet; the socket calls are POSIX's (``man 2 accept``, ``man 2 recv``).
"""

from __future__ import annotations

import socket
import sys


# --8<-- [start:echo]
def handle(conn: socket.socket) -> None:
    """Send every chunk the client sends straight back, until the client closes its side."""
    while data := conn.recv(65536):  # blocks until bytes arrive; b"" once the client closed
        print(f"received {len(data)} bytes: {data!r}", flush=True)
        conn.sendall(data)  # blocks while the kernel's send buffer is full
# --8<-- [end:echo]


# --8<-- [start:serve]
def serve(port: int) -> None:
    """Accept connections on 127.0.0.1:``port`` and serve them one after the other, forever."""
    with socket.create_server(("127.0.0.1", port)) as listener:
        print(f"listening on http://127.0.0.1:{port}", flush=True)
        while True:
            conn, peer = listener.accept()  # the next connection in the kernel's queue
            print(f"connection from {peer}", flush=True)
            with conn:  # closes it when handle returns
                try:
                    handle(conn)
                except ConnectionError:
                    pass  # the client reset the connection: go on to the next one


if __name__ == "__main__":
    try:
        serve(int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
    except KeyboardInterrupt:
        pass
# --8<-- [end:serve]
