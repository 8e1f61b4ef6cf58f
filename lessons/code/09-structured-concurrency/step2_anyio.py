"""Lesson 9, step 2: the same server as straight-line code on anyio: a task per connection,
a cancel scope for the idle deadline, and no callbacks.

Run: ``.venv/bin/python lessons/code/09-structured-concurrency/step2_anyio.py 8000`` on
asyncio, the same with ``8000 trio`` on trio
(``SLOW_SECONDS``, default 2; ``IDLE_SECONDS``, default 5, as in step 1). Then
``curl -s http://127.0.0.1:8000/slow & curl -s -d hello http://127.0.0.1:8000/echo``.

``handle`` is lesson 4's blocking ``handle`` with ``await`` in front of every read and write:
it reads with ``receive()`` when h11 says ``NEED_DATA``, runs the app, sends the answer, and
loops. What step 1 kept in attributes is kept here by where the code is: the request and its
body are local variables, "the app is running" is the line ``await app(...)``, and "reading is
paused" is every moment the task is not inside ``receive()``. The idle timer is a cancel
scope around that one ``receive()``: when the deadline passes, ``fail_after`` cancels it, and
the ``with`` block turns that into ``TimeoutError`` as it is left; leaving it in time disarms
it.

Each connection is a task in one task group, so the server holds a task per connection
where step 1 held a Protocol object (and a Task only while an app ran). The task group is
the structure: ``serve`` cannot return while a connection task still runs, and an error or a
cancellation in ``serve`` reaches every connection.

anyio runs the same code on asyncio and on trio: the backend is ``anyio.run``'s argument.

Deliberately left out: everything step 1 leaves out; noticing a client that leaves while the
app runs (step 3 adds it).
Spec: RFC 9112 §9.3 (persistence), §9.6 (tear-down); anyio's documentation, "Creating and
managing tasks", "Cancellation and timeouts", "Using sockets and streams".
"""

from __future__ import annotations

import os
import sys
from http import HTTPStatus

import anyio
import anyio.abc
import h11

SLOW_SECONDS = float(os.environ.get("SLOW_SECONDS", "2"))
"""How long the app takes to answer ``/slow``, seconds."""
IDLE_SECONDS = float(os.environ.get("IDLE_SECONDS", "5"))
"""How long we wait for a client's next bytes before we close, seconds."""


# --8<-- [start:app]
async def app(method: str, target: str, body: bytes) -> bytes:
    """The answer to one request: what was asked and how many body bytes came with it.
    ``/slow`` first waits ``SLOW_SECONDS``; if it is cancelled meanwhile, it says so."""
    if target.startswith("/slow"):
        try:
            await anyio.sleep(SLOW_SECONDS)
        except anyio.get_cancelled_exc_class():  # asyncio.CancelledError or trio.Cancelled
            print(f"cancelled {method} {target}: the client left", flush=True)
            raise
    return f"{method} {target}: {len(body)} bytes\n".encode()
# --8<-- [end:app]


# --8<-- [start:next_event]
async def next_event(stream: anyio.abc.ByteStream, conn: h11.Connection) -> object:
    """The next event from ``conn``, reading ``stream`` while h11 needs bytes.

    Raises:
        TimeoutError: the client sent nothing for ``IDLE_SECONDS``.
    """
    while (event := conn.next_event()) is h11.NEED_DATA:
        try:
            with anyio.fail_after(IDLE_SECONDS):  # the idle timer, armed for this wait only
                data = await stream.receive(65536)
        except anyio.EndOfStream:
            data = b""  # the client closed: h11 makes it ConnectionClosed
        conn.receive_data(data)
    return event
# --8<-- [end:next_event]


# --8<-- [start:send]
async def send(stream: anyio.abc.ByteStream, conn: h11.Connection, status: int,
               body: bytes) -> None:
    """Answer with ``status`` and a plain-text ``body``; h11 frames it."""
    headers = [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))]
    reason = HTTPStatus(status).phrase
    data = conn.send(h11.Response(status_code=status, headers=headers, reason=reason))
    data += conn.send(h11.Data(data=body))
    data += conn.send(h11.EndOfMessage())
    await stream.send(data)
# --8<-- [end:send]


# --8<-- [start:handle]
async def handle(stream: anyio.abc.ByteStream) -> None:
    """One connection's task: serve requests until either side is done with it."""
    conn = h11.Connection(our_role=h11.SERVER)
    async with stream:  # closes the socket however we leave
        try:
            while type(request := await next_event(stream, conn)) is h11.Request:
                body = b""
                while type(part := await next_event(stream, conn)) is h11.Data:
                    body += part.data
                answer = await app(request.method.decode(), request.target.decode(), body)
                await send(stream, conn, 200, answer)
                if conn.our_state is h11.MUST_CLOSE:
                    return  # "Connection: close", HTTP/1.0, or a body we could not frame
                conn.start_next_cycle()  # both sides DONE: read the next request
        except h11.RemoteProtocolError as exc:
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                await send(stream, conn, exc.error_status_hint, f"{exc}\n".encode())
        except TimeoutError:
            pass  # idle too long: close without a word
        except anyio.BrokenResourceError:
            pass  # the client reset the connection: nobody is left to answer
# --8<-- [end:handle]


# --8<-- [start:serve]
async def serve(port: int) -> None:
    """Listen on 127.0.0.1:``port``; start one ``handle`` task per connection."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port)
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    async with listener, anyio.create_task_group() as connections:
        # the accept loop: for each connection, connections.start_soon(handle, stream)
        await listener.serve(handle, task_group=connections)
# --8<-- [end:serve]


# --8<-- [start:main]
if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    backend = sys.argv[2] if len(sys.argv) > 2 else "asyncio"  # or "trio"
    print(f"running on {backend}", flush=True)
    try:
        anyio.run(serve, port, backend=backend)
    except KeyboardInterrupt:
        pass
# --8<-- [end:main]
