"""An ASGI app that streams its answer without Content-Length, so the server must frame it
(chunked on HTTP/1.1); used to check the ``bare`` baseline's framing."""

from __future__ import annotations

from typing import Any

#: The pieces ``app`` sends, one ``http.response.body`` message each, then an empty last one.
PIECES = (b"hello, ", b"", b"chunked ", b"world")


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answer any HTTP request with :data:`PIECES` as separate body messages."""
    if scope["type"] != "http":
        return
    await receive()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    for piece in PIECES:
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
