"""Lesson 7, step 3: the main thread watches idle connections; only requests hold a thread.

Run: ``.venv/bin/python lessons/code/07-wsgi-server/step3_selector.py 8000`` (``THREADS``, default
4; ``KEEP_ALIVE_SECONDS``, default 5). Open more idle keep-alive connections than there are threads:
a new client is still answered at once, because an idle connection is a file descriptor in a
selector, not a thread. This is gunicorn's gthread worker, and toy-wsgi's
``--worker-class gthread``.

The main thread waits in ``selector.select()`` on the listening socket, every idle
connection, and a socket pair the pool threads use to wake it. A readable connection (a
request is coming, or the client closed) leaves the selector and goes to the pool; once
answered, and with nothing pipelined behind it, it comes back through a queue. Idle
connections past their deadline are closed by the main thread.

Deliberately left out: everything step 1 leaves out; a deadline for the rest of a request
once its first byte came (toy-wsgi has ``timeout_headers`` and ``timeout_body``), graceful
shutdown.
Spec: PEP 3333 (``wsgi.multithread``); RFC 9112 §9.3 (persistence), §9.5 (closing an idle
connection).
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import selectors
import socket
import sys
import time
from wsgiref.types import WSGIApplication

from step1_blocking import Reader, app, read_request, run_app

THREADS = int(os.environ.get("THREADS", "4"))  # threads that run requests
KEEP_ALIVE_SECONDS = float(os.environ.get("KEEP_ALIVE_SECONDS", "5"))  # idle time allowed
REQUEST_SECONDS = 10.0  # a started request must arrive within this (step 2 had one timeout)


class Connection(Reader):
    """A client connection: step 1's Reader, plus who it is and when it expires if idle."""

    def __init__(self, sock: socket.socket, client: tuple[str, int]) -> None:
        super().__init__(sock)
        self.client, self.deadline = client, 0.0


# --8<-- [start:work]
returned: queue.SimpleQueue[Connection] = queue.SimpleQueue()  # from the pool, to be watched
wake_r, wake_w = socket.socketpair()  # a pool thread writes a byte: the selector wakes up


def work(app: WSGIApplication, conn: Connection, server: tuple[str, int]) -> None:
    """On a pool thread: answer the requests that are there, then hand the connection back."""
    conn.sock.settimeout(REQUEST_SECONDS)
    try:
        while (environ := read_request(conn, server, conn.client)) is not None:
            if not run_app(app, environ, conn.sock, keep_alive=True):
                break
            if not conn.buffer:  # nothing pipelined: back to the main thread, holding no thread
                returned.put(conn)
                wake_w.send(b"\0")
                return
    except Exception as exc:
        print(f"dropped {conn.client}: {exc!r}", file=sys.stderr, flush=True)
    conn.sock.close()
# --8<-- [end:work]


# --8<-- [start:serve]
def serve(app: WSGIApplication, port: int) -> None:
    """The main thread: accept, watch idle connections, hand readable ones to the pool."""
    selector = selectors.DefaultSelector()
    idle: set[Connection] = set()

    def watch(conn: Connection) -> None:
        conn.deadline = time.monotonic() + KEEP_ALIVE_SECONDS
        selector.register(conn.sock, selectors.EVENT_READ, conn)
        idle.add(conn)

    def unwatch(conn: Connection) -> None:
        selector.unregister(conn.sock)
        idle.discard(conn)

    with socket.create_server(("127.0.0.1", port)) as listener, \
            concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        selector.register(listener, selectors.EVENT_READ)
        selector.register(wake_r, selectors.EVENT_READ)
        print(f"listening on http://127.0.0.1:{port}", flush=True)
        while True:
            now = time.monotonic()
            timeout = min((conn.deadline - now for conn in idle), default=1.0)
            for key, _ in selector.select(max(timeout, 0)):
                if key.fileobj is listener:  # a new client: watched until it sends
                    watch(Connection(*listener.accept()))
                elif key.fileobj is wake_r:  # answered connections coming back
                    wake_r.recv(4096)
                    while not returned.empty():
                        watch(returned.get())
                else:  # a request is coming (or a close): a pool thread takes it
                    unwatch(key.data)
                    pool.submit(work, app, key.data, listener.getsockname())
            for conn in [c for c in idle if c.deadline <= time.monotonic()]:
                unwatch(conn)  # idle too long: close without a word
                conn.sock.close()
# --8<-- [end:serve]


if __name__ == "__main__":
    try:
        serve(app, int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
    except KeyboardInterrupt:  # the pool's threads may be inside a slow app
        os._exit(0)
