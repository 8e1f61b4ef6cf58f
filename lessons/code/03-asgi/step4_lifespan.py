"""Lesson 3, step 4: lifespan. Set things up once before the first request, tear them down last.

Run: ``.venv/bin/python lessons/code/03-asgi/step4_lifespan.py 8000``, then
``curl http://127.0.0.1:8000/`` a few times, and stop the server with Ctrl-C: it prints how many
requests it served, from its shutdown handler.

Besides ``http`` (and ``websocket``) scopes, a server may call the app once with a
``lifespan`` scope: the app receives ``lifespan.startup``, prepares (opens a database pool,
loads a model) and answers ``lifespan.startup.complete``; at the end it receives
``lifespan.shutdown`` and answers ``lifespan.shutdown.complete``. Whatever the app puts in
``scope["state"]`` during startup, the server copies into every request's scope. FastAPI's
``lifespan=`` context manager is built on this.

Deliberately left out: reporting a failed startup (``lifespan.startup.failed`` with a
message), which makes the server exit instead of serving.
Spec: ASGI specification, "Lifespan Protocol" (version 2.0, with "Lifespan State").
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


# --8<-- [start:lifespan]
async def lifespan(scope: Scope, receive: Receive, send: Send) -> None:
    """Run once for the server's whole life: startup, then (much later) shutdown."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            # State shared with every request: here a counter, in real apps a pool or a client.
            scope["state"]["stats"] = {"requests": 0, "started": time.time()}
            print("lifespan: startup complete", flush=True)
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            stats = scope["state"]["stats"]
            print(f"lifespan: shutdown after {stats['requests']} requests", flush=True)
            await send({"type": "lifespan.shutdown.complete"})
            return
# --8<-- [end:lifespan]


# --8<-- [start:app]
async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """Dispatch on the scope type: lifespan to ``lifespan``, HTTP requests counted."""
    if scope["type"] == "lifespan":
        await lifespan(scope, receive, send)
        return
    # uvicorn copies the state dict shallowly per request, so the stats dict itself is shared
    stats = scope["state"]["stats"]
    stats["requests"] += 1
    body = f"request {stats['requests']} since startup\n".encode()
    await send({
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))],
    })
    await send({"type": "http.response.body", "body": body})
# --8<-- [end:app]


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]) if len(sys.argv) > 1 else 8000,
                lifespan="on")
