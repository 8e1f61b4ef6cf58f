"""Lesson 10, step 2: step 1 with a deadline, a limit and flow control put back.

Run: ``.venv/bin/python lessons/code/10-http2/step2_bounded.py 8000`` (``IDLE_SECONDS``, default
5), then ``curl --http2-prior-knowledge http://127.0.0.1:8000/``.

Everything that makes HTTP/2 efficient lets a client make a server work for free, and step 1
bounds none of it. Three of the bounds toy-h2 keeps, each with the hostile client that
motivates it (``tests/test_lessons_h2.py`` runs each one against both steps):

- **A deadline.** A connection with no stream open for ``IDLE_SECONDS`` gets ``GOAWAY``
  (NO_ERROR) and is closed; step 1 kept a client that connected and said nothing for ever.
- **A limit.** Rapid reset (CVE-2023-44487): a client opens a stream and resets it at once,
  over and over. Step 1 did not even notice the resets, and each stream's task waited for a
  body for ever. Here a reset cancels its stream's task, and past ``MAX_RESETS`` resets in
  ``RESET_INTERVAL`` seconds the connection ends with ``GOAWAY ENHANCE_YOUR_CALM``.
- **Flow control.** h2 answers some frames itself (a ``PING`` with a ``PING`` ACK, a
  ``SETTINGS`` with its ACK): a client that floods them and reads nothing made step 1 pile the
  answers up in memory (CVE-2019-9512, 9515). Here reading stops while the transport's write
  buffer is past its high-water mark (``pause_writing``) and goes on when it drains, so the
  flood stays in the client's own buffers.

Deliberately left out (toy-h2 has each one): credit given back as the app reads (it still goes
back on arrival: the exercise), the other budgets (control frames, empty DATA frames) and
bounds (CONTINUATION, the header list, concurrent streams refused one by one instead of h2's
connection error), TLS and ALPN, HTTP/1.1 on the same port, ``RST_STREAM`` when the app fails,
``GOAWAY`` on shutdown, trailers, lifespan.
Spec: RFC 9113 §5.4.1 (connection errors, GOAWAY), §6.4 (RST_STREAM), §6.7 (PING), §6.8
(GOAWAY), §7 (ENHANCE_YOUR_CALM), §9.1 (connection management: idle connections); asyncio's
``BaseProtocol.pause_writing``.
Compare with: ``toyservers/h2_server.py`` (``on_timeout``, ``on_reset``, ``pause_writing``)
and ``toyservers/http2.py`` (``FloodBudget``).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
from h2.errors import ErrorCodes

IDLE_SECONDS = float(os.environ.get("IDLE_SECONDS", "5"))  # with no stream open, then GOAWAY
MAX_RESETS = 200  # streams a client may reset per RESET_INTERVAL (toy-h2's budget too)
RESET_INTERVAL = 10.0  # seconds


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """``GET /`` says hello; ``POST /echo`` sends the request body back; else 404."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"] == "/":
        status, body = 200, b"hello over HTTP/2\n"
    elif scope["path"] != "/echo":
        status, body = 404, b"not found\n"
    else:
        status = 200
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


