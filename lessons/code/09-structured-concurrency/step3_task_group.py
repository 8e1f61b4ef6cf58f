"""Lesson 9, step 3: a task group per request, so a client that leaves cancels its app.

Run: ``.venv/bin/python lessons/code/09-structured-concurrency/step3_task_group.py 8000``
(or ``8000 trio``; ``SLOW_SECONDS``, default 2), then
``curl -s --max-time 0.5 http://127.0.0.1:8000/slow``: curl gives up after half a second, and
the server prints ``cancelled GET /slow: the client left`` at once, not two seconds later.

In step 2 the connection's task is inside ``await app(...)`` while the app runs, so nobody
reads the socket: a client that hangs up goes unnoticed until the answer is written to
nobody. Step 1 noticed, because asyncio called ``connection_lost``, which cancelled the app's
Task. Here the request gets a task group of its own with two tasks in it: the app, and a
watcher that reads the socket once. If that read says the client is gone, the watcher cancels
the group's scope, which cancels the app; if the app finishes first, it cancels the watcher.
Either way, leaving the ``async with`` block means both tasks are over.

If the read brings bytes instead (a pipelined request), the watcher hands them to h11 and
stops reading, which is step 1's ``pause_reading`` without a flag to undo.

Deliberately left out: everything step 2 leaves out; noticing a client that leaves after
sending a pipelined request (the watcher has stopped reading by then, as step 1 had paused).
Spec: RFC 9112 §9.6 (tear-down); ASGI specification, "HTTP" (``http.disconnect``, what an
ASGI server tells an app whose client left); anyio's documentation, "Cancellation and
timeouts".
"""

from __future__ import annotations

import sys

import anyio
import anyio.abc
import h11
from step2_anyio import app, next_event, send


# --8<-- [start:run_app]
async def watch_for_disconnect(stream: anyio.abc.ByteStream, conn: h11.Connection,
                               scope: anyio.CancelScope) -> None:
    """While the app runs: read the socket once; cancel ``scope`` if the client left."""
    try:
        data = await stream.receive(65536)
    except (anyio.EndOfStream, anyio.BrokenResourceError):
        scope.cancel()  # the client left: cancel the app
        return
    conn.receive_data(data)  # a pipelined request: h11 keeps it, and we stop reading


async def run_app(stream: anyio.abc.ByteStream, conn: h11.Connection, request: h11.Request,
                  body: bytes) -> bytes | None:
    """The app's answer, or None when the client left before it was ready."""
    async with anyio.create_task_group() as request_tasks:
        request_tasks.start_soon(watch_for_disconnect, stream, conn, request_tasks.cancel_scope)
        answer = await app(request.method.decode(), request.target.decode(), body)
        request_tasks.cancel_scope.cancel()  # the answer is ready: stop watching
        return answer
    return None  # the watcher cancelled the group: we get here without an answer
# --8<-- [end:run_app]


# --8<-- [start:handle]
async def handle(stream: anyio.abc.ByteStream) -> None:
    """Step 2's connection task, with ``run_app`` in place of a bare ``await app(...)``."""
    conn = h11.Connection(our_role=h11.SERVER)
    async with stream:
        try:
            while type(request := await next_event(stream, conn)) is h11.Request:
                body = b""
                while type(part := await next_event(stream, conn)) is h11.Data:
                    body += part.data
                if (answer := await run_app(stream, conn, request, body)) is None:
                    return  # the client left
                await send(stream, conn, 200, answer)
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except h11.RemoteProtocolError as exc:
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                await send(stream, conn, exc.error_status_hint, f"{exc}\n".encode())
        except (TimeoutError, anyio.BrokenResourceError):
            pass  # idle too long, or reset by the client
# --8<-- [end:handle]


async def serve(port: int) -> None:
    """Step 2's ``serve``, starting this step's ``handle``."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port)
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    async with listener, anyio.create_task_group() as connections:
        await listener.serve(handle, task_group=connections)


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    backend = sys.argv[2] if len(sys.argv) > 2 else "asyncio"
    print(f"running on {backend}", flush=True)
    try:
        anyio.run(serve, port, backend=backend)
    except KeyboardInterrupt:
        pass
