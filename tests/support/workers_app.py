"""Apps for tests/test_workers.py: ``/`` answers the worker's pid, ``/slow`` takes 1.5 s,
``/block`` blocks its worker (``time.sleep``: an ASGI event loop stops beating); lifespan
events and the start of ``/slow`` are printed on stderr, where the tests look for them."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

print(f"imported {os.getpid()}", file=sys.stderr, flush=True)  # --preload: in the master


async def app(scope: dict[str, Any], receive: Callable[..., Any],
              send: Callable[..., Any]) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            kind = "startup" if message["type"] == "lifespan.startup" else "shutdown"
            print(f"lifespan {kind} {os.getpid()}", file=sys.stderr, flush=True)
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
    path = scope["path"]
    if path == "/slow":
        print(f"slow started {os.getpid()}", file=sys.stderr, flush=True)
        await asyncio.sleep(1.5)
    elif path == "/block":
        time.sleep(4)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": str(os.getpid()).encode()})


def wsgi_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    path = environ["PATH_INFO"]
    if path == "/slow":
        print(f"slow started {os.getpid()}", file=sys.stderr, flush=True)
        time.sleep(1.5)
    elif path == "/block":
        time.sleep(4)
    elif path == "/multiprocess":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [str(environ["wsgi.multiprocess"]).encode()]
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [str(os.getpid()).encode()]
