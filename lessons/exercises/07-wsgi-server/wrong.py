"""Exercise 7, a plausible wrong answer: ``close()`` only after a response that went well.

The result's ``close()`` is called after the loop, inside the ``try``: a response that ends
normally is closed, one that fails half way is not. PEP 3333 asks for the call "whether the
request was completed normally, or terminated early due to an application error during
iteration": ``close()`` is where an app releases what the request held (a database
connection, a file), so without it every failed request leaks one.
``EXERCISE_IMPL=wrong make exercise N=7`` shows what a student who wrote it reads;
``tests/test_exercises.py`` checks that it fails with this hint:

Fails: test_an_error_before_the_first_chunk_gets_a_500_and_close: AssertionError: close() is
"""

from __future__ import annotations

import socket
import sys
import traceback  # noqa: F401  (for your run_app)
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "code" / "07-wsgi-server"))
from step1_blocking import Reader, read_request  # noqa: E402  (lesson 7, step 1)

INTERNAL_ERROR = (b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\n"
                  b"Content-Length: 22\r\nConnection: close\r\n\r\nInternal Server Error\n")


class Response:
    """One response on ``sock``: ``start_response``, ``write`` and the head, as in step 1."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.status_headers, self.head_sent = sock, None, False

    def start_response(self, status: str, headers: list[tuple[str, str]],
                       exc_info: Any = None) -> Callable[[bytes], None]:
        if exc_info is not None:
            try:
                if self.head_sent:  # too late to change the status: re-raise the app's error
                    raise exc_info[1].with_traceback(exc_info[2])
            finally:
                exc_info = None
        elif self.status_headers is not None:
            raise RuntimeError("start_response called twice without exc_info")
        self.status_headers = (status, headers)
        return self.write

    def write(self, data: bytes) -> None:
        """Send ``data``, after the head if it is not out yet (RuntimeError: no status)."""
        if self.status_headers is None:
            raise RuntimeError("a body before start_response()")
        if not self.head_sent:
            status, headers = self.status_headers
            lines = [f"HTTP/1.1 {status}", *(f"{name}: {value}" for name, value in headers),
                     "Connection: close"]
            data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data
            self.head_sent = True
        self.sock.sendall(data)


# --8<-- [start:exercise]
def run_app(app: WSGIApplication, environ: WSGIEnvironment, sock: socket.socket) -> None:
    """Call ``app`` and send its response on ``sock``; never raise because of the app.

    - The head goes out with the first non-empty chunk (``Response.write`` sends it), or
      alone after an empty body.
    - The app raises (or never calls ``start_response``) before the head was sent: print
      the traceback to ``environ["wsgi.errors"]`` and send ``INTERNAL_ERROR`` instead.
    - The app raises after the head was sent: print the traceback, send nothing more.
    - In every case, call ``close()`` on the app's result if it returned one that has it.
    """
    response = Response(sock)
    result: Iterable[bytes] | None = None
    try:
        result = app(environ, response.start_response)
        for chunk in result:
            if chunk:
                response.write(chunk)
        if not response.head_sent:
            response.write(b"")  # RuntimeError if start_response was never called
        if hasattr(result, "close"):
            result.close()
    except Exception:
        traceback.print_exc(file=environ["wsgi.errors"])
        if not response.head_sent:
            sock.sendall(INTERNAL_ERROR)
# --8<-- [end:exercise]


def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """``/boom`` fails before its first chunk, ``/half`` after it; other paths say hello."""
    start_response("200 OK", [("Content-Type", "text/plain")])
    return body(environ["PATH_INFO"])


def body(path: str) -> Iterator[bytes]:
    if path == "/boom":
        raise ValueError("boom")
    yield b"hello, "
    if path == "/half":
        raise ValueError("half way")
    yield b"world\n"


def serve(app: WSGIApplication, port: int) -> None:
    """Step 1's loop, with this file's ``run_app``."""
    with socket.create_server(("127.0.0.1", port)) as listener:
        print(f"listening on http://127.0.0.1:{port}", flush=True)
        while True:
            sock, client = listener.accept()
            with sock:
                sock.settimeout(10)
                try:
                    environ = read_request(Reader(sock), listener.getsockname(), client)
                    if environ is not None:
                        run_app(app, environ, sock)
                except Exception as exc:
                    print(f"dropped {client}: {exc!r}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    try:
        serve(app, int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
    except KeyboardInterrupt:
        pass
