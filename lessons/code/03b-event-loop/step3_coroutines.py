"""Lesson 3b, step 3: coroutines on top of the callback loop; the server reads straight down.

Run: ``.venv/bin/python lessons/code/03b-event-loop/step3_coroutines.py 8000``, then
``curl http://127.0.0.1:8000/slow`` and, while it waits, ``curl http://127.0.0.1:8000/fast``.

Step 2's HTTP code was cut into callbacks at every place it would have waited. Here it is one
``async def`` again, as in lesson 1, and still nothing blocks. The trick is what ``await``
does at the bottom: an awaitable's ``__await__`` may ``yield``, and the ``yield`` travels up
through every ``await`` to whoever called ``coroutine.send()``. A ``Task`` is that caller: it
receives a ``Wait`` ("this socket readable", "this many seconds"), turns it into a callback on
step 2's ``Loop``, and when the callback fires, calls ``send()`` again to resume the coroutine
where it stopped. asyncio's ``Task`` and ``Future`` do exactly this, with more care.

Deliberately left out: results and exceptions passed back through ``await`` (a Task here
returns nothing), cancellation, ``gather``; keep-alive and bodies, as in step 2.
Spec: PEP 492 (``async``/``await``, ``__await__``), PEP 380 (``yield from``, which ``await``
is built on); RFC 9112 §9.6.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Coroutine, Generator
from typing import Any

from step2_callbacks import Loop

SLOW_SECONDS = float(os.environ.get("SLOW_SECONDS", "2"))
"""How long ``/slow`` waits before answering, seconds."""


# --8<-- [start:task]
class Wait:
    """What a coroutine waits for: ``("read", sock)``, ``("write", sock)``, ``("sleep", s)``."""

    def __init__(self, what: str, arg: Any) -> None:
        self.what, self.arg = what, arg

    def __await__(self) -> Generator[Wait, None, None]:
        yield self  # suspends every coroutine up the await chain, up to Task.step


class Task:
    """Drives one coroutine on ``loop``: each ``Wait`` it yields becomes a loop callback."""

    def __init__(self, loop: Loop, coro: Coroutine[Wait, None, None]) -> None:
        self.loop, self.coro = loop, coro
        loop.call_soon(self.step)

    def step(self) -> None:
        try:
            wait = self.coro.send(None)  # run the coroutine up to its next Wait
        except StopIteration:
            return  # it returned: the task is done
        if wait.what == "sleep":
            self.loop.call_later(wait.arg, self.step)
        elif wait.what == "read":
            self.loop.add_reader(wait.arg, self.wake, self.loop.remove_reader, wait.arg)
        else:
            self.loop.add_writer(wait.arg, self.wake, self.loop.remove_writer, wait.arg)

    def wake(self, unwatch: Any, sock: socket.socket) -> None:
        unwatch(sock)  # one wake-up per Wait
        self.step()
# --8<-- [end:task]


# --8<-- [start:primitives]
async def sleep(seconds: float) -> None:
    await Wait("sleep", seconds)


async def recv(sock: socket.socket, size: int) -> bytes:
    await Wait("read", sock)
    try:
        return sock.recv(size)  # readable: returns at once
    except ConnectionError:
        return b""


async def sendall(sock: socket.socket, data: bytes) -> None:
    while data:
        await Wait("write", sock)
        try:
            data = data[sock.send(data):]
        except ConnectionError:
            return


async def accept(listener: socket.socket) -> socket.socket:
    await Wait("read", listener)
    sock, _ = listener.accept()
    sock.setblocking(False)
    return sock
# --8<-- [end:primitives]


# --8<-- [start:http]
async def handle(sock: socket.socket) -> None:
    """One client, written top to bottom: every ``await`` is a place the loop runs others."""
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = await recv(sock, 65536)
        if not chunk or len(head) > 8192:
            sock.close()
            return
        head += chunk
    path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b"/"
    if path == b"/slow":
        await sleep(SLOW_SECONDS)
        body = b"slow\n"
    else:
        body = b"fast\n"
    await sendall(sock, b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                        b"Connection: close\r\n\r\n%s" % (len(body), body))
    sock.close()


async def server(loop: Loop, listener: socket.socket) -> None:
    while True:
        Task(loop, handle(await accept(listener)))  # one task per connection


def serve(port: int) -> None:
    """Serve HTTP on 127.0.0.1:``port`` with coroutines on step 2's ``Loop``, forever."""
    loop = Loop()
    listener = socket.create_server(("127.0.0.1", port))
    listener.setblocking(False)
    Task(loop, server(loop, listener))
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    loop.run_forever()
# --8<-- [end:http]


if __name__ == "__main__":
    try:
        serve(int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
    except KeyboardInterrupt:
        pass
