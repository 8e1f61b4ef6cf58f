"""Lesson 7, step 1: a WSGI server on ``socket``, one request at a time.

Run: ``.venv/bin/python lessons/code/07-wsgi-server/step1_blocking.py 8000``, then
``curl -i http://127.0.0.1:8000/hello`` and ``curl -d 'some bytes' http://127.0.0.1:8000/echo``.
Send ``/slow`` (it sleeps ``SLOW_SECONDS``, env var, default 3) and, meanwhile, ``/fast`` from a
second terminal: the fast one waits, because the only thread is inside the slow app.

Accept a connection, read the request head, build ``environ``, call the app with a
``start_response``, write the head with the first non-empty body chunk, call ``close()`` on
the body iterable, close the connection. ``Reader``, ``read_request`` and ``run_app`` are
shared by steps 2 and 3, which change only who calls them.

Deliberately left out: chunked request bodies (the body is read whole, by Content-Length),
a 500 when the app raises (the connection is dropped: that is the exercise), the checks of
``toyservers/http1_parser.py``, more than one connection at a time.
Spec: PEP 3333 ("environ Variables", "Input and Error Streams", "The start_response()
Callable", "Buffering and Streaming", "The write() Callable"); RFC 9112 §3, §5, §6, §9.3.
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

SLOW_SECONDS = float(os.environ.get("SLOW_SECONDS", "3"))  # how long /slow sleeps
MAX_HEAD = 64 * 1024  # bytes: a longer request head is refused


# --8<-- [start:app]
def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """``/slow`` holds its thread for SLOW_SECONDS; every path says what it got."""
    if environ["PATH_INFO"] == "/slow":
        time.sleep(SLOW_SECONDS)  # stands for a slow query: the thread can do nothing else
    body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    text = f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']}: {len(body)} body bytes\n"
    start_response("200 OK", [("Content-Type", "text/plain"),
                              ("Content-Length", str(len(text)))])
    return [text.encode()]
# --8<-- [end:app]


# --8<-- [start:read_request]
class Reader:
    """A connection's bytes: what was read past one request stays in ``buffer`` for the next."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer = sock, b""

    def read_until(self, enough: Callable[[], bool], limit: int = MAX_HEAD) -> bool:
        """recv() until ``enough()``; False if the client closed first."""
        while not enough():
            if len(self.buffer) > limit:
                raise ValueError("request head too large")
            data = self.sock.recv(64 * 1024)
            if not data:
                return False
            self.buffer += data
        return True


def read_request(reader: Reader, server: tuple[str, int], client: tuple[str, int]
                 ) -> WSGIEnvironment | None:
    """The next request's environ (PEP 3333, "environ Variables"); None if the client left."""
    if not reader.read_until(lambda: b"\r\n\r\n" in reader.buffer):
        return None
    head, reader.buffer = reader.buffer.split(b"\r\n\r\n", 1)
    request_line, *lines = head.decode("latin-1").split("\r\n")
    method, target, version = request_line.split(" ")  # ValueError: not three parts
    path, _, query = target.partition("?")
    environ: WSGIEnvironment = {
        "REQUEST_METHOD": method, "SCRIPT_NAME": "", "PATH_INFO": unquote(path, "latin-1"),
        "QUERY_STRING": query, "SERVER_NAME": server[0], "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": version, "REMOTE_ADDR": client[0],
        "wsgi.version": (1, 0), "wsgi.url_scheme": "http", "wsgi.errors": sys.stderr,
        "wsgi.multithread": True, "wsgi.multiprocess": False, "wsgi.run_once": False,
    }
    for line in lines:
        name, _, value = line.partition(":")
        key = name.strip().upper().replace("-", "_")
        if key not in ("CONTENT_TYPE", "CONTENT_LENGTH"):  # the two CGI names without HTTP_
            key = "HTTP_" + key
        environ[key] = f"{environ[key]},{value.strip()}" if key in environ else value.strip()
    # wsgi.input must not read past this body, or it would eat the next request: take exactly
    # Content-Length bytes off the buffer (toy-wsgi streams them instead of buffering).
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if not reader.read_until(lambda: len(reader.buffer) >= length, limit=length):
        raise ConnectionError("the client closed in the middle of the body")
    body, reader.buffer = reader.buffer[:length], reader.buffer[length:]
    environ["wsgi.input"] = io.BytesIO(body)
    return environ
# --8<-- [end:read_request]


# --8<-- [start:run_app]
def run_app(app: WSGIApplication, environ: WSGIEnvironment, sock: socket.socket,
            keep_alive: bool) -> bool:
    """Call the app and send its response; True if the connection may carry another request.

    The head goes out with the first non-empty body chunk, so an app may still change its mind
    (``start_response`` again, with ``exc_info``) until then; and the body's ``close()`` is
    called whatever happens (PEP 3333, "Buffering and Streaming", "Specification Details").
    """
    status_headers: list[Any] = []  # [status, headers] once start_response was called
    head_sent = False

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None
                       ) -> Callable[[bytes], None]:
        if exc_info is not None:
            try:
                if head_sent:  # too late to change the status: re-raise the app's error
                    raise exc_info[1].with_traceback(exc_info[2])
            finally:
                exc_info = None  # PEP 3333: no reference cycle through the traceback
        elif status_headers:
            raise RuntimeError("start_response called twice without exc_info")
        status_headers[:] = [status, headers]
        return write  # PEP 3333's write(): for old apps that push bytes instead of returning

    def write(data: bytes) -> None:
        nonlocal head_sent, keep_alive
        if not status_headers:
            raise RuntimeError("a body before start_response()")
        if not head_sent:
            status, headers = status_headers
            names = {name.lower() for name, _ in headers}
            # No Content-Length: the body ends when the connection does (RFC 9112 §6.3).
            keep_alive = (keep_alive and "content-length" in names
                          and environ["SERVER_PROTOCOL"] == "HTTP/1.1"
                          and environ.get("HTTP_CONNECTION", "").lower() != "close")
            lines = [f"HTTP/1.1 {status}", f"Date: {formatdate(usegmt=True)}",
                     *(f"{name}: {value}" for name, value in headers),
                     f"Connection: {'keep-alive' if keep_alive else 'close'}"]
            data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data
            head_sent = True
        sock.sendall(data)

    result = app(environ, start_response)
    try:
        for chunk in result:
            if chunk:  # PEP 3333: no head "until the first non-empty bytestring"
                write(chunk)
        if not head_sent:  # an empty body: the head alone
            write(b"")
    finally:
        if hasattr(result, "close"):
            result.close()
    return keep_alive
# --8<-- [end:run_app]


# --8<-- [start:serve]
def serve(app: WSGIApplication, port: int) -> None:
    """Accept a connection, answer one request on it, close it; again, forever."""
    with socket.create_server(("127.0.0.1", port)) as listener:
        print(f"listening on http://127.0.0.1:{port}", flush=True)
        while True:
            sock, client = listener.accept()  # nobody calls this while an app runs
            with sock:
                sock.settimeout(10)  # seconds: a silent client cannot hold the server forever
                try:
                    environ = read_request(Reader(sock), listener.getsockname(), client)
                    if environ is not None:
                        run_app(app, environ, sock, keep_alive=False)
                except Exception as exc:  # a bad request, a client gone, or the app raised
                    print(f"dropped {client}: {exc!r}", file=sys.stderr, flush=True)
# --8<-- [end:serve]


if __name__ == "__main__":
    try:
        serve(app, int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
    except KeyboardInterrupt:
        pass
