"""Lesson 9, step 1: lesson 4's h11 server as an asyncio Protocol: callbacks, a timer handle,
and pause_reading bookkeeping.

Run: ``.venv/bin/python lessons/code/09-structured-concurrency/step1_protocol.py 8000``
(``SLOW_SECONDS``, default 2: how long ``/slow`` takes; ``IDLE_SECONDS``, default 5: how long
a quiet client is waited for). Then
``curl -s http://127.0.0.1:8000/slow & curl -s -d hello http://127.0.0.1:8000/echo``.

The server of lesson 4's step 2 (the same answers, the same h11 loop), made concurrent the way
toy-h11 and uvicorn are: the event loop calls ``data_received`` with bytes, and the protocol
object remembers between calls where it is. Four pieces of state carry what straight-line
code would keep in local variables and in its position in the code: the request being read,
the app's task, the idle timer's handle, and whether reading is paused. Each callback must
leave them consistent for whichever callback comes next. Step 2 writes the same server with
none of them.

Deliberately left out: everything lesson 4's step 2 leaves out (limits on sizes, ``Expect:
100-continue``, an application interface beyond one coroutine); graceful shutdown.
Spec: RFC 9112 §9.3 (persistence), §9.6 (tear-down); Python's asyncio documentation,
"Transports and Protocols" (``pause_reading``, ``resume_reading``, ``call_later``).
"""

from __future__ import annotations

import asyncio
import os
import sys
from http import HTTPStatus

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
            await asyncio.sleep(SLOW_SECONDS)
        except asyncio.CancelledError:
            print(f"cancelled {method} {target}: the client left", flush=True)
            raise
    return f"{method} {target}: {len(body)} bytes\n".encode()
# --8<-- [end:app]


class H11Protocol(asyncio.Protocol):
    """One connection: h11 parses, callbacks move the bytes, a Task runs the app."""

    # --8<-- [start:state]
    def __init__(self) -> None:
        self.conn = h11.Connection(our_role=h11.SERVER)
        self.transport: asyncio.Transport | None = None
        self.request: h11.Request | None = None  # the request whose body we are reading
        self.body = b""
        self.task: asyncio.Task[None] | None = None  # the app, while it runs
        self.idle_timer: asyncio.TimerHandle | None = None  # armed while we wait for bytes
        self.paused = False  # reading paused: a pipelined request waits for our answer
    # --8<-- [end:state]

    # --8<-- [start:callbacks]
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.arm_idle_timer()

    def data_received(self, data: bytes) -> None:
        self.cancel_idle_timer()
        self.conn.receive_data(data)
        self.handle_events()

    def eof_received(self) -> bool | None:
        self.conn.receive_data(b"")  # h11 turns this into ConnectionClosed
        self.handle_events()
        return None  # let asyncio close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.cancel_idle_timer()
        if self.task is not None:
            self.task.cancel()  # nobody is left to read the answer
    # --8<-- [end:callbacks]

    # --8<-- [start:timer]
    def arm_idle_timer(self) -> None:
        self.cancel_idle_timer()
        loop = asyncio.get_running_loop()
        self.idle_timer = loop.call_later(IDLE_SECONDS, self.close)

    def cancel_idle_timer(self) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
    # --8<-- [end:timer]

    # --8<-- [start:handle_events]
    def handle_events(self) -> None:
        """Pull events out of h11 until it needs bytes, or the app has a request to answer."""
        while self.task is None:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError as exc:
                if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    self.send(exc.error_status_hint, f"{exc}\n".encode())
                self.close()
                return
            if event is h11.NEED_DATA:
                self.arm_idle_timer()  # waiting for the client again
                return
            if type(event) is h11.Request:
                self.request, self.body = event, b""
            elif type(event) is h11.Data:
                self.body += event.data
            elif type(event) is h11.EndOfMessage:
                assert self.request is not None
                coro = self.run_app(self.request, self.body)
                self.task = asyncio.get_running_loop().create_task(coro)
            else:  # ConnectionClosed
                self.close()
                return
        # The app runs. Bytes the client sends meanwhile (a pipelined request) would pile up
        # in h11's buffer: once h11 says PAUSED, stop reading until we have answered.
        if self.conn.next_event() is h11.PAUSED and self.transport is not None:
            self.transport.pause_reading()
            self.paused = True
    # --8<-- [end:handle_events]

    # --8<-- [start:run_app]
    async def run_app(self, request: h11.Request, body: bytes) -> None:
        """Run the app, answer, then pick up where ``handle_events`` left off."""
        answer = await app(request.method.decode(), request.target.decode(), body)
        self.task = None
        if self.transport is None or self.transport.is_closing():
            return
        self.send(200, answer)
        if self.conn.our_state is h11.MUST_CLOSE:
            self.close()
            return
        self.conn.start_next_cycle()
        if self.paused:  # in this order: handle_events may pause again
            self.paused = False
            self.transport.resume_reading()
        self.handle_events()  # a pipelined request may already be in h11's buffer
    # --8<-- [end:run_app]

    def send(self, status: int, body: bytes) -> None:
        """Answer with ``status`` and a plain-text ``body``; h11 frames it."""
        headers = [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))]
        reason = HTTPStatus(status).phrase
        data = self.conn.send(h11.Response(status_code=status, headers=headers, reason=reason))
        data += self.conn.send(h11.Data(data=body))
        data += self.conn.send(h11.EndOfMessage())
        assert self.transport is not None
        self.transport.write(data)

    def close(self) -> None:
        self.cancel_idle_timer()
        if self.transport is not None:
            self.transport.close()


# --8<-- [start:serve]
async def serve(port: int) -> None:
    """Listen on 127.0.0.1:``port``; asyncio makes one ``H11Protocol`` per connection."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(H11Protocol, "127.0.0.1", port)
    print(f"listening on http://127.0.0.1:{port} (asyncio Protocol)", flush=True)
    async with server:
        await server.serve_forever()
# --8<-- [end:serve]


if __name__ == "__main__":
    try:
        asyncio.run(serve(int(sys.argv[1]) if len(sys.argv) > 1 else 8000))
    except KeyboardInterrupt:
        pass
