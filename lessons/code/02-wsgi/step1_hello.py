"""Lesson 2, step 1: a WSGI application, served by the standard library's wsgiref.

Run: ``.venv/bin/python lessons/code/02-wsgi/step1_hello.py 8000``, then
``curl -i 'http://127.0.0.1:8000/?name=ada'`` and ``curl -N http://127.0.0.1:8000/count``.

A WSGI application is one callable, ``app(environ, start_response)``. The server parses the
request into ``environ`` (a dict of CGI-style keys plus ``wsgi.*`` ones), the app calls
``start_response(status, headers)`` once, and returns an iterable of byte strings: the body.
The server writes each item as it gets it, so a generator streams.

Deliberately left out: everything a framework adds (routing, request objects): see step 2.
Spec: PEP 3333 ("The Application/Framework Side", "environ Variables", "The start_response()
Callable"). wsgiref.simple_server is the reference server that PEP 3333 ships with.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from urllib.parse import parse_qs
from wsgiref.simple_server import make_server
from wsgiref.types import StartResponse, WSGIEnvironment

SHOWN = ("REQUEST_METHOD", "SCRIPT_NAME", "PATH_INFO", "QUERY_STRING", "CONTENT_TYPE",
         "CONTENT_LENGTH", "SERVER_PROTOCOL", "HTTP_HOST", "HTTP_USER_AGENT", "wsgi.url_scheme")
"""The environ keys the home page shows (PEP 3333 "environ Variables")."""


# --8<-- [start:app]
def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """The whole WSGI contract in one function.

    ``environ``: the request, as a dict of str. ``start_response``: call it once with the
    status line and the header list, before the body. Returns: the body, an iterable of bytes.
    """
    if environ["PATH_INFO"] == "/count":
        start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
        return count_to(5)  # a generator: the server sends each line as it is produced
    name = parse_qs(environ["QUERY_STRING"]).get("name", ["stranger"])[0]
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length)  # the request body is a file-like object
    lines = [f"hello, {name}\n", f"the request body had {len(body)} bytes\n"]
    lines += [f"{key} = {environ[key]!r}\n" for key in SHOWN if key in environ]
    payload = "".join(lines).encode()
    start_response("200 OK", [
        ("Content-Type", "text/plain; charset=utf-8"),
        ("Content-Length", str(len(payload))),
    ])
    return [payload]  # a list with one byte string: the simplest body iterable


def count_to(n: int) -> Iterator[bytes]:
    """Yield ``n`` lines; the server writes each one as soon as it is produced."""
    for i in range(1, n + 1):
        yield f"{i}\n".encode()
# --8<-- [end:app]


# --8<-- [start:serve]
if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    with make_server("127.0.0.1", port, app) as server:
        print(f"listening on http://127.0.0.1:{port}", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
# --8<-- [end:serve]
