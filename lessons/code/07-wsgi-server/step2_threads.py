"""Lesson 7, step 2: a pool of threads runs the connections (the idea of gunicorn's gthread).

Run: ``.venv/bin/python lessons/code/07-wsgi-server/step2_threads.py 8000`` (``THREADS``, default 4;
``KEEP_ALIVE_SECONDS``, default 5). ``/slow`` no longer holds ``/fast`` back: each connection gets a
thread of its own from the pool, and keeps it while the client keeps the connection alive. That is
the new problem: a client that sends one request and then stays idle holds a thread, doing nothing,
until KEEP_ALIVE_SECONDS pass; open THREADS idle connections and the next client waits.

The main thread only accepts; ``handle`` runs on a pool thread and is step 1's loop for one
connection, repeated while the answers keep it alive.

Deliberately left out: everything step 1 leaves out; a separate deadline for a request that
has started (one socket timeout covers idle and slow clients alike); graceful shutdown.
Spec: PEP 3333 (``wsgi.multithread``: "the application object may be simultaneously invoked
by another thread in the same process"); RFC 9112 §9.3 (persistence).
"""

from __future__ import annotations

import concurrent.futures
import os
import socket
import sys
from wsgiref.types import WSGIApplication

from step1_blocking import Reader, app, read_request, run_app

THREADS = int(os.environ.get("THREADS", "4"))  # threads that run connections
KEEP_ALIVE_SECONDS = float(os.environ.get("KEEP_ALIVE_SECONDS", "5"))  # idle time allowed


# --8<-- [start:handle]
def handle(app: WSGIApplication, sock: socket.socket, client: tuple[str, int],
           server: tuple[str, int]) -> None:
    """On a pool thread: answer requests on one connection until it closes or idles."""
    with sock:
        sock.settimeout(KEEP_ALIVE_SECONDS)  # an idle client is dropped after this
        reader = Reader(sock)
        try:
            while (environ := read_request(reader, server, client)) is not None:
                if not run_app(app, environ, sock, keep_alive=True):
                    break
        except TimeoutError:
            pass  # idle too long: close without a word
        except Exception as exc:
            print(f"dropped {client}: {exc!r}", file=sys.stderr, flush=True)
# --8<-- [end:handle]


# --8<-- [start:serve]
def serve(app: WSGIApplication, port: int) -> None:
    """Accept forever; each connection goes to the pool, and waits there for a free thread."""
    with socket.create_server(("127.0.0.1", port)) as listener, \
            concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        print(f"listening on http://127.0.0.1:{port}", flush=True)
        while True:
            sock, client = listener.accept()
            pool.submit(handle, app, sock, client, listener.getsockname())
# --8<-- [end:serve]


if __name__ == "__main__":
    try:
        serve(app, int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
    except KeyboardInterrupt:  # without this, the exit would wait for every idle connection
        os._exit(0)
