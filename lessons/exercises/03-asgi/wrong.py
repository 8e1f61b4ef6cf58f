"""Exercise 3, a plausible wrong answer: the duration in seconds.

``time.perf_counter()`` counts seconds, and the difference goes into the header as it is, so
an app that took 120 ms reports ``app;dur=0.1``. Server-Timing's ``dur`` is in milliseconds
(W3C Server Timing, "The server-timing header field"), and the browser's network panel draws
it as such. ``EXERCISE_IMPL=wrong make exercise N=3`` shows what a student who wrote it reads;
``tests/test_exercises.py`` checks that it fails with this hint:

Fails: test_the_header_is_added_with_the_duration_in_milliseconds: AssertionError: dur=0.
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
    async def timed(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        started = time.perf_counter()

        async def send_with_timing(message: Message) -> None:
            if message["type"] == "http.response.start":
                took = time.perf_counter() - started
                timing = (b"server-timing", f"app;dur={took:.1f}".encode())
                message = {**message, "headers": [*message.get("headers", []), timing]}
            await send(message)

        await app(scope, receive, send_with_timing)
    return timed
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
