"""The backend of ``bench cluster``: the user endpoint, saying which backend answered.

A pure ASGI app, one per backend process, run on any server (``bench cluster`` puts each on
its own toy server behind nginx or HAProxy):

- ``POST /`` echoes the JSON user (:func:`apps.user.endpoint`, as ``apps.asgi_user``), and
  ``GET /`` answers the same user without a body to read, so failover can be shown for a
  method a proxy may retry (GET) and one it may not (POST);
- ``GET /health`` answers ``ok``: what a proxy's active health check (HAProxy's
  ``option httpchk``) and a Kubernetes readiness probe ask;
- ``GET /whoami`` answers the connection as the app sees it, JSON: ``client``, ``scheme``,
  ``host`` (after the server's proxy-header rules, ``toyservers/proxy.py``), and the raw
  ``x-forwarded-for`` and ``forwarded`` headers that came;
- ``GET /count`` answers how many ``/`` requests this process served, JSON
  ``{"backend": name, "requests": n}``: ``bench cluster`` asks every backend directly before
  and after a run, so requests per backend cost the hot path one addition;
- every answer carries ``x-backend: <name>``, so ``curl -i`` shows who answered.

Environment: :data:`NAME_ENV` names the backend (default ``pid <pid>``); :data:`WAIT_ENV`,
milliseconds, makes every ``/`` request await that long before it answers (a request waiting
on a database: requests are then in flight when a backend dies or restarts). Lifespan is
acknowledged.

Spec: ASGI HTTP connection scope and messages; ASGI lifespan protocol.

Run it: ``BACKEND_NAME=b1 .venv/bin/toyserve apps.cluster_app:app --port 8001``.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from apps.user import CONTENT_TYPE, SAMPLE_BODY, UserError, endpoint

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: The variable naming this backend in ``x-backend`` and ``/count``.
NAME_ENV = "BACKEND_NAME"
#: The variable holding how long each ``/`` request waits before answering, milliseconds.
WAIT_ENV = "BACKEND_WAIT_MS"

NAME = os.environ.get(NAME_ENV) or f"pid {os.getpid()}"
WAIT = float(os.environ.get(WAIT_ENV) or 0) / 1000
served = 0  # "/" requests answered by this process


async def respond(send: Send, status: int, body: bytes, content_type: str = CONTENT_TYPE
                  ) -> None:
    """Send one complete response with ``x-backend`` among its headers."""
    headers = [(b"content-type", content_type.encode()),
               (b"content-length", str(len(body)).encode()),
               (b"x-backend", NAME.encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def read_body(receive: Receive) -> bytes | None:
    """The request body, or None when the client went away first."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def whoami(scope: Scope) -> bytes:
    """``/whoami``'s JSON: the connection as the server handed it to the app."""
    headers = {name.decode("latin-1"): value.decode("latin-1")
               for name, value in scope["headers"]}
    client = scope.get("client")
    return json.dumps({"client": f"{client[0]}:{client[1]}" if client else None,
                       "scheme": scope["scheme"], "host": headers.get("host"),
                       "x-forwarded-for": headers.get("x-forwarded-for"),
                       "forwarded": headers.get("forwarded")}).encode()


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI application (module docstring)."""
    global served
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    path, method = scope["path"], scope["method"]
    if path == "/health" and method == "GET":
        await respond(send, 200, b"ok", "text/plain")
    elif path == "/whoami" and method == "GET":
        await respond(send, 200, whoami(scope))
    elif path == "/count" and method == "GET":
        await respond(send, 200, json.dumps({"backend": NAME, "requests": served}).encode())
    elif path != "/":
        await respond(send, 404, b'{"error": "not found"}')
    elif method not in ("GET", "POST"):
        await respond(send, 405, b'{"error": "method not allowed"}')
    else:
        body = await read_body(receive) if method == "POST" else SAMPLE_BODY
        if body is None:
            return
        if WAIT:
            await asyncio.sleep(WAIT)
        try:
            answer = endpoint(body)
        except UserError as exc:
            await respond(send, exc.status, exc.body())
            return
        served += 1
        await respond(send, 200, answer)
