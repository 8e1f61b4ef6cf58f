"""Lesson 3, step 3: a slow request that does not hold the fast ones back.

Run: ``.venv/bin/python lessons/code/03-asgi/step3_slow.py 8000``, then within five seconds, in two
terminals: ``curl http://127.0.0.1:8000/slow`` and ``curl http://127.0.0.1:8000/fast``. This time
the fast one answers at once: ``await asyncio.sleep`` hands the event loop back to uvicorn, which
goes on reading and answering other connections in the same thread. Then try ``/blocking``
(``time.sleep`` in an ``async def``): it freezes the loop, and every client waits, exactly like the
one-at-a-time WSGI server of lesson 2.

Deliberately left out: running blocking code in a thread (``asyncio.to_thread``, or
Starlette's ``run_in_threadpool``), which is how frameworks keep a sync endpoint from
freezing the loop.
Spec: ASGI specification ("Abstract": an app is a coroutine, so one server process can hold
many requests at once while they wait).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

SLOW_SECONDS = float(os.environ.get("SLOW_SECONDS", "5"))
"""How long ``/slow`` and ``/blocking`` wait, seconds."""


# --8<-- [start:app]
async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """``/slow`` waits without blocking; ``/blocking`` blocks the loop; the rest is fast."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/slow":
        await asyncio.sleep(SLOW_SECONDS)  # suspends this request only: the loop runs on
        body = b"slow\n"
    elif scope["path"] == "/blocking":
        time.sleep(SLOW_SECONDS)  # a blocking call in a coroutine: nothing else can run
        body = b"blocking\n"
    else:
        body = b"fast\n"
    await send({
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))],
    })
    await send({"type": "http.response.body", "body": body})
# --8<-- [end:app]


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
