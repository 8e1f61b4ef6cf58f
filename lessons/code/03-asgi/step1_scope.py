"""Lesson 3, step 1: an ASGI application: scope, receive, send.

Run: ``.venv/bin/python lessons/code/03-asgi/step1_scope.py 8000`` (it starts uvicorn), or
``uvicorn --app-dir lessons/code/03-asgi step1_scope:app --port 8000``; then
``curl -i -d 'hello' 'http://127.0.0.1:8000/some/path?x=1'``.

An ASGI application is ``async def app(scope, receive, send)``. ``scope`` describes the
connection and the request head; ``await receive()`` returns the next event from the client
(``http.request`` messages carrying the body in pieces, ``more_body`` saying whether another
follows); ``await send(message)`` sends ``http.response.start`` (status and headers) and then
``http.response.body`` messages. The server owns the socket; the app only sees dicts.

Deliberately left out: lifespan (step 4), websockets, routing (step 2).
Spec: ASGI specification, "HTTP & WebSocket ASGI Message Format": Connection Scope,
Request (``http.request``), Response Start, Response Body.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


# --8<-- [start:app]
async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """Answer every HTTP request with what the scope and the body said."""
    if scope["type"] != "http":
        return  # this app speaks HTTP only; uvicorn's lifespan "auto" copes with that
    body = b""
    more_body = True
    while more_body:  # the body may come in several http.request messages
        message = await receive()
        body += message.get("body", b"")
        more_body = message.get("more_body", False)
    lines = [
        f"type={scope['type']} http_version={scope['http_version']}",
        f"method={scope['method']} path={scope['path']} query_string={scope['query_string']!r}",
        f"client={scope['client']} server={scope['server']}",
        *(f"header {name!r}: {value!r}" for name, value in scope["headers"]),
        f"body: {len(body)} bytes",
    ]
    payload = ("\n".join(lines) + "\n").encode()
    await send({
        "type": "http.response.start",
        "status": 200,
        "headers": [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(payload)).encode()),
        ],
    })
    await send({"type": "http.response.body", "body": payload})
# --8<-- [end:app]


# --8<-- [start:run]
if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
# --8<-- [end:run]
