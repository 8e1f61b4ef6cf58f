"""The apps of ``bench concurrency``: a fast and a slow endpoint, as WSGI and as ASGI.

Each app answers ``GET /fast`` at once and ``GET /slow?seconds=S`` after waiting ``S`` seconds
(a float, at most :data:`MAX_SLOW`; 1 when absent), with a ``text/plain`` body naming the
endpoint; other paths get 404. They differ only in how they wait:

* ``wsgi_app`` (PEP 3333) calls ``time.sleep``: its thread waits, and a sync worker with one
  thread serves nothing else meanwhile;
* ``asgi_app`` awaits ``asyncio.sleep``: the event loop runs the other requests meanwhile;
* ``asgi_blocking_app`` is the mistake: an ASGI app that calls ``time.sleep``, which stops the
  whole event loop, so it serves like a one-thread WSGI server.

Run one: ``uvicorn apps.concurrency_app:asgi_app``, ``gunicorn apps.concurrency_app:wsgi_app``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

#: Longest wait ``/slow`` accepts, seconds: a typo cannot park a worker for an hour.
MAX_SLOW = 60.0

StartResponse = Callable[..., Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def slow_seconds(query: str) -> float:
    """The wait ``/slow`` was asked for: ``seconds`` in the query string ``query`` (URL-encoded,
    without ``?``), clamped to 0..:data:`MAX_SLOW`; 1.0 when absent or not a number."""
    values = parse_qs(query).get("seconds", [])
    try:
        seconds = float(values[0]) if values else 1.0
    except ValueError:
        return 1.0
    return min(max(seconds, 0.0), MAX_SLOW)


def _answer(path: str) -> tuple[int, bytes]:
    if path == "/fast":
        return 200, b"fast\n"
    if path == "/slow":
        return 200, b"slow\n"
    return 404, b"not found\n"


# --8<-- [start:wsgi]
def wsgi_app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    """WSGI: ``/slow`` blocks this thread with ``time.sleep``."""
    path = environ.get("PATH_INFO", "/")
    if path == "/slow":
        time.sleep(slow_seconds(environ.get("QUERY_STRING", "")))
    status, body = _answer(path)
    start_response(f"{status} {'OK' if status == 200 else 'Not Found'}",
                   [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
# --8<-- [end:wsgi]


async def _send_answer(send: Send, path: str) -> None:
    status, body = _answer(path)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


# --8<-- [start:asgi]
async def asgi_app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    """ASGI: ``/slow`` awaits ``asyncio.sleep``; the loop serves others meanwhile."""
    if scope["type"] != "http":  # lifespan and anything else: nothing to set up
        return
    if scope["path"] == "/slow":
        await asyncio.sleep(slow_seconds(scope["query_string"].decode("latin-1")))
    await _send_answer(send, scope["path"])
# --8<-- [end:asgi]


# --8<-- [start:blocking]
async def asgi_blocking_app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    """The mistake: an ASGI app that calls ``time.sleep``, stopping the whole event loop."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/slow":
        time.sleep(slow_seconds(scope["query_string"].decode("latin-1")))  # blocks the loop
    await _send_answer(send, scope["path"])
# --8<-- [end:blocking]
