"""Lesson 2, step 3: a tiny blocking WSGI server, and a slow request that holds a fast one back.

Run: ``.venv/bin/python lessons/code/02-wsgi/step3_blocking.py 8000``, then in two terminals, within
``SLOW_SECONDS``: ``curl http://127.0.0.1:8000/slow`` and ``curl http://127.0.0.1:8000/fast``. The
fast one waits for the slow one: this server handles one connection at a time, and ``/slow`` holds
the only thread in ``time.sleep`` for ``SLOW_SECONDS`` (env var, default 5).

The server is the WSGI contract seen from the other side: accept a connection, parse the
request into ``environ``, give the app a ``start_response``, write the status line and headers
before the first body bytes, then every item of the body iterable, then call its ``close()``.
Gunicorn's sync worker has this same shape and runs several copies of it in worker processes;
that is what ``--workers 4`` buys, and why 4 workers finish 3 slow + 15 fast requests in one
slow period where 1 worker needs three.

Deliberately left out: keep-alive (every response closes), request bodies other than by
Content-Length, error responses (an app that raises gets its connection dropped: PEP 3333's
500 is lesson 7's exercise), ``wsgi.errors``, ``write()`` callables (it raises), timeouts on
slow clients, more than one connection at a time.
Spec: PEP 3333 ("The Server/Gateway Side", "environ Variables", "Buffering and Streaming");
RFC 9112 §3, §4, §5 for the wire format.
"""

from __future__ import annotations

import io
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable
from email.utils import formatdate
from typing import Any
from urllib.parse import unquote
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

SLOW_SECONDS = float(os.environ.get("SLOW_SECONDS", "5"))
"""How long ``/slow`` sleeps, seconds."""

MAX_LINE = 8192
"""Longest request line or header line we read, bytes."""


# --8<-- [start:app]
def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """``/slow`` blocks its thread for ``SLOW_SECONDS``; ``/error`` raises; the rest
    answers at once."""
    if environ["PATH_INFO"] == "/slow":
        time.sleep(SLOW_SECONDS)  # stands for a slow database query or an API call
        body = b"slow\n"
    elif environ["PATH_INFO"] == "/error":
        raise RuntimeError("a bug in the app")  # the server drops this connection, goes on
    else:
        body = b"fast\n"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
# --8<-- [end:app]


# --8<-- [start:environ]
def read_environ(rfile: io.BufferedReader, port: int) -> WSGIEnvironment:
    """Read a request head from ``rfile`` and build a PEP 3333 environ from it.

    Header ``Some-Name`` becomes ``HTTP_SOME_NAME``, except Content-Type and Content-Length,
    which lose the prefix (PEP 3333, after CGI). The body is left in ``rfile`` as
    ``wsgi.input``.

    Raises:
        EOFError: the client closed before sending anything.
        ValueError: a malformed request line or field line.
    """
    request_line = rfile.readline(MAX_LINE)
    if not request_line:
        raise EOFError("the client closed without sending a request")
    method, target, version = request_line.decode("latin-1").rstrip("\r\n").split(" ")
    path, _, query = target.partition("?")
    environ: WSGIEnvironment = {
        "REQUEST_METHOD": method, "SCRIPT_NAME": "", "PATH_INFO": unquote(path, "latin-1"),
        "QUERY_STRING": query, "SERVER_NAME": "127.0.0.1", "SERVER_PORT": str(port),
        "SERVER_PROTOCOL": version, "wsgi.version": (1, 0), "wsgi.url_scheme": "http",
        "wsgi.input": rfile, "wsgi.errors": sys.stderr, "wsgi.multithread": False,
        "wsgi.multiprocess": False, "wsgi.run_once": False,
    }
    while (line := rfile.readline(MAX_LINE).decode("latin-1").rstrip("\r\n")) != "":
        name, colon, value = line.partition(":")
        if not colon:
            raise ValueError(f"malformed field line {line!r}")
        key = name.strip().upper().replace("-", "_")
        if key not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            key = "HTTP_" + key
        # Repeated fields are joined with commas (PEP 3333 follows CGI here).
        environ[key] = f"{environ[key]},{value.strip()}" if key in environ else value.strip()
    return environ
# --8<-- [end:environ]


# --8<-- [start:run_app]
def run_app(app: WSGIApplication, environ: WSGIEnvironment, conn: socket.socket) -> None:
    """Call the app and write its response: head before the first non-empty body chunk.

    PEP 3333: the server must not send the headers until the first non-empty byte string is
    yielded (or the iterable is exhausted), and must call ``close()`` on the iterable if it
    has one, whatever happens.

    Raises:
        Exception: whatever the app raised (IndexError when it never called
            ``start_response``); the caller drops the connection, so the client gets no
            answer at all. PEP 3333's error rules (a 500 when nothing was sent yet) are lesson
            7's exercise.
    """
    started: list[tuple[str, list[tuple[str, str]]]] = []
    head_sent = False

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None
                       ) -> Callable[[bytes], object]:
        if exc_info is not None and head_sent:
            raise exc_info[1].with_traceback(exc_info[2])  # too late to change the status
        started[:] = [(status, headers)]
        def write(data: bytes) -> object:
            raise NotImplementedError("this server does not support write()")
        return write

    def send_head() -> None:
        status, headers = started[0]  # IndexError: the app never called start_response
        lines = [f"HTTP/1.1 {status}", f"Date: {formatdate(usegmt=True)}",
                 *(f"{name}: {value}" for name, value in headers), "Connection: close"]
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    result = app(environ, start_response)
    try:
        for chunk in result:
            if chunk and not head_sent:
                send_head()
                head_sent = True
            conn.sendall(chunk)
        if not head_sent:
            send_head()
    finally:
        if hasattr(result, "close"):
            result.close()
# --8<-- [end:run_app]


# --8<-- [start:serve]
def serve(app: WSGIApplication, port: int) -> None:
    """Accept connections one at a time and serve one request on each, forever.

    While ``run_app`` runs, nobody calls ``accept()``: the next clients wait in the kernel's
    listen queue. That is the whole concurrency story of this server.
    """
    with socket.create_server(("127.0.0.1", port)) as listener:
        print(f"listening on http://127.0.0.1:{port}", flush=True)
        while True:
            conn, _ = listener.accept()
            with conn, conn.makefile("rb") as rfile:
                conn.settimeout(10)  # seconds: a silent client cannot hold the server forever
                try:
                    run_app(app, read_environ(rfile, port), conn)
                except EOFError:
                    pass
                except Exception as exc:  # a bad request, a client gone, an app error
                    print(f"dropped a connection: {exc!r}", file=sys.stderr, flush=True)
# --8<-- [end:serve]


if __name__ == "__main__":
    try:
        serve(app, int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
    except KeyboardInterrupt:
        pass
