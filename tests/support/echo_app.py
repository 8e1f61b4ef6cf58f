"""Small ASGI apps for server tests: echo the request, stream, fail on purpose."""

from __future__ import annotations

import json
from typing import Any


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Echo: answers any HTTP request with a JSON description of the request and its body.

    The response body is ``{"method", "path", "raw_path", "query_string", "headers", "body"}``
    (bytes shown as latin-1 strings), with a Content-Length.
    """
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    payload = json.dumps({
        "method": scope["method"],
        "path": scope["path"],
        "raw_path": scope["raw_path"].decode("latin-1"),
        "query_string": scope["query_string"].decode("latin-1"),
        "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]],
        "body": body.decode("latin-1"),
    }).encode()
    await send({
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode())],
    })
    await send({"type": "http.response.body", "body": payload})


async def task_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Uses ``asyncio.timeout`` before its first await, which needs ``current_task()``: the
    server must run each request in an asyncio Task. Answers ``task=True`` when it does."""
    import asyncio

    if scope["type"] != "http":
        return
    async with asyncio.timeout(5):
        await receive()
    body = f"task={asyncio.current_task() is not None}".encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
