"""Exercise 9, a plausible wrong answer: ``anyio.fail_after`` and nothing to catch its error.

``fail_after`` cancels the app at the deadline, as asked, then raises ``TimeoutError`` out
of its block. Nothing in ``call_app`` catches it, so it reaches ``handle()``, which takes a
``TimeoutError`` for its own idle deadline and closes the connection without a word: the
client gets no 503, and no next request either. ``EXERCISE_IMPL=wrong make exercise N=9``
shows what a student who wrote it reads; ``tests/test_exercises.py`` checks that it fails
with this hint:

Fails: test_a_slow_app_is_cut_off_with_a_503_at_the_deadline[asyncio]: AssertionError: the
"""

from __future__ import annotations

import os
import sys
from http import HTTPStatus

import anyio
import anyio.abc
import h11

REQUEST_SECONDS = float(os.environ.get("REQUEST_SECONDS", "1"))
"""The longest the app may take over one request, seconds."""
SLOW_SECONDS = float(os.environ.get("SLOW_SECONDS", "5"))
"""How long the app takes to answer ``/slow``, seconds."""
IDLE_SECONDS = 5.0
"""How long we wait for a client's next bytes before we close, seconds."""

cut_off: list[str] = []
"""The targets whose app was cancelled before it answered (the tests read it)."""


async def app(method: str, target: str, body: bytes) -> bytes:
    """What was asked and how many body bytes came; ``/slow`` first waits ``SLOW_SECONDS``."""
    if target.startswith("/slow"):
        try:
            await anyio.sleep(SLOW_SECONDS)
        except anyio.get_cancelled_exc_class():
            cut_off.append(target)
            raise  # a cancelled task must let the cancellation go on
    return f"{method} {target}: {len(body)} bytes\n".encode()


# --8<-- [start:exercise]
async def call_app(method: str, target: str, body: bytes) -> tuple[int, bytes]:
    """Run ``app(method, target, body)`` with a deadline of ``REQUEST_SECONDS``.

    Returns ``(200, the app's answer)`` when it answers in time; otherwise the app is
    cancelled and the result is ``(503, a one-line explanation)``.
    """
    with anyio.fail_after(REQUEST_SECONDS):  # cancels the app when the time is up
        answer = await app(method, target, body)
    return 200, answer
# --8<-- [end:exercise]


async def next_event(stream: anyio.abc.ByteStream, conn: h11.Connection) -> object:
    """The next event from ``conn``, reading ``stream`` while h11 needs bytes.

    Raises:
        TimeoutError: the client sent nothing for ``IDLE_SECONDS``.
    """
    while (event := conn.next_event()) is h11.NEED_DATA:
        try:
            with anyio.fail_after(IDLE_SECONDS):
                data = await stream.receive(65536)
        except anyio.EndOfStream:
            data = b""
        conn.receive_data(data)
    return event


async def send(stream: anyio.abc.ByteStream, conn: h11.Connection, status: int,
               body: bytes) -> None:
    """Answer with ``status`` and a plain-text ``body``; h11 frames it."""
    headers = [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))]
    reason = HTTPStatus(status).phrase
    data = conn.send(h11.Response(status_code=status, headers=headers, reason=reason))
    data += conn.send(h11.Data(data=body))
    data += conn.send(h11.EndOfMessage())
    await stream.send(data)


async def handle(stream: anyio.abc.ByteStream) -> None:
    """One connection's task: serve requests until either side is done with it."""
    conn = h11.Connection(our_role=h11.SERVER)
    async with stream:
        try:
            while type(request := await next_event(stream, conn)) is h11.Request:
                body = b""
                while type(part := await next_event(stream, conn)) is h11.Data:
                    body += part.data
                status, answer = await call_app(request.method.decode(),
                                                request.target.decode(), body)
                await send(stream, conn, status, answer)
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except h11.RemoteProtocolError as exc:
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                await send(stream, conn, exc.error_status_hint, f"{exc}\n".encode())
        except (TimeoutError, anyio.BrokenResourceError):
            pass


async def serve(port: int) -> None:
    """Listen on 127.0.0.1:``port``; one ``handle`` task per connection."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port)
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    async with listener, anyio.create_task_group() as connections:
        await listener.serve(handle, task_group=connections)


if __name__ == "__main__":
    try:
        anyio.run(serve, int(sys.argv[1]) if len(sys.argv) > 1 else 8000,
                  backend=sys.argv[2] if len(sys.argv) > 2 else "asyncio")
    except KeyboardInterrupt:
        pass
