"""``misbehaving_app.py``'s routes as a WSGI app (PEP 3333), for the WSGI servers' findings tests.

The same routes and records, where WSGI has them: ``/status?key=K``, ``/slow?s=&key=``,
``/upload?key=K``, ``/drain``, ``/stream-forever``, ``/stream-before-receive``,
``/raise?exc=NAME``, and the echo app of ``wsgi_echo_app.py`` for anything else. (The ASGI-only
routes, ``/send-after-disconnect`` and ``/bad``, have no WSGI twin here.) ``/status`` answers
while another request runs only on a server with more than one thread.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import parse_qs

from tests.support.misbehaving_app import EXCEPTIONS, STATE
from tests.support.wsgi_echo_app import app as echo_app

StartResponse = Callable[..., Any]


def _respond(start_response: StartResponse, body: bytes,
             content_type: str = "text/plain") -> list[bytes]:
    start_response("200 OK", [("Content-Type", content_type),
                              ("Content-Length", str(len(body)))])
    return [body]


def _read_body(environ: dict[str, Any], record: dict[str, Any] | None = None) -> bytes:
    """The whole body, read as it comes (``read1`` where the stream has it), recording the
    bytes received so far in ``record``."""
    stream = environ["wsgi.input"]
    read = getattr(stream, "read1", stream.read)
    body = b""
    while chunk := read(65536):
        body += chunk
        if record is not None:
            record["received"] = len(body)
    return body


def _stream_forever() -> Iterator[bytes]:
    chunk = b"x" * 65536
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        yield chunk


def _stream_before_receive(environ: dict[str, Any]) -> Iterator[bytes]:
    yield b"first"
    _read_body(environ)
    yield b"last"


def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    path = environ["PATH_INFO"]
    query = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
    key = query.get("key", "")
    if path == "/status":
        return _respond(start_response, json.dumps(STATE.get(key, {})).encode(),
                        "application/json")
    if path == "/slow":
        STATE[key] = {"started": True}
        time.sleep(float(query.get("s", "1")))
        return _respond(start_response, b"slow done")
    if path == "/upload":
        record = STATE[key] = {"received": 0}
        body = _read_body(environ, record)
        return _respond(start_response, json.dumps({"body": body.decode("latin-1")}).encode(),
                        "application/json")
    if path == "/drain":
        return _respond(start_response, str(len(_read_body(environ))).encode())
    if path == "/stream-forever":
        start_response("200 OK", [])
        return _stream_forever()
    if path == "/stream-before-receive":
        start_response("200 OK", [])
        return _stream_before_receive(environ)
    if path == "/raise":
        raise EXCEPTIONS[query.get("exc", "RuntimeError")]()
    return echo_app(environ, start_response)
