"""Exercise 3, starter: write an ASGI middleware that reports how long the app took.

``server_timing(app)`` returns an ASGI app that adds ``server-timing: app;dur=<ms>`` to every
HTTP response: the time from the request reaching the middleware to the app sending its
``http.response.start``, in milliseconds. Lifespan (and any other scope) passes through
untouched.

YOUR TASK: write the body of ``server_timing`` below (look for "EXERCISE"). Check your work
with ``make exercise N=3``; the failures tell you what is still wrong. Run it with
``.venv/bin/python lessons/exercises/03-asgi/starter.py 8000`` and try
``curl -i 'http://127.0.0.1:8000/?ms=120'``: browsers' developer tools show this header in
their timing panel.

Spec: ASGI specification ("HTTP & WebSocket ASGI Message Format": Response Start, headers as
lower-cased byte pairs; "Lifespan Protocol"); W3C Server Timing (``name;dur=milliseconds``).
"""

from __future__ import annotations

import asyncio
import sys
import time  # noqa: F401  (you will need it)
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

import uvicorn

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


# --8<-- [start:exercise]
def server_timing(app: ASGIApp) -> ASGIApp:
    """Wrap ``app``: add ``(b"server-timing", b"app;dur=<milliseconds>")`` to HTTP responses.

    The duration runs from the call to the ``http.response.start`` message, written with one
    decimal (``app;dur=120.4``). The app's own headers, status and body are left as they were.
    Scopes other than ``http`` (``lifespan``, ``websocket``) go straight to ``app``.
    """
    # ---- EXERCISE: replace the line below with your code. ----------------------------------
    # Hints: return an inner ``async def timed(scope, receive, send)``. For HTTP scopes, call
    # ``app`` with your own ``send`` that edits the ``http.response.start`` message on its way
    # out (copy it: ``{**message, "headers": [...]}``); ``time.perf_counter()`` is in seconds.
    raise NotImplementedError("exercise 3: write the server_timing() middleware")
# --8<-- [end:exercise]


async def demo(scope: Scope, receive: Receive, send: Send) -> None:
    """Sleeps ``?ms=`` milliseconds, then answers; handles lifespan so state can be checked."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            scope["state"]["ready"] = True
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    query = parse_qs(scope["query_string"].decode("latin-1"))
    await asyncio.sleep(float(query.get("ms", ["0"])[0]) / 1000)
    body = b"ready\n" if scope["state"].get("ready") else b"no lifespan state\n"
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"x-demo", b"1")]})
    await send({"type": "http.response.body", "body": body})


app = server_timing(demo)

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]) if len(sys.argv) > 1 else 8000,
                lifespan="on")
