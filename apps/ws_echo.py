"""A WebSocket echo as a pure ASGI app: every message comes back as it came, text or bytes.

``app`` accepts a WebSocket on any path and sends each message back in the same kind: a text
message (``websocket.receive`` with ``text``) as text, a binary one as bytes, an empty one as an
empty one, until the client closes (``websocket.disconnect``). It offers no subprotocol and
sends nothing of its own, so every frame on the wire after the handshake is the server's
doing: what Autobahn|Testsuite's fuzzing client needs (``bench autobahn``), and the echo that
a load generator measures round trips against. An HTTP request gets a one-line text/plain
answer saying so (200 for ``GET``, 405 for another method). It also speaks the lifespan
protocol, so every server can run it with lifespan on.

Spec: ASGI WebSocket spec 2.4 (``websocket.connect``, ``websocket.accept``,
``websocket.receive``: exactly one of ``bytes`` and ``text`` is non-None, ``websocket.send``,
``websocket.disconnect``); RFC 6455 §5.6 (text and binary data frames); ASGI lifespan protocol.

Run it: ``uvicorn apps.ws_echo:app`` or ``toyserve apps.ws_echo:app``, then
``python -m websockets ws://127.0.0.1:8000/``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

HTTP_ANSWER = b"a WebSocket echo: connect with ws://, every message comes back\n"


# --8<-- [start:echo]
async def echo(receive: Receive, send: Send) -> None:
    """Accept, then send every message back in its own kind until the client leaves."""
    if (await receive())["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        # Exactly one of the two keys is non-None (ASGI WebSocket spec): test for None, not
        # for truth, so an empty text message is echoed as an empty text message.
        if message.get("text") is not None:
            await send({"type": "websocket.send", "text": message["text"]})
        else:
            await send({"type": "websocket.send", "bytes": message.get("bytes") or b""})
# --8<-- [end:echo]


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _http(scope: Scope, receive: Receive, send: Send) -> None:
    while True:  # read the request body, if any, before answering
        message = await receive()
        if message["type"] == "http.disconnect" or not message.get("more_body", False):
            break
    status = 200 if scope["method"] in ("GET", "HEAD") else 405
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(HTTP_ANSWER)).encode())]})
    await send({"type": "http.response.body", "body": HTTP_ANSWER})


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI application: a WebSocket echo on every path (see the module docstring)."""
    if scope["type"] == "websocket":
        await echo(receive, send)
    elif scope["type"] == "http":
        await _http(scope, receive, send)
    elif scope["type"] == "lifespan":
        await _lifespan(receive, send)
