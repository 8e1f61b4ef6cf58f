"""The WSGI app every server in the WSGI conformance suite serves: one route per behaviour.

Plain PEP 3333 (no framework), so whatever the suite sees is the server's doing. Routes take
their parameters from the query string, and read the body with ``read(CONTENT_LENGTH)`` as a
portable app must (PEP 3333: "the application ... should not attempt to read more data than
is specified by the CONTENT_LENGTH variable") unless the route is about another way to read
it. ``/close-*`` record that the result's ``close()`` ran in ``CLOSED``, read back at
``/status?key=K``. Each server runs one process, so the table is shared by its threads.

Spec: PEP 3333.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import parse_qs

StartResponse = Callable[..., Callable[[bytes], object]]
Environ = dict[str, Any]

HELLO = b"hello world"
CHUNK = 64 * 1024
CLOSED: dict[str, int] = {}  # key -> how many times close() ran
SELF_PATH = __file__  # served by /file


def _params(environ: Environ) -> dict[str, str]:
    query = parse_qs(environ.get("QUERY_STRING", ""))
    return {name: values[0] for name, values in query.items()}


def _json(start_response: StartResponse, value: object, status: str = "200 OK"
          ) -> list[bytes]:
    body = json.dumps(value).encode()
    start_response(status, [("Content-Type", "application/json"),
                            ("Content-Length", str(len(body)))])
    return [body]


def _body(environ: Environ) -> bytes:
    """The body, read as PEP 3333 says a portable app reads it; a terminated input
    (``wsgi.input_terminated``, chunked bodies) is read to its end."""
    stream = environ["wsgi.input"]
    if environ.get("wsgi.input_terminated"):
        return bytes(stream.read())
    length = int(environ.get("CONTENT_LENGTH") or 0)
    return bytes(stream.read(length)) if length else b""


def _describe_environ(environ: Environ) -> dict[str, object]:
    """The environ as JSON: str values as they are, the ``wsgi.*`` values described."""
    value = {key: val for key, val in environ.items() if isinstance(val, str)}
    value["wsgi.version"] = list(environ.get("wsgi.version", ()))
    for key in ("wsgi.multithread", "wsgi.multiprocess", "wsgi.run_once",
                "wsgi.input_terminated"):
        if key in environ:
            value[key] = environ[key]
    errors = environ.get("wsgi.errors")
    value["errors-methods"] = [m for m in ("write", "writelines", "flush")
                               if callable(getattr(errors, m, None))]
    stream = environ.get("wsgi.input")
    value["input-methods"] = [m for m in ("read", "readline", "readlines", "__iter__")
                              if callable(getattr(stream, m, None))]
    value["has-file-wrapper"] = callable(environ.get("wsgi.file_wrapper"))
    return value


def _read_ways(environ: Environ, how: str) -> list[str]:
    """Read the body one way (``how``): the pieces the app got, as latin-1 strings."""
    stream = environ["wsgi.input"]
    length = int(environ.get("CONTENT_LENGTH") or 0)
    pieces: list[bytes] = []
    if how == "read-n":  # read(n) in steps of 5 bytes, never past CONTENT_LENGTH
        while length > 0:
            piece = stream.read(min(5, length))
            if not piece:
                break
            pieces.append(piece)
            length -= len(piece)
    elif how == "read-all":
        pieces.append(stream.read())
    elif how == "readline":
        pieces += [stream.readline(), stream.readline(3), stream.readline()]
    elif how == "readlines":
        pieces += stream.readlines()
    elif how == "iter":
        pieces += list(stream)
    return [bytes(p).decode("latin-1") for p in pieces]


class Closing:
    """A result whose ``close()`` counts in ``CLOSED[key]``; it raises in its first
    ``__next__`` when ``fail``, before any body."""

    def __init__(self, key: str, fail: bool) -> None:
        self.key, self.fail, self.done = key, fail, False

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        if self.fail:
            raise RuntimeError("the result fails before its first item")
        if self.done:
            raise StopIteration
        self.done = True
        return HELLO

    def close(self) -> None:
        CLOSED[self.key] = CLOSED.get(self.key, 0) + 1


def _late_error(start_response: StartResponse) -> Iterator[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    yield b"partial;"
    try:
        raise ValueError("the app fails after its first piece")
    except ValueError:  # PEP 3333: start_response re-raises, the headers being sent
        start_response("500 Internal Server Error", [("Content-Type", "text/plain")],
                       sys.exc_info())
    yield b"error page"  # never reached


def _stream(count: int, size: int) -> Iterator[bytes]:
    piece = b"x" * size
    for _ in range(count):
        yield piece


def _produce(count: int, size: int, progress: str) -> Iterator[bytes]:
    """``_stream``, writing to the file ``progress`` how many bytes the server has taken so far
    (it asks for the next piece once it has taken the last), for the test to read."""
    piece = b"x" * size
    for taken in range(count + 1):
        with open(progress, "w") as file:
            file.write(str(taken * size))
        if taken < count:
            yield piece


def app(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
    path, params = environ["PATH_INFO"], _params(environ)
    if path == "/environ" or path.startswith("/environ/"):
        return _json(start_response, _describe_environ(environ))
    if path == "/echo":
        return _json(start_response, {"body": _body(environ).decode("latin-1")})
    if path == "/read":
        return _json(start_response, {"pieces": _read_ways(environ, params.get("how", ""))})
    if path == "/no-read":  # answers without touching the body
        return _json(start_response, {"read": False})
    if path == "/errors":
        errors = environ["wsgi.errors"]
        errors.write("conformance: a line on wsgi.errors\n")
        errors.writelines(["conformance: ", "two more\n"])
        errors.flush()
        return _json(start_response, {"wrote": True})
    if path == "/write":  # write() for the first part, the iterable for the rest
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        write(b"written;")
        write(b"")
        return [b"returned"]
    if path == "/raise-after-start":  # start_response, then an exception before any body
        start_response("299 App Status", [("Content-Type", "text/plain"), ("X-App", "1")])
        raise RuntimeError("raised after start_response, before the body")
    if path == "/exc-info":  # the error page replaces the headers not yet sent
        start_response("200 OK", [("Content-Type", "text/plain"), ("X-Old", "1")])
        try:
            raise ValueError("the app changes its mind")
        except ValueError:
            start_response("503 Service Unavailable", [("Content-Type", "text/plain"),
                                                       ("X-New", "1")], sys.exc_info())
        return [b"error page"]
    if path == "/exc-info-late":  # the same, once part of the body is out: too late
        return _late_error(start_response)
    if path == "/close":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return Closing(params["key"], fail=params.get("fail") == "1")
    if path == "/status":
        return _json(start_response, {"closed": CLOSED.get(params["key"], 0)})
    if path == "/file":
        size = os.path.getsize(SELF_PATH)
        start_response("200 OK", [("Content-Type", "text/plain"),
                                  ("Content-Length", str(size))])
        # the server (or the wrapper's close()) closes the file
        return environ["wsgi.file_wrapper"](open(SELF_PATH, "rb"), 8192)  # noqa: SIM115
    if path == "/hop-by-hop":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "11"),
                                  ("Upgrade", "conformance/1")])
        return [HELLO]
    if path == "/short":  # a Content-Length the body does not reach
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "20")])
        return iter([HELLO])
    if path == "/inject":  # a header value carrying a CRLF and a second field
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "11"),
                                  ("X-Bad", "a\r\nX-Injected: 1")])
        return [HELLO]
    if path == "/length":  # Content-Length given, body in two pieces
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "11")])
        return iter([HELLO[:5], HELLO[5:]])
    if path == "/stream":  # no Content-Length, body in several pieces
        start_response("200 OK", [("Content-Type", "text/plain")])
        return iter([b"first;", b"second;", b"third"])
    if path == "/download":
        size = int(params.get("size", "0"))
        start_response("200 OK", [("Content-Type", "application/octet-stream"),
                                  ("Content-Length", str(size))])
        return _stream(size // CHUNK, CHUNK)
    if path == "/produce":  # /download that says how far the server has taken it
        size = int(params.get("size", "0"))
        start_response("200 OK", [("Content-Type", "application/octet-stream"),
                                  ("Content-Length", str(size))])
        return _produce(size // CHUNK, CHUNK, params["progress"])
    if path == "/raise":
        raise RuntimeError("conformance: the app raised")
    if path == "/no-response":  # returns without calling start_response
        return []
    start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", "9")])
    return [b"not found"]
