"""Lesson 5, the ``bare`` baseline: the least server that runs a pure ASGI app on httptools.

Run: ``.venv/bin/python lessons/code/05-speed/bare_httptools.py apps.asgi_user:app --port 8000``
(``module:attr`` is looked up in the current directory first, as uvicorn does). Then
``curl -d '{"id": 1, "name": "ada", "email": "ada@example.com"}' http://127.0.0.1:8000/``.

A baseline for ``bench layers``, not a server: nobody should deploy it. It keeps only what
an ASGI app needs to answer a well-behaved client such as wrk: llhttp (through httptools)
parses, each request runs in its own asyncio Task (so ``asyncio.current_task()`` and
``asyncio.timeout()`` work in the app), connections are kept alive, and a response is framed
with the app's Content-Length or else chunked. Its row in ``bench layers`` sits between the
asyncio row and the real ASGI servers, so what a real server costs beyond it is the price of
correctness and safety: everything listed below.

Deliberately left out (each of them is a reason not to run this anywhere):

- **Checks**: no validation of the request (Host, header names and values, duplicate
  Content-Length, request smuggling), none of the response (status, header names, values),
  HEAD responses carry their body, HTTP/1.0 clients get chunked bodies.
- **Limits**: no cap on the header block, the body, the number of connections or requests.
- **Timers**: no keep-alive idle timeout and no deadline for a slow header block, so an idle
  or slow client holds its connection forever.
- **Flow control**: reading never pauses and ``send()`` never waits for the client, so a big
  upload or download is buffered whole in memory.
- **Errors**: a request llhttp refuses closes the connection without a 400; an app that raises
  or never responds leaves its client waiting (asyncio logs the Task's error).
- **The rest of a server**: lifespan, graceful shutdown (SIGTERM ends the process at once),
  ``Date`` and ``Server`` headers, logging, ``Expect: 100-continue``, upgrades (WebSocket),
  TLS, and ordering of pipelined answers (each gets a Task at once; they go out in the order
  the Tasks finish, which is request order only for an app that never waits).

Spec: RFC 9112 §6 (message body: Content-Length or chunked), §7.1 (chunked coding), §9.3
(persistence); ASGI HTTP connection scope, ``http.request``, ``http.response.start``,
``http.response.body``.

Compare with: ``toyservers/httptools_server.py`` (the same parser and Task per request, with
the checks, limits and timers) and uvicorn's ``protocols/http/httptools_impl.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

import httptools
import uvloop

REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}


# --8<-- [start:protocol]
class BareProtocol(asyncio.Protocol):
    """One connection: llhttp's callbacks collect a request, a Task runs the app on it."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.tasks: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.lost = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.set_result(None)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()  # no 400: a baseline only serves clients that behave

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        url = httptools.parse_url(self.url)
        scope = {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": self.parser.get_http_version(),
            "method": self.parser.get_method().decode("ascii"), "scheme": "http",
            "path": unquote(url.path.decode("ascii")), "raw_path": url.path,
            "query_string": url.query or b"", "root_path": "", "headers": self.headers,
            "server": self.transport.get_extra_info("sockname")[:2],
            "client": self.transport.get_extra_info("peername")[:2],
        }
        body, keep_alive = b"".join(self.body), self.parser.should_keep_alive()
        self.url, self.headers, self.body = b"", [], []
        task = asyncio.get_running_loop().create_task(self.run_asgi(scope, body, keep_alive))
        self.tasks.add(task)  # the loop keeps only a weak reference to a Task
        task.add_done_callback(self.tasks.discard)
    # --8<-- [end:protocol]

    # --8<-- [start:run_asgi]
    async def run_asgi(self, scope: dict[str, Any], body: bytes, keep_alive: bool) -> None:
        """Run the app on one request: ``receive`` hands over the body, ``send`` frames."""
        request: dict[str, Any] | None = {"type": "http.request", "body": body,
                                          "more_body": False}
        head, chunked = b"", False

        async def receive() -> dict[str, Any]:
            nonlocal request
            if request is None:  # the body was read: the next event is the client leaving
                await self.lost
                return {"type": "http.disconnect"}
            message, request = request, None
            return message

        async def send(message: dict[str, Any]) -> None:
            nonlocal head, chunked
            if message["type"] == "http.response.start":
                headers = message.get("headers", [])
                chunked = not any(name.lower() == b"content-length" for name, _ in headers)
                status = message["status"]
                head = b"HTTP/1.1 %d %s\r\n%s%s%s\r\n" % (
                    status, REASONS.get(status, b""),
                    b"".join(b"%s: %s\r\n" % (name, value) for name, value in headers),
                    b"transfer-encoding: chunked\r\n" if chunked else b"",
                    b"" if keep_alive else b"connection: close\r\n")
                return
            data, more = message.get("body", b""), message.get("more_body", False)
            if chunked:  # RFC 9112 §7.1: size in hex, the bytes; a zero-size chunk ends it
                data = (b"%x\r\n%s\r\n" % (len(data), data) if data else b"") + (
                    b"" if more else b"0\r\n\r\n")
            if not self.transport.is_closing():  # the head goes out with the first body,
                self.transport.writelines((head, data))  # in one writev: the body not copied
            head = b""
            if not more and not keep_alive:
                self.transport.close()

        await self.app(scope, receive, send)
    # --8<-- [end:run_asgi]


# --8<-- [start:main]
async def serve(app: Any, host: str, port: int) -> None:
    """Listen on ``host:port`` and serve ``app`` until the process is killed."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: BareProtocol(app), host, port, backlog=2048)
    await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    """Serve ``module:attr`` (``sys.argv`` without ``argv``): ``[--host H] [--port P]``."""
    parser = argparse.ArgumentParser(description="bare: a baseline, not a server")
    parser.add_argument("app", nargs="?", default="apps.asgi_user:app")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    sys.path.insert(0, os.getcwd())
    module, _, attr = args.app.partition(":")
    app = getattr(importlib.import_module(module), attr)
    try:
        uvloop.run(serve(app, args.host, args.port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
# --8<-- [end:main]
