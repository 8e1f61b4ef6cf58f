"""Lesson 7, step 5: a WSGI app under an ASGI server, through a thread pool and a queue.

Run: ``.venv/bin/python lessons/code/07-wsgi-server/step5_wsgi_under_asgi.py 8000``: Flask
(``apps/flask_user.py``) served by uvicorn, through ``WSGIAdapter``. Then
``curl -i -d '{"id": 1, "name": "ada", "email": "ada@example.com"}' http://127.0.0.1:8000/``.

An ASGI server has one event loop; a WSGI app blocks. So the adapter runs each request's app
call on a pool thread, and puts two bridges between the thread and the loop: ``wsgi.input``
reads body chunks from a queue that a Task fills from ``receive()``, and ``start_response``
plus the body iterable become ``send()`` calls, each run on the loop and waited for by the
thread (which also slows the app down to the client's pace).

Deliberately left out: ``http.disconnect`` reaching the app, a limit on queued body bytes
(the Task reads the whole body as fast as the client sends it), ``write()``, ``exc_info``
after the head, ``wsgi.file_wrapper``, lifespan. Use a kept library: a2wsgi's
``WSGIMiddleware`` (what uvicorn's docs point to) does all of it.
Spec: PEP 3333; ASGI HTTP spec ("Request", "Response Start", "Response Body").
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import queue
import sys
from collections.abc import Awaitable, Callable
from typing import Any
from wsgiref.types import WSGIApplication

Message = dict[str, Any]


# --8<-- [start:input]
class QueueInput(io.RawIOBase):
    """``wsgi.input`` for the app's thread: the body chunks a Task puts in a queue."""

    def __init__(self) -> None:
        self.chunks: queue.SimpleQueue[bytes] = queue.SimpleQueue()  # b"": the end
        self.pending, self.ended = b"", False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self.pending and not self.ended:
            self.pending = self.chunks.get()  # blocks this thread, not the event loop
            self.ended = not self.pending
        size = min(len(buffer), len(self.pending))
        buffer[:size], self.pending = self.pending[:size], self.pending[size:]
        return size
# --8<-- [end:input]


# --8<-- [start:adapter]
class WSGIAdapter:
    """An ASGI app that runs ``app``, a WSGI app, on a pool of ``threads`` threads."""

    def __init__(self, app: WSGIApplication, threads: int = 10) -> None:
        self.app, self.pool = app, concurrent.futures.ThreadPoolExecutor(threads)

    async def __call__(self, scope: Message, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        assert scope["type"] == "http", "this adapter speaks HTTP only"
        loop, body = asyncio.get_running_loop(), QueueInput()

        async def pump() -> None:  # receive() -> queue, on the loop
            while (message := await receive())["type"] == "http.request":
                if message.get("body"):
                    body.chunks.put(message["body"])
                if not message.get("more_body"):
                    break
            body.chunks.put(b"")

        def send_from_thread(message: Message) -> None:  # send() on the loop, waited for here
            asyncio.run_coroutine_threadsafe(send(message), loop).result()

        pumping = asyncio.create_task(pump())
        try:
            environ = build_environ(scope, io.BufferedReader(body))
            await loop.run_in_executor(self.pool, self.run_wsgi, environ, send_from_thread)
        finally:
            pumping.cancel()

    def run_wsgi(self, environ: dict[str, Any], send: Callable[[Message], None]) -> None:
        """On a pool thread: call the app, turn its response into ASGI messages."""
        started: list[Message] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None
                           ) -> Callable[[bytes], None]:
            started[:] = [{"type": "http.response.start", "status": int(status[:3]),
                           "headers": [(name.lower().encode("latin-1"), value.encode("latin-1"))
                                       for name, value in headers]}]
            return lambda data: None  # write(): left out

        result = self.app(environ, start_response)
        try:
            for chunk in result:
                if chunk:  # the head waits for the first non-empty chunk, as in step 1
                    if started:
                        send(started.pop())
                    send({"type": "http.response.body", "body": chunk, "more_body": True})
            if started:
                send(started.pop())
            send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            if hasattr(result, "close"):
                result.close()
# --8<-- [end:adapter]


def build_environ(scope: Message, body: io.BufferedReader) -> dict[str, Any]:
    """The environ of an ASGI HTTP scope: the same keys step 1 builds from the bytes."""
    server = scope.get("server") or ("localhost", 80)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"], "SCRIPT_NAME": scope.get("root_path", ""),
        "PATH_INFO": scope["path"].encode().decode("latin-1"),  # PEP 3333's "native string"
        "QUERY_STRING": scope["query_string"].decode("latin-1"),
        "SERVER_NAME": server[0], "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": f"HTTP/{scope['http_version']}",
        "wsgi.version": (1, 0), "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": body, "wsgi.errors": sys.stderr, "wsgi.multithread": True,
        "wsgi.input_terminated": True,  # read() to b"" ends at the body's end, chunked or not
        "wsgi.multiprocess": False, "wsgi.run_once": False,
    }
    for name, value in scope["headers"]:
        key = name.decode("latin-1").upper().replace("-", "_")
        if key not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            key = "HTTP_" + key
        text = value.decode("latin-1")
        environ[key] = f"{environ[key]},{text}" if key in environ else text
    return environ


# --8<-- [start:run]
if __name__ == "__main__":
    import uvicorn

    from apps.flask_user import app

    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    uvicorn.run(WSGIAdapter(app), host="127.0.0.1", port=port, lifespan="off",
                log_level="warning")
# --8<-- [end:run]
