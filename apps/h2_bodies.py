"""The app of ``bench h2``: the layers experiment's user endpoint plus two fixed GET bodies.

One pure ASGI app, so HTTP/1.1 (wrk) and HTTP/2 (h2load) rows on every server run the same
code: ``POST /`` echoes the JSON user exactly as :mod:`apps.asgi_user` does (it is that app);
``GET /short`` answers :data:`SHORT_BODY` (22 bytes, a body that fits in one DATA frame, so a
request costs mostly headers and framing); ``GET /long`` answers :data:`LONG_BODY` (430 KB,
``LONG_SIZE`` bytes: dozens of 16 KB DATA frames and several flow-control windows, so a
request costs mostly window updates and copying). Both have a Content-Length.

Spec: ASGI HTTP spec (``http.response.start``, ``http.response.body``); RFC 9113 §6.1 (DATA
frames), §6.9 (flow control).

Run it: ``hypercorn apps.h2_bodies:app`` (h2c and HTTP/1.1 on one port).
"""

from __future__ import annotations

from apps.asgi_user import Receive, Scope, Send
from apps.asgi_user import app as user_app

#: The short body: 22 bytes of JSON (with its newline).
SHORT_BODY = b'{"message": "hello!"}\n'
#: The long body's size, bytes (430 KB).
LONG_SIZE = 430_000
#: The long body: ``LONG_SIZE`` bytes of a repeated line of text.
LONG_BODY = (b"0123456789abcdef" * (LONG_SIZE // 16 + 1))[:LONG_SIZE]

_BODIES = {"/short": (SHORT_BODY, b"application/json"), "/long": (LONG_BODY, b"text/plain")}


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """``GET /short`` and ``GET /long`` answer their body; everything else is the user app."""
    fixed = _BODIES.get(scope.get("path", "")) if scope["type"] == "http" else None
    if fixed is None or scope["method"] not in ("GET", "HEAD"):
        await user_app(scope, receive, send)
        return
    body, content_type = fixed
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body",
                "body": body if scope["method"] == "GET" else b""})
