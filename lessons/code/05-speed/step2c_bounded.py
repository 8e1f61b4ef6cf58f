"""Lesson 5, step 2c: step 2b with a deadline, a limit and flow control put back.

Run: ``.venv/bin/python lessons/code/05-speed/step2c_bounded.py 8000`` (``REQUEST_SECONDS``,
default 10; ``KEEP_ALIVE_SECONDS``, default 5; ``MAX_HEAD``, bytes, default 16 KiB), then send
a header block larger than ``MAX_HEAD``: 431 at once.

Lesson 4's step 2c put the same three back into the h11 server; the deadline and the flow
control are the same code here. The limit is another one, because llhttp is not h11: h11
refuses a head past 16 KiB by itself (``max_incomplete_event_size``), llhttp has no such limit
and calls ``on_header`` for as long as fields come. Each has its hostile client
(``tests/test_lessons_sansio.py`` runs each one against both steps):

- **A deadline.** A client that sends half a request and stops (slowloris) held step 2b's
  connection for ever. One timer per connection, ``call_later``: ``KEEP_ALIVE_SECONDS`` while
  idle (then a silent close), ``REQUEST_SECONDS`` from ``on_message_begin`` to
  ``on_message_complete`` (then 408).
- **A limit.** Step 2b kept every field of a head that never ended, megabytes of them. The
  callbacks now count the head's bytes; past ``MAX_HEAD`` the answer is 431.
- **Flow control.** ``transport.write`` never waits: an app streaming a large response to a
  client that reads nothing filled step 2b's memory. ``send`` now waits while asyncio says the
  transport's buffer is past its high-water mark (``pause_writing``, ``resume_writing``).

Deliberately left out (toy-httptools, step 3, has each one): the body is buffered whole before
the app runs, and not bounded (lesson 4's step 2c shows the body limit); one deadline for the
head and the body; a plain close after an error; no checks of the app's status and headers; no
``Date`` or ``Server`` field; no lifespan; no ``http.disconnect``; one process.
Spec: RFC 9112 §4, §6.3, §7.1, §9.3; RFC 6585 §5 (431); RFC 9110 §15.5.9 (408); ASGI HTTP spec
2.4 ("send" may wait: servers apply backpressure).
Compare with: ``toyservers/httptools_server.py`` (``on_headers_complete`` checks the head's
size), ``toyservers/protocol.py`` (``Deadline``), ``toyservers/flow_control.py``, and
uvicorn's ``protocols/http/httptools_impl.py`` (which has no limit on the head).
"""

from __future__ import annotations

import asyncio
import os
import sys
import traceback
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

import httptools

from apps.asgi_user import app as user_app  # the endpoint of every row of bench layers

App = Any  # an ASGI application: async (scope, receive, send) -> None

KEEP_ALIVE_SECONDS = float(os.environ.get("KEEP_ALIVE_SECONDS", "5"))  # idle between requests
REQUEST_SECONDS = float(os.environ.get("REQUEST_SECONDS", "10"))  # first byte to last, a request
MAX_HEAD = int(os.environ.get("MAX_HEAD", str(16 * 1024)))  # bytes of target and fields accepted


