"""A plain ASGI app with one route per kind of app behaviour a server must survive (issue 8).

No framework: routes are matched on ``scope["path"]`` and take their parameters from the query
string. What a request observed inside the app (that it started, how many body bytes it got,
what ``send()`` did after the client left) is recorded per ``key`` in ``STATE``, and
``GET /status?key=K`` returns that record as JSON, so a test can learn it through a second
request to the same server process instead of sleeping.

Routes:

- ``/status?key=K``: the record of ``K`` (``{}`` when there is none yet).
- ``/slow?s=SECONDS&key=K``: records ``started``, sleeps, answers ``200 slow done``.
- ``/upload?key=K``: records the body bytes received so far after every ``receive()``, then
  echoes the body (``{"body": ...}``).
- ``/drain``: reads the whole request body, answers its length.
- ``/send-after-disconnect?key=K``: starts a streaming response, waits for
  ``http.disconnect``, then calls ``send()`` again and records what happened
  (``{"outcome": "returned" | "raised", "type": ..., "oserror": bool}``).
- ``/stream-forever``: streams 64 KiB chunks until ``send()`` fails or 30 s pass (a client that
  never reads makes ``send()`` block on flow control).
- ``/stream-before-receive``: starts a streaming response, sends ``first``, only then reads the
  request body, then sends ``last``.
- ``/receive-in-task``: sse-starlette's shape: one task loops on ``receive()`` (it listens
  for ``http.disconnect``) while the route's own task sends ``first``, waits until that
  task has the whole body, then sends `` N`` (the body's length) and cancels the listener.
- ``/count``: reads the request body without keeping it and answers its length (a body of
  millions of one-byte pieces costs the app nothing, so any wait is the server's).
- ``/raise?exc=NAME``: raises ``SystemExit``, ``KeyboardInterrupt``,
  ``asyncio.CancelledError`` or ``RuntimeError`` before starting a response.
- ``/bad?case=NAME``: one app mistake in the response (see ``BAD_RESPONSES``).
- anything else: the echo app of ``tests/support/echo_app.py``.

Its waits use anyio, so it runs on trio too (toy-anyio-trio).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from urllib.parse import parse_qs

import anyio

from tests.support.echo_app import app as echo_app

STATE: dict[str, dict[str, Any]] = {}

EXCEPTIONS: dict[str, type[BaseException]] = {
    "SystemExit": SystemExit,
    "KeyboardInterrupt": KeyboardInterrupt,
    "CancelledError": asyncio.CancelledError,
    "RuntimeError": RuntimeError,
}

# case -> (status, headers, body messages): each a mistake the app makes in its response,
# before any byte of it could have been written (the head leaves with the first body message).
BAD_RESPONSES: dict[str, tuple[Any, list[tuple[bytes, bytes]], list[dict[str, Any]]]] = {
    # RFC 9110 §15.2: a 1xx is interim, never the final response; ASGI has no 1xx message.
    "status-103": (103, [(b"content-length", b"2")], [{"body": b"ok"}]),
    "status-100": (100, [], [{"body": b"ok"}]),
    # RFC 9110 §15: status-code = 3DIGIT, 100..599.
    "status-1000": (1000, [(b"content-length", b"2")], [{"body": b"ok"}]),
    "status-0": (0, [(b"content-length", b"2")], [{"body": b"ok"}]),
    "status-minus-1": (-1, [(b"content-length", b"2")], [{"body": b"ok"}]),
    # RFC 9110 §8.6 / RFC 9112 §6.3: differing Content-Length values are unframeable.
    "two-content-lengths": (200, [(b"content-length", b"5"), (b"content-length", b"6")],
                            [{"body": b"hello"}]),
    # Content-Length = 1*DIGIT; Python's int() accepts both of these.
    "content-length-plus": (200, [(b"content-length", b"+5")], [{"body": b"hello"}]),
    "content-length-underscore": (200, [(b"content-length", b"1_0")],
                                  [{"body": b"0123456789"}]),
    # RFC 9112 §6.1: the server frames the message; a coding it does not apply is a lie.
    "transfer-encoding-gzip": (200, [(b"transfer-encoding", b"gzip")],
                               [{"body": b"hello", "more_body": True}, {"body": b""}]),
    # ASGI HTTP spec: body is a bytestring.
    "str-body": (200, [], [{"body": "text"}]),
    # RFC 9110 §5.1: field-name = token; §5.5: no CR/LF in a field value.
    "bad-header-name": (200, [(b"x bad", b"1"), (b"content-length", b"2")], [{"body": b"ok"}]),
    "bad-header-value": (200, [(b"x-a", b"v\r\nx-injected: 1"), (b"content-length", b"2")],
                         [{"body": b"ok"}]),
}


def _query(scope: dict[str, Any]) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(scope["query_string"].decode("latin-1")).items()}


async def _respond(send: Any, status: int, body: bytes,
                   content_type: bytes = b"text/plain") -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _read_body(receive: Any, record: dict[str, Any] | None = None) -> bytes | None:
    """The whole request body, or None when the client disconnected first."""
    body: bytes = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += bytes(message.get("body", b""))
        if record is not None:
            record["received"] = len(body)
        if not message.get("more_body", False):
            return body


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await echo_app(scope, receive, send)  # it completes startup and shutdown
        return
    path = scope["path"]
    query = _query(scope)
    key = query.get("key", "")
    if path == "/status":
        await _respond(send, 200, json.dumps(STATE.get(key, {})).encode(), b"application/json")
    elif path == "/slow":
        STATE[key] = {"started": True}
        await anyio.sleep(float(query.get("s", "1")))
        await _respond(send, 200, b"slow done")
    elif path == "/upload":
        record = STATE[key] = {"received": 0}
        body = await _read_body(receive, record)
        if body is not None:
            await _respond(send, 200, json.dumps({"body": body.decode("latin-1")}).encode(),
                           b"application/json")
    elif path == "/drain":
        body = await _read_body(receive)
        if body is not None:
            await _respond(send, 200, str(len(body)).encode())
    elif path == "/send-after-disconnect":
        await _send_after_disconnect(receive, send, STATE.setdefault(key, {}))
    elif path == "/stream-forever":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        chunk = b"x" * 65536
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    elif path == "/stream-before-receive":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        await _read_body(receive)
        await send({"type": "http.response.body", "body": b"last"})
    elif path == "/receive-in-task":
        await _receive_in_task(receive, send)
    elif path == "/count":
        size = 0
        while (message := await receive())["type"] != "http.disconnect":
            size += len(message.get("body", b""))
            if not message.get("more_body", False):
                await _respond(send, 200, str(size).encode())
                break
    elif path == "/raise":
        raise EXCEPTIONS[query.get("exc", "RuntimeError")]()
    elif path == "/bad":
        status, headers, bodies = BAD_RESPONSES[query["case"]]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        for message in bodies:
            await send({"type": "http.response.body", **message})
    else:
        await echo_app(scope, receive, send)


async def _send_after_disconnect(receive: Any, send: Any, record: dict[str, Any]) -> None:
    """Stream a first piece, wait for the client to go, then call send() once more.

    ASGI HTTP spec 2.4 (``send`` on a closed connection): "If send() is called on a closed
    connection the server should raise a server-specific subclass of OSError."
    """
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"first", "more_body": True})
    record["first_sent"] = True
    with anyio.fail_after(10):
        while (await receive())["type"] != "http.disconnect":
            pass
    record["disconnect_seen"] = True
    try:
        await send({"type": "http.response.body", "body": b"after", "more_body": True})
    except BaseException as exc:  # noqa: BLE001 - recording exactly what the server raised
        record.update(outcome="raised", type=type(exc).__name__,
                      oserror=isinstance(exc, OSError))
        raise
    record.update(outcome="returned", type=None, oserror=False)


async def _receive_in_task(receive: Any, send: Any) -> None:
    """Send a response while another task waits in ``receive()``, as sse-starlette does (its
    ``listen_for_disconnect`` task loops on ``receive()`` beside the streaming task).

    The listener starts first, so its ``receive()`` asks for the body (a client that sent
    ``Expect: 100-continue`` gets its 100 now: RFC 9110 §10.1.1) while this task's first
    ``send()`` follows at once: a server must let the two writes take turns.
    """
    listening = anyio.Event()
    body_read = anyio.Event()
    received = 0

    async def listen(scope: anyio.CancelScope) -> None:
        nonlocal received
        listening.set()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                scope.cancel()
                return
            received += len(message.get("body", b""))
            if not message.get("more_body", False):
                body_read.set()

    async with anyio.create_task_group() as group:
        group.start_soon(listen, group.cancel_scope)
        await listening.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        with anyio.fail_after(10):
            await body_read.wait()
        await send({"type": "http.response.body", "body": f" {received}".encode()})
        group.cancel_scope.cancel()
