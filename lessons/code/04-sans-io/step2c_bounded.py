"""Lesson 4, step 2c: step 2b with a deadline, a limit and flow control put back.

Run: ``.venv/bin/python lessons/code/04-sans-io/step2c_bounded.py 8000`` (``REQUEST_SECONDS``,
default 10; ``KEEP_ALIVE_SECONDS``, default 5; ``MAX_BODY``, bytes, default 1 MiB), then
``curl -i -X POST -H 'Content-Length: 2000000' http://127.0.0.1:8000/``: 413 at once.

Step 2b trusts its clients three ways, and each has a hostile client that abuses it
(``tests/test_lessons_sansio.py`` runs each one against both steps):

- **A deadline.** A client that sends half a request and stops (slowloris) held step 2b's
  connection for ever. One timer per connection, ``call_later``, set again at each change of
  state: ``KEEP_ALIVE_SECONDS`` while idle (then a silent close), ``REQUEST_SECONDS`` from a
  request's first byte to its last (then 408).
- **A limit.** Step 2b buffered any body it was sent. A body longer than ``MAX_BODY`` now gets
  413, at once when Content-Length announces it.
- **Flow control.** ``transport.write`` never waits: an app streaming a large response to a
  client that reads nothing filled step 2b's memory. asyncio calls ``pause_writing`` when the
  transport's buffer passes its high-water mark (64 KiB) and ``resume_writing`` when it
  drains; ``send`` now waits in between, so the client's pace holds the app back.

Deliberately left out (toy-h11, step 3, has each one): the request body is still buffered
whole (up to ``MAX_BODY``) before the app runs, so there is no read-side backpressure; one
deadline for the head and the body (toy-h11 has one each, and re-arms the body's at every
piece); a plain close after an error instead of a lingering one; no checks of the app's status
and headers beyond h11's; no ``Date`` or ``Server`` field; no lifespan; no
``http.disconnect``; one process.
Spec: RFC 9112 through h11; RFC 9110 §15.5.9 (408), §15.5.14 (413); ASGI HTTP spec 2.4
("send" may wait: servers apply backpressure); asyncio's ``BaseProtocol.pause_writing``.
Compare with: ``toyservers/h11_server.py``, ``toyservers/protocol.py`` (``Deadline``),
``toyservers/flow_control.py``, and uvicorn's ``protocols/http/h11_impl.py`` and
``flow_control.py``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import traceback
from typing import Any
from urllib.parse import unquote

import h11

from apps.asgi_user import app as user_app  # the endpoint of every row of bench layers

App = Any  # an ASGI application: async (scope, receive, send) -> None

KEEP_ALIVE_SECONDS = float(os.environ.get("KEEP_ALIVE_SECONDS", "5"))  # idle between requests
REQUEST_SECONDS = float(os.environ.get("REQUEST_SECONDS", "10"))  # first byte to last, a request
MAX_BODY = int(os.environ.get("MAX_BODY", str(1024 * 1024)))  # bytes of request body accepted


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
        self.timer: asyncio.TimerHandle | None = None  # the deadline, while one runs,
        self.timer_kind = ""  # and what it bounds: "idle" or "request"
        self.writable = asyncio.Event()  # cleared while the transport's buffer is too full
        self.writable.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.set_deadline(KEEP_ALIVE_SECONDS, "idle")

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE and self.timer_kind == "idle":
            self.set_deadline(REQUEST_SECONDS, "request")  # a request's first bytes
        self.conn.receive_data(data)  # h11 only buffers: parsing happens in next_event()
        self.handle_events()

    def connection_lost(self, exc: Exception | None) -> None:
        self.set_deadline(None, "")
        self.writable.set()  # a send() waiting for the client returns (and finds it gone)
        if self.task is not None:
            self.task.cancel()  # nobody is left to read the response
# --8<-- [end:protocol]

    # --8<-- [start:deadline]
    def set_deadline(self, seconds: float | None, kind: str) -> None:
        """Replace the connection's timer: in ``seconds``, ``on_timeout(kind)``; None: no timer.

        ``"idle"``: no request has begun (close without a word, RFC 9112 §9.5);
        ``"request"``: one has begun and is not all here (408, RFC 9110 §15.5.9).
        """
        if self.timer is not None:
            self.timer.cancel()
        self.timer, self.timer_kind = None, kind
        if seconds is not None:
            self.timer = asyncio.get_running_loop().call_later(seconds, self.on_timeout, kind)

    def on_timeout(self, kind: str) -> None:
        if kind == "request":
            self.send_error(408)  # Request Timeout
        else:
            self.transport.close()
    # --8<-- [end:deadline]

    # --8<-- [start:flow_control]
    def pause_writing(self) -> None:  # asyncio: the write buffer passed its high-water mark
        self.writable.clear()

    def resume_writing(self) -> None:  # asyncio: it drained below the low-water mark
        self.writable.set()
    # --8<-- [end:flow_control]

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
                length = dict(event.headers).get(b"content-length", b"0")
                if int(length) > MAX_BODY:  # h11 checked it is digits; refuse before reading
                    self.send_error(413)  # Content Too Large
                    return
            elif isinstance(event, h11.Data):
                self.body += event.data
                if len(self.body) > MAX_BODY:  # a chunked body announces no length
                    self.send_error(413)
                    return
            elif isinstance(event, h11.EndOfMessage):
                assert self.request is not None
                self.set_deadline(None, "")  # all here: the app's time is not the client's
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
                await self.writable.wait()  # the client's pace, not the app's

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
        self.set_deadline(None, "")
        self.transport.close()

    def next_cycle(self) -> None:
        """Keep-alive: when both sides are DONE, reset h11 and handle what is buffered."""
        if self.conn.our_state is h11.MUST_CLOSE or self.conn.their_state is h11.MUST_CLOSE:
            self.transport.close()
        elif self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
            self.conn.start_next_cycle()
            self.set_deadline(KEEP_ALIVE_SECONDS, "idle")
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
