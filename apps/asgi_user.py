"""The user endpoint as a pure ASGI app: no framework, just the three ASGI messages.

``app`` answers ``POST /`` with the echoed user (``application/json``), a body that is not a
user with 400 or 422 and a JSON error body (see :mod:`apps.user`), any other path with 404 and
any other method on ``/`` with 405. It also speaks the lifespan protocol, acknowledging
startup and shutdown, so every server can run it with lifespan on.

Spec: ASGI HTTP connection scope, ``http.request`` (read until ``more_body`` is false),
``http.response.start`` and ``http.response.body``; ASGI lifespan protocol.

Run it: ``uvicorn apps.asgi_user:app`` or ``toyserve apps.asgi_user:app``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from apps.user import CONTENT_TYPE, UserError, endpoint

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


# --8<-- [start:respond]
async def _respond(send: Send, status: int, body: bytes,
                   extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [
        (b"content-type", CONTENT_TYPE.encode()),
        (b"content-length", str(len(body)).encode()),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
# --8<-- [end:respond]


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


# --8<-- [start:app]
async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI application: ``POST /`` echoes the JSON user in the request body."""
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    if scope["type"] != "http":
        return
    if scope["path"] != "/":
        await _respond(send, 404, b'{"error": "not found"}')
        return
    if scope["method"] != "POST":
        await _respond(send, 405, b'{"error": "method not allowed"}', [(b"allow", b"POST")])
        return
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    try:
        answer = endpoint(body)
    except UserError as exc:
        await _respond(send, exc.status, exc.body())
        return
    await _respond(send, 200, answer)
# --8<-- [end:app]
