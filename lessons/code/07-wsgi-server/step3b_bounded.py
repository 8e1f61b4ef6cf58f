"""Lesson 7, step 3b: step 3 with a deadline, a limit and flow control's bound put back.

Run: ``.venv/bin/python lessons/code/07-wsgi-server/step3b_bounded.py 8000`` (``THREADS``,
default 4; ``KEEP_ALIVE_SECONDS``, default 5; ``REQUEST_SECONDS``, default 10; ``SEND_SECONDS``,
default 10; ``MAX_BODY``, bytes, default 1 MiB), then
``curl -i -X POST -H 'Content-Length: 2000000' http://127.0.0.1:8000/``: 413 at once.

Step 3 bounds a request with the socket's timeout, which is the wrong measure twice over, and
reads any body it is sent. Each has a hostile client (``tests/test_lessons_wsgi_server.py``
runs each one against both steps):

- **A deadline.** ``settimeout`` bounds each ``recv()``, and every byte starts it again: a
  client that sends a byte every few seconds (slowloris) holds a pool thread for ever. Here a
  request has ``REQUEST_SECONDS`` from its first byte to the end of its body, whatever arrives
  meanwhile, then 408.
- **A limit.** A body longer than ``MAX_BODY`` gets 413 as soon as its Content-Length is read,
  before a byte of it is buffered.
- **Flow control.** A blocking ``sendall`` waits while the client reads nothing: the kernel's
  TCP flow control holds the thread to the client's pace, for free. What it needs is a bound
  on a stall, not on the whole transfer: a ``sendall`` timeout is the total time for all the
  data, so step 3 both cut off a slow reader whose one large write took longer than
  ``REQUEST_SECONDS`` and left a client that reads nothing holding a thread as long. Here the
  response goes out in pieces of ``PIECE`` bytes, ``SEND_SECONDS`` each: a client that keeps
  reading gets all of it, one that stops is dropped, and its thread is free.

``/big?mib=N`` answers N MiB of zeros: a response larger than the kernel's buffers.

Deliberately left out (toy-wsgi has each but the last): chunked request bodies; separate
deadlines for the head and the body; a lingering close after an error; graceful shutdown; a
limit on connections (gunicorn's ``worker_connections``).
Spec: PEP 3333; RFC 9110 §15.5.9 (408), §15.5.14 (413); RFC 9112 §6.3 (Content-Length), §9.3.
Compare with: ``toyservers/wsgi_server.py`` (``read_head``, ``handle``, ``sendall`` and its
``SEND_TIMEOUT``), gunicorn's ``workers/gthread.py``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import queue
import re
import selectors
import socket
import sys
import time
from collections.abc import Callable, Iterable
from urllib.parse import parse_qs
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from step1_blocking import MAX_HEAD, Reader, read_request, run_app
from step1_blocking import app as step1_app

THREADS = int(os.environ.get("THREADS", "4"))  # threads that run requests
KEEP_ALIVE_SECONDS = float(os.environ.get("KEEP_ALIVE_SECONDS", "5"))  # idle time allowed
REQUEST_SECONDS = float(os.environ.get("REQUEST_SECONDS", "10"))  # first byte to last, a request
SEND_SECONDS = float(os.environ.get("SEND_SECONDS", "10"))  # a stall allowed while sending
MAX_BODY = int(os.environ.get("MAX_BODY", str(1024 * 1024)))  # bytes of request body accepted
PIECE = 64 * 1024  # bytes per sendall(): each gets SEND_SECONDS


def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """Step 1's app, plus ``/big?mib=N``: N MiB of zeros, one MiB per item."""
    if environ["PATH_INFO"] != "/big":
        return step1_app(environ, start_response)
    mib = int(parse_qs(environ["QUERY_STRING"]).get("mib", ["1"])[0])
    start_response("200 OK", [("Content-Type", "application/octet-stream"),
                              ("Content-Length", str(mib << 20))])
    return (bytes(1 << 20) for _ in range(mib))


class RequestTimeout(Exception):
    """The request did not arrive whole within REQUEST_SECONDS of its first byte: 408."""


# --8<-- [start:bounded]
class Connection(Reader):
    """A client connection: step 1's Reader, plus who it is and its deadline: when it expires
    if idle (watched by the selector), or when its request must be in (on a pool thread)."""

    def __init__(self, sock: socket.socket, client: tuple[str, int]) -> None:
        super().__init__(sock)
        self.client, self.deadline = client, 0.0

    def read_until(self, enough: Callable[[], bool], limit: int = MAX_HEAD) -> bool:
        """Step 1's ``read_until``, with the whole wait bounded by ``self.deadline`` instead of
        each ``recv()``; RequestTimeout past it."""
        while not enough():
            if len(self.buffer) > limit:
                raise ValueError("request head too large")
            self.sock.settimeout(max(self.deadline - time.monotonic(), 0.001))
            try:
                data = self.sock.recv(64 * 1024)
            except TimeoutError:
                raise RequestTimeout from None
            if not data:
                return False
            self.buffer += data
        return True

    def sendall(self, data: bytes) -> None:
        """``sock.sendall`` in pieces of PIECE bytes, SEND_SECONDS each: the client may be
        slow, but not stop (TimeoutError). ``run_app`` is given the connection as its socket."""
        self.sock.settimeout(SEND_SECONDS)
        for start in range(0, len(data), PIECE):
            self.sock.sendall(data[start:start + PIECE])


def declared_length(head: bytes) -> int:
    """The Content-Length of a request head (0 without one); ValueError if not digits."""
    match = re.search(rb"(?im)^content-length:[ \t]*(\S*)[ \t]*\r?$", head)
    if match is None:
        return 0
    if not match.group(1).isdigit():
        raise ValueError(f"bad Content-Length {match.group(1)!r}")
    return int(match.group(1))
# --8<-- [end:bounded]


# --8<-- [start:work]
returned: queue.SimpleQueue[Connection] = queue.SimpleQueue()  # from the pool, to be watched
wake_r, wake_w = socket.socketpair()  # a pool thread writes a byte: the selector wakes up


def work(app: WSGIApplication, conn: Connection, server: tuple[str, int]) -> None:
    """On a pool thread: answer the requests that are there, then hand the connection back.
    Each request must arrive within REQUEST_SECONDS (408) and announce at most MAX_BODY (413)."""
    try:
        while True:
            conn.deadline = time.monotonic() + REQUEST_SECONDS  # a request has begun
            if not conn.read_until(lambda: b"\r\n\r\n" in conn.buffer):
                break  # the client left
            if declared_length(conn.buffer.partition(b"\r\n\r\n")[0]) > MAX_BODY:
                conn.sendall(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 0\r\n"
                             b"Connection: close\r\n\r\n")
                break
            environ = read_request(conn, server, conn.client)  # its body, by the same deadline
            # run_app writes with sock.sendall: given the connection, it sends in paced pieces
            if environ is None or not run_app(app, environ, conn, keep_alive=True):
                break
            if not conn.buffer:  # nothing pipelined: back to the main thread, holding no thread
                returned.put(conn)
                wake_w.send(b"\0")
                return
    except RequestTimeout:
        with contextlib.suppress(OSError):  # the client may be gone too
            conn.sendall(b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n"
                         b"Connection: close\r\n\r\n")
    except Exception as exc:  # a bad request, a client that stopped reading, the app raised
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
