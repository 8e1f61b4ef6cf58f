"""A WebSocket echo app for end-to-end tests (any ASGI server, run in a thread or a process).

``/close``: accepts, then closes with 4001 "bye"; any other path accepts (the first offered
subprotocol) and echoes each message until the client leaves. The ``websocket.disconnect``
the app last saw is kept in ``DISCONNECTS`` (in-process servers only). Plain HTTP requests
get ``200 plain``; lifespan is supported.
"""

from __future__ import annotations

from typing import Any

DISCONNECTS: list[dict[str, Any]] = []


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            kind = message["type"].rsplit(".", 1)[1]
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"plain"})
        return
    assert (await receive())["type"] == "websocket.connect"
    subprotocols = scope["subprotocols"]
    await send({"type": "websocket.accept", "subprotocol": subprotocols[0] if subprotocols
                else None})
    if scope["path"] == "/close":
        await send({"type": "websocket.close", "code": 4001, "reason": "bye"})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            DISCONNECTS.append(message)
            return
        await send({"type": "websocket.send", "text": message.get("text"),
                    "bytes": message.get("bytes")})
