"""Lesson 4, step 2b: h11 under an ``asyncio.Protocol``, a whole ASGI server in one short file.

Run: ``.venv/bin/python lessons/code/04-sans-io/step2b_asyncio.py 8000``, then
``curl -i -d '{"id": 1, "name": "ada", "email": "ada@example.com"}' http://127.0.0.1:8000/``.

Step 2's loop turned inside out. asyncio owns the sockets and calls the protocol back:
``connection_made`` once, ``data_received(data)`` with whatever bytes arrived, and
``connection_lost`` at the end. The protocol feeds h11, pulls events, and when a request is
complete runs the ASGI app in a Task; the app's messages become h11 events, and h11's bytes
go to ``transport.write``. Many connections share one thread, as in lesson 1's step 1, and
a slow app holds only its own connection.

Deliberately left out (toy-h11, step 3, has each one): the request body is buffered whole
before the app runs (no streaming, no ``HIGH_WATER_LIMIT``, so no backpressure on a client
that sends faster than the app reads); no timeouts; no checks of the app's status and headers
beyond h11's; no ``Date`` or ``Server`` field; no lifespan; no ``http.disconnect`` (``receive``
waits for ever after the body); one process.
Spec: RFC 9112 through h11; ASGI HTTP spec 2.4 (scope, ``http.request``,
``http.response.start``, ``http.response.body``).
Compare with: ``toyservers/h11_server.py`` and uvicorn's ``protocols/http/h11_impl.py``.
"""

from __future__ import annotations

import asyncio
import sys
import traceback
from typing import Any
from urllib.parse import unquote

import h11

from apps.asgi_user import app as user_app  # the endpoint of every row of bench layers

App = Any  # an ASGI application: async (scope, receive, send) -> None


# --8<-- [start:protocol]
class H11Protocol(asyncio.Protocol):
    """One connection: bytes from asyncio into h11, events from h11 into the app, and back."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.conn = h11.Connection(h11.SERVER)
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.request: h11.Request | None = None  # the request being read
        self.body = bytearray()  # its body so far
        self.task: asyncio.Task[None] | None = None  # the app, while it runs

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.conn.receive_data(data)  # h11 only buffers: parsing happens in next_event()
        self.handle_events()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.task is not None:
            self.task.cancel()  # nobody is left to read the response
# --8<-- [end:protocol]

    # --8<-- [start:handle_events]
    def handle_events(self) -> None:
        """Pull events until h11 needs more bytes, or a request is complete and its app runs.

        While the app runs, further bytes stay in h11's buffer: one request at a time.
        """
        while self.task is None:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError as exc:  # malformed: h11 says which 4xx to send
                self.send_error(exc.error_status_hint)
                return
            if event is h11.NEED_DATA:
                return
            if event is h11.PAUSED:  # the next request came before we answered this one
                self.transport.pause_reading()
                return
            if isinstance(event, h11.Request):
                self.request, self.body = event, bytearray()
            elif isinstance(event, h11.Data):
                self.body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert self.request is not None
                self.task = asyncio.get_running_loop().create_task(
                    self.run_asgi(self.request, bytes(self.body)))
            elif isinstance(event, h11.ConnectionClosed):
                self.transport.close()
                return
    # --8<-- [end:handle_events]

    # --8<-- [start:run_asgi]
    async def run_asgi(self, request: h11.Request, body: bytes) -> None:
        """Run the app for one request; then start the next cycle or close."""
        path, _, query = request.target.partition(b"?")
        scope = {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": request.http_version.decode(), "method": request.method.decode(),
            "scheme": "http", "path": unquote(path.decode("latin-1")), "raw_path": path,
            "query_string": query, "root_path": "", "headers": list(request.headers),
            "server": self.transport.get_extra_info("sockname")[:2],
            "client": self.transport.get_extra_info("peername")[:2],
        }
        sent_body = False

        async def receive() -> dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Future()  # left out: waiting for the client to disconnect
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                self.write(h11.Response(status_code=message["status"],
                                        headers=message.get("headers", [])))
            elif message["type"] == "http.response.body":
                if message.get("body"):
                    self.write(h11.Data(data=message["body"]))
                if not message.get("more_body", False):
                    self.write(h11.EndOfMessage())

        try:
            await self.app(scope, receive, send)
        except Exception:
            traceback.print_exc()
            if self.conn.our_state is h11.SEND_RESPONSE:  # nothing sent yet: a 500 fits
                self.send_error(500)
            else:
                self.transport.close()  # too late for a status: cut the response short
            return
        finally:
            self.task = None
        self.next_cycle()
    # --8<-- [end:run_asgi]

    # --8<-- [start:write]
    def write(self, event: h11.Event) -> None:
        """Let h11 turn ``event`` into bytes (it adds the framing fields) and send them."""
        data = self.conn.send(event)
        if data:
            self.transport.write(data)

    def send_error(self, status: int) -> None:
        """Answer ``status`` with an empty body if h11 lets us, then close."""
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            self.write(h11.Response(status_code=status, headers=[("Content-Length", "0"),
                                                                 ("Connection", "close")]))
            self.write(h11.EndOfMessage())
        self.transport.close()

    def next_cycle(self) -> None:
        """Keep-alive: when both sides are DONE, reset h11 and handle what is buffered."""
        if self.conn.our_state is h11.MUST_CLOSE or self.conn.their_state is h11.MUST_CLOSE:
            self.transport.close()
        elif self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
            self.conn.start_next_cycle()
            self.transport.resume_reading()
            self.handle_events()  # a pipelined request may already wait in h11's buffer
        else:
            self.send_error(500)  # the app returned without finishing its response
    # --8<-- [end:write]


# --8<-- [start:main]
async def main(port: int, app: App = user_app) -> None:
    """Listen on 127.0.0.1:``port``; one ``H11Protocol`` per connection."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: H11Protocol(app), "127.0.0.1", port)
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 8000))
    except KeyboardInterrupt:
        pass
# --8<-- [end:main]
