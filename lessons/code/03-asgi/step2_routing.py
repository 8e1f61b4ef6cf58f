"""Lesson 3, step 2: routing and middleware, as plain ASGI callables.

Run: ``.venv/bin/python lessons/code/03-asgi/step2_routing.py 8000``, then ``curl -i http://127.0.0.1:8000/users/7``.

The same two ideas as lesson 2, step 2, in ASGI. A router is an ASGI app that picks another by
``scope["path"]`` and ``scope["method"]``; a middleware is a callable that takes an ASGI app and
returns one. A middleware that changes the response wraps ``send``: it sees each message on
its way out and may edit it. Starlette's ``Router`` and its pure-ASGI middleware are exactly
this, with more features.

Deliberately left out: path parameters beyond one prefix, websocket routes, mounting.
Spec: ASGI specification ("Middleware": a middleware is an app that calls another app),
"HTTP & WebSocket ASGI Message Format".
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


async def text(send: Send, status: int, body: str,
               extra: list[tuple[bytes, bytes]] | None = None) -> None:
    """Send a complete plain-text response: one start message, one body message."""
    data = body.encode()
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(data)).encode()), *(extra or [])],
    })
    await send({"type": "http.response.body", "body": data})


# --8<-- [start:router]
class Router:
    """An ASGI app that dispatches on (path, method): ``/users/*`` is a prefix, ``/`` an exact
    path; 404 and 405 as in lesson 2."""

    def __init__(self) -> None:
        self.routes: dict[str, dict[str, ASGIApp]] = {}

    def route(self, pattern: str, *methods: str) -> Callable[[ASGIApp], ASGIApp]:
        """Decorator: serve ``pattern`` (a prefix when it ends with ``*``) for ``methods``."""
        def register(handler: ASGIApp) -> ASGIApp:
            for method in methods or ("GET",):
                self.routes.setdefault(pattern, {})[method] = handler
            return handler
        return register

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        for pattern, by_method in self.routes.items():
            if path == pattern or (pattern.endswith("*") and path.startswith(pattern[:-1])):
                handler = by_method.get(scope["method"])
                if handler is None:
                    allow = ", ".join(sorted(by_method)).encode()
                    await text(send, 405, "method not allowed\n", [(b"allow", allow)])
                    return
                await handler(scope, receive, send)
                return
        await text(send, 404, f"no route for {path}\n")
# --8<-- [end:router]


# --8<-- [start:middleware]
def add_header(app: ASGIApp, name: bytes, value: bytes) -> ASGIApp:
    """Middleware: add one header to every HTTP response, by wrapping ``send``."""
    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)  # pass lifespan and websockets through untouched
            return

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message["headers"], (name, value)]}
            await send(message)

        await app(scope, receive, send_with_header)
    return wrapped


def access_log(app: ASGIApp) -> ASGIApp:
    """Middleware: one line per request, printed when the last body message has gone out."""
    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0
        sent = 0

        async def logging_send(message: Message) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        await app(scope, receive, logging_send)
        micros = (time.perf_counter() - started) * 1e6
        print(f"{scope['method']} {scope['path']} {status} {sent} B {micros:.0f} µs", flush=True)
    return wrapped
# --8<-- [end:middleware]


# --8<-- [start:app]
router = Router()


@router.route("/")
async def home(scope: Scope, receive: Receive, send: Send) -> None:
    """The home page."""
    await text(send, 200, "home\n")


@router.route("/users/*", "GET")
async def user(scope: Scope, receive: Receive, send: Send) -> None:
    """``/users/<id>``: the part after the prefix is the id."""
    await text(send, 200, f"user {scope['path'].removeprefix('/users/')}\n")


app = access_log(add_header(router, b"x-served-by", b"lesson-3"))
# --8<-- [end:app]

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
