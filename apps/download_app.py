"""The app of ``bench download``: one big file, sent three ways.

- ``GET /pathsend``: the file at ``DOWNLOAD_APP_FILE``, with its Content-Length, by one
  ``http.response.pathsend`` message (ASGI extension "Path Send"): the server reads or
  ``sendfile(2)``s it; 501 when the scope does not offer the extension.
- ``GET /chunks``: the app reads the file ``CHUNK`` bytes at a time and sends each piece as an
  ``http.response.body`` with ``more_body``: what an app does where no server sends files
  (Starlette's ``FileResponse`` without pathsend), every byte through the process.
- ``GET /memory``: the same file read whole into a ``bytes`` and sent as one
  ``http.response.body``: what an app without the extension might do, and what it costs in
  memory.

A plain ASGI callable, no framework, so the rows measure the server and the way, nothing else.
Run it: ``DOWNLOAD_APP_FILE=/path/to/big.bin toyserve apps.download_app:app``.
"""

from __future__ import annotations

import os
from typing import Any

FILE_ENV = "DOWNLOAD_APP_FILE"
CHUNK = 64 * 1024  # bytes read and sent at a time by /chunks (Starlette's FileResponse's size)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answer ``/pathsend``, ``/chunks`` and ``/memory`` as the module docstring says; 404
    elsewhere."""
    if scope["type"] != "http":
        return
    path = os.environ[FILE_ENV]
    size = os.path.getsize(path)
    head = [(b"content-type", b"application/octet-stream"),
            (b"content-length", str(size).encode())]
    if scope["path"] == "/pathsend" and "http.response.pathsend" in scope.get("extensions", {}):
        await send({"type": "http.response.start", "status": 200, "headers": head})
        await send({"type": "http.response.pathsend", "path": path})
    elif scope["path"] == "/chunks":
        await send({"type": "http.response.start", "status": 200, "headers": head})
        with open(path, "rb", buffering=0) as file:
            while piece := file.read(CHUNK):
                await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif scope["path"] == "/memory":
        with open(path, "rb") as file:
            body = file.read()
        await send({"type": "http.response.start", "status": 200, "headers": head})
        await send({"type": "http.response.body", "body": body})
    else:
        status = 501 if scope["path"] == "/pathsend" else 404
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})