# --8<-- [start:protocol]
class HttpToolsProtocol(asyncio.Protocol):
    """One connection: bytes from asyncio into llhttp, its callbacks into the app, and back."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.url = b""  # the request being read: its target,
        self.headers: list[tuple[bytes, bytes]] = []  # its fields,
        self.body = bytearray()  # its body so far
        self.task: asyncio.Task[None] | None = None  # the app, while it runs
        self.pending: list[tuple[Any, ...]] = []  # complete requests waiting for their turn
        self.keep_alive = True  # the client may send another request after this one
        self.chunked = False  # the response being written uses the chunked coding
        self.head_size = 0  # bytes of the head being read so far
        self.timer: asyncio.TimerHandle | None = None  # the deadline, while one runs
        self.writable = asyncio.Event()  # cleared while the transport's buffer is too full
        self.writable.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.set_deadline(KEEP_ALIVE_SECONDS, "idle")

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)  # the callbacks below run inside this call
        except httptools.HttpParserCallbackError:  # a callback raised: the head is too large
            self.send_error(431)
        except httptools.HttpParserUpgrade:
            self.send_error(501)  # Upgrade and CONNECT: left out
        except httptools.HttpParserError:  # malformed: llhttp does not say which 4xx
            self.send_error(400)

    def connection_lost(self, exc: Exception | None) -> None:
        self.set_deadline(None, "")
        self.writable.set()  # a send() waiting for the client returns (and finds it gone)
        if self.task is not None:
            self.task.cancel()  # nobody is left to read the response
# --8<-- [end:protocol]

    # --8<-- [start:bounds]
    def set_deadline(self, seconds: float | None, kind: str) -> None:
        """Replace the connection's timer: in ``seconds``, ``on_timeout(kind)``; None: no timer.

        ``"idle"``: no request has begun (close without a word, RFC 9112 §9.5);
        ``"request"``: one has begun and is not all here (408, RFC 9110 §15.5.9).
        """
        if self.timer is not None:
            self.timer.cancel()
        self.timer = None
        if seconds is not None:
            self.timer = asyncio.get_running_loop().call_later(seconds, self.on_timeout, kind)

    def on_timeout(self, kind: str) -> None:
        if kind == "request":
            self.send_error(408)  # Request Timeout
        else:
            self.transport.close()

    def pause_writing(self) -> None:  # asyncio: the write buffer passed its high-water mark
        self.writable.clear()

    def resume_writing(self) -> None:  # asyncio: it drained below the low-water mark
        self.writable.set()
    # --8<-- [end:bounds]

    # --8<-- [start:callbacks]
    def on_message_begin(self) -> None:
        self.url, self.headers, self.body = b"", [], bytearray()
        self.head_size = 0
        if self.task is None:  # not a pipelined one, read while the app runs (and not its fault)
            self.set_deadline(REQUEST_SECONDS, "request")  # a request's first bytes

    def on_url(self, url: bytes) -> None:
        self.url += url  # may come in pieces
        self.count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))
        self.count_head(len(name) + len(value))

    def count_head(self, size: int) -> None:
        """Add ``size`` bytes to the head; past ``MAX_HEAD``, raise, which stops llhttp (431)."""
        self.head_size += size
        if self.head_size > MAX_HEAD:
            raise ValueError("request head too large")

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        """A whole request: queue it, and run it unless the app is busy with an earlier one.

        llhttp goes on parsing the rest of the bytes fed: pipelined requests all complete
        inside one ``feed_data``, so they wait in ``pending``; reading pauses meanwhile.
        """
        self.set_deadline(None, "")  # all here: the app's time is not the client's
        self.transport.pause_reading()
        self.pending.append((self.parser.get_method().decode(), self.parser.get_http_version(),
                             self.parser.should_keep_alive(), self.url, self.headers,
                             bytes(self.body)))
        if self.task is None:
            self.start_next()

    def start_next(self) -> None:
        method, version, self.keep_alive, target, headers, body = self.pending.pop(0)
        self.task = asyncio.get_running_loop().create_task(
            self.run_asgi(method, version, target, headers, body))
    # --8<-- [end:callbacks]

    # --8<-- [start:run_asgi]
    async def run_asgi(self, method: str, version: str, target: bytes,
                       headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """Run the app for one request; then read the next one or close."""
        path, _, query = target.partition(b"?")
        scope = {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": version, "method": method,
            "scheme": "http", "path": unquote(path.decode("latin-1")), "raw_path": path,
            "query_string": query, "root_path": "", "headers": headers,
            "server": self.transport.get_extra_info("sockname")[:2],
            "client": self.transport.get_extra_info("peername")[:2],
        }
        sent_body = False
        started = finished = False

        async def receive() -> dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Future()  # left out: waiting for the client to disconnect
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            nonlocal started, finished
            if message["type"] == "http.response.start":
                started = True
                self.write_head(message["status"], message.get("headers", []))
            elif message["type"] == "http.response.body":
                self.write_body(message.get("body", b""))
                if not message.get("more_body", False):
                    self.write_body(b"", last=True)
                    finished = True
                await self.writable.wait()  # the client's pace, not the app's

        try:
            await self.app(scope, receive, send)
        except Exception:
            traceback.print_exc()
            if not started:  # nothing sent yet: a 500 fits
                self.send_error(500)
            else:
                self.transport.close()  # too late for a status: cut the response short
            return
        finally:
            self.task = None
        self.next_cycle(finished)
    # --8<-- [end:run_asgi]

    # --8<-- [start:write]
    def write_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        """The status line and fields, and the framing h11 chose in lesson 4."""
        names = {name.lower() for name, _ in headers}
        self.chunked = b"content-length" not in names
        lines = [b"HTTP/1.1 %d %s" % (status, HTTPStatus(status).phrase.encode()),
                 *(name + b": " + value for name, value in headers)]
        if self.chunked:
            lines.append(b"transfer-encoding: chunked")
        if not self.keep_alive:
            lines.append(b"connection: close")
        self.transport.write(b"\r\n".join(lines) + b"\r\n\r\n")

    def write_body(self, data: bytes, last: bool = False) -> None:
        """Body bytes; with the chunked coding, each piece is framed and the last is empty."""
        if self.chunked and (data or last):
            self.transport.write(b"%x\r\n%s\r\n" % (len(data), data))
        elif data:
            self.transport.write(data)

    def send_error(self, status: int) -> None:
        """Answer ``status`` with an empty body, then close."""
        self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                             % (status, HTTPStatus(status).phrase.encode()))
        self.set_deadline(None, "")
        self.transport.close()

    def next_cycle(self, finished: bool) -> None:
        """Keep-alive: after a whole response, read the next request (it may be buffered)."""
        if not finished:
            self.send_error(500)  # the app returned without finishing its response
        elif not self.keep_alive:
            self.transport.close()
        elif self.pending:
            self.start_next()  # a pipelined request, parsed already
        else:
            self.set_deadline(KEEP_ALIVE_SECONDS, "idle")
            self.transport.resume_reading()  # asyncio hands over what waited meanwhile
    # --8<-- [end:write]


# --8<-- [start:main]
async def main(port: int, app: App = user_app) -> None:
    """Listen on 127.0.0.1:``port``; one ``HttpToolsProtocol`` per connection."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: HttpToolsProtocol(app), "127.0.0.1", port)
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 8000))
    except KeyboardInterrupt:
        pass
# --8<-- [end:main]
