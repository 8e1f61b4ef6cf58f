"""Lesson 10, step 1: a complete HTTP/2 server on h2, in one file.

One ``asyncio.Protocol`` per connection drives one ``h2.connection.H2Connection``: bytes in
(``receive_data``), events out, bytes back (``data_to_send``). h2 never touches the socket,
exactly as h11 in lesson 4. Every request is a *stream*, and every stream runs the ASGI app in
its own task, so one connection carries many requests at once.

Clear text with prior knowledge only (``curl --http2-prior-knowledge``): no TLS, no ALPN, no
HTTP/1.1 on the same port, no limits, no timeouts. It gives flow-control credit back the
moment DATA arrives, which is what the exercise fixes. toyservers/h2_server.py is the full
server.

Run: ``.venv/bin/python lessons/code/10-http2/step1_server.py 8000``.
Spec: RFC 9113 §3.4 (preface), §5 (streams), §6.9 (flow control), §8.3 (pseudo-headers).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions


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
        self.tasks: set[asyncio.Task[None]] = set()
        self.closing = False  # our GOAWAY is out after a protocol error

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.conn.initiate_connection()  # our SETTINGS: the server's half of the preface
        self.flush()

    def flush(self) -> None:
        self.transport.write(self.conn.data_to_send())

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
                task = asyncio.create_task(self.run_asgi(event.stream_id, event.headers))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
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
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.transport.close()
        self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        for task in self.tasks:
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
    print(f"step1: HTTP/2 (h2c, prior knowledge) on http://127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 8000))