# --8<-- [start:protocol]
class H2Protocol(asyncio.Protocol):
    """One HTTP/2 connection: h2 holds the protocol's state, this class moves the bytes."""

    def __init__(self) -> None:
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self.conn = h2.connection.H2Connection(config)
        self.bodies: dict[int, asyncio.Queue[tuple[bytes, bool]]] = {}
        self.window_open = asyncio.Event()  # set when the client grants more credit
        self.tasks: dict[int, asyncio.Task[None]] = {}  # each open stream's app, by stream id
        self.closing = False  # our GOAWAY is out after a protocol error
        self.timer: asyncio.TimerHandle | None = None  # the idle deadline, while no stream is open
        self.resets: list[float] = []  # when the client reset a stream, in the last interval

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.conn.initiate_connection()  # our SETTINGS: the server's half of the preface
        self.flush()
        self.set_idle()

    def flush(self) -> None:
        self.transport.write(self.conn.data_to_send())

    # --8<-- [start:bounds]
    def set_idle(self) -> None:
        """With no stream open, start the idle deadline; with one, cancel it."""
        if self.timer is not None:
            self.timer.cancel()
        self.timer = None if self.tasks else asyncio.get_running_loop().call_later(
            IDLE_SECONDS, self.goaway, ErrorCodes.NO_ERROR)

    def goaway(self, code: ErrorCodes) -> None:
        """End the connection: GOAWAY with ``code`` (RFC 9113 §6.8), then close."""
        self.conn.close_connection(code)
        self.flush()
        self.transport.close()

    def on_reset(self, stream_id: int) -> None:
        """The client reset a stream: its app stops. Past MAX_RESETS resets in RESET_INTERVAL
        seconds, the connection ends (rapid reset, CVE-2023-44487)."""
        if task := self.tasks.pop(stream_id, None):
            task.cancel()
            self.set_idle()
        now = time.monotonic()
        self.resets = [t for t in self.resets if now - t < RESET_INTERVAL] + [now]
        if len(self.resets) > MAX_RESETS:
            self.goaway(ErrorCodes.ENHANCE_YOUR_CALM)

    def pause_writing(self) -> None:  # asyncio: our write buffer passed its high-water mark,
        self.transport.pause_reading()  # so read no frames h2 would answer

    def resume_writing(self) -> None:  # asyncio: it drained below the low-water mark
        self.transport.resume_reading()
    # --8<-- [end:bounds]

    def data_received(self, data: bytes) -> None:
        if self.closing:  # our GOAWAY is out: drop what still comes until the client closes
            return
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError:  # h2 already queued a GOAWAY with the reason
            self.flush()
            # GOAWAY, then FIN (a half-close): close() would answer what the client still
            # sends with an RST, which can destroy the GOAWAY before the client reads it
            self.closing = True
            self.transport.write_eof()
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                self.bodies[event.stream_id] = asyncio.Queue()
                self.tasks[event.stream_id] = asyncio.create_task(
                    self.run_asgi(event.stream_id, event.headers))
                self.set_idle()
            elif isinstance(event, h2.events.DataReceived):
                if event.stream_id in self.bodies:  # not if the app already returned
                    self.bodies[event.stream_id].put_nowait((event.data, False))
                # Credit back at once: the client may send again before the app has read a
                # byte. Simple, and exactly what the exercise changes.
                self.conn.acknowledge_received_data(event.flow_controlled_length,
                                                    event.stream_id)
            elif isinstance(event, h2.events.StreamEnded) and event.stream_id in self.bodies:
                self.bodies[event.stream_id].put_nowait((b"", True))
            elif isinstance(event, (h2.events.WindowUpdated, h2.events.RemoteSettingsChanged)):
                self.window_open.set()  # a WINDOW_UPDATE, or a new initial window (§6.9.2)
            elif isinstance(event, h2.events.StreamReset):
                self.on_reset(event.stream_id)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.transport.close()
            if self.transport.is_closing():
                return
        self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        for task in self.tasks.values():
            task.cancel()
# --8<-- [end:protocol]

    # --8<-- [start:asgi]
    async def run_asgi(self, stream_id: int, headers: list[tuple[bytes, bytes]]) -> None:
        """One stream is one ASGI ``http`` scope: pseudo-headers become scope keys."""
        pseudo = {name: value for name, value in headers if name.startswith(b":")}
        fields = [(name, value) for name, value in headers if not name.startswith(b":")]
        fields.insert(0, (b"host", pseudo.get(b":authority", b"")))
        path, _, query = pseudo[b":path"].partition(b"?")
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "2",
                 "method": pseudo[b":method"].decode(), "scheme": pseudo[b":scheme"].decode(),
                 "path": path.decode(), "raw_path": path, "query_string": query,
                 "headers": fields, "client": None, "server": None}

        async def receive() -> dict[str, Any]:
            data, ended = await self.bodies[stream_id].get()
            return {"type": "http.request", "body": data, "more_body": not ended}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                response = [(b":status", str(message["status"]).encode()),
                            *message.get("headers", [])]
                self.conn.send_headers(stream_id, response)
                self.flush()
            elif message["type"] == "http.response.body":
                await self.send_data(stream_id, message.get("body", b""),
                                     end=not message.get("more_body", False))

        try:
            await app(scope, receive, send)
        finally:
            del self.bodies[stream_id]
            if self.tasks.pop(stream_id, None) is not None:  # not reset: it ended here
                self.set_idle()
    # --8<-- [end:asgi]

    # --8<-- [start:send_data]
    async def send_data(self, stream_id: int, data: bytes, *, end: bool) -> None:
        """Send ``data`` in frames no larger than the window and the peer's frame size."""
        while data:
            window = self.conn.local_flow_control_window(stream_id)  # stream and connection
            if window <= 0:  # a SETTINGS that shrinks it can make it negative (§6.9.2)
                self.window_open.clear()
                await self.window_open.wait()  # more credit from the client
                continue
            size = min(window, len(data), self.conn.max_outbound_frame_size)
            last = end and size == len(data)  # END_STREAM rides on the last DATA frame
            self.conn.send_data(stream_id, data[:size], end_stream=last)
            data = data[size:]
            self.flush()
            if last:
                return
        if end:
            self.conn.end_stream(stream_id)  # an empty body: END_STREAM alone
            self.flush()
    # --8<-- [end:send_data]


async def main(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(H2Protocol, "127.0.0.1", port)
    print(f"step2: HTTP/2 (h2c, prior knowledge) on http://127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 8000))
    except KeyboardInterrupt:
        pass
