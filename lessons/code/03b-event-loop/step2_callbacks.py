"""Lesson 3b, step 2: a tiny event loop with callbacks, and an HTTP server written on it.

Run: ``.venv/bin/python lessons/code/03b-event-loop/step2_callbacks.py 8000``, then
``curl http://127.0.0.1:8000/slow`` and, while it waits, ``curl http://127.0.0.1:8000/fast``:
the fast one answers at once, in the same thread.

Step 1 mixed two jobs in one ``while`` loop: waiting for sockets, and knowing what each one
was for. Here they come apart. ``Loop`` only waits and dispatches: "when this socket is
readable, call this function" (``add_reader``), "call this in 2 seconds" (``call_later``),
"call this next" (``call_soon``). The HTTP code registers callbacks and returns; it never
waits. This is the lower half of asyncio: ``asyncio.BaseEventLoop`` has the same methods.

Deliberately left out: exceptions in callbacks (asyncio logs them and goes on; here they stop
the loop), signals, thread safety (``call_soon_threadsafe``), subprocesses, keep-alive.
Spec: RFC 9112 §9.6 (``Connection: close``); asyncio "Event Loop" documentation (the
scheduling and watching methods copied by name); epoll(7).
"""

from __future__ import annotations

import heapq
import itertools
import os
import selectors
import socket
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

SLOW_SECONDS = float(os.environ.get("SLOW_SECONDS", "2"))
"""How long ``/slow`` waits before answering, seconds."""


# --8<-- [start:loop]
class Handle:
    """A callback and its arguments, waiting in the loop; ``cancel()`` stops it running."""

    def __init__(self, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.callback, self.args, self.cancelled = callback, args, False

    def cancel(self) -> None:
        self.cancelled = True


class Loop:
    """Runs callbacks: when a socket is ready, when a timer is due, or as soon as possible."""

    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self.ready: deque[Handle] = deque()                # run on the next turn
        self.timers: list[tuple[float, int, Handle]] = []  # a heap: the soonest first
        self.sequence = itertools.count()                  # breaks ties between equal times

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> Handle:
        handle = Handle(callback, args)
        self.ready.append(handle)
        return handle

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Handle:
        handle = Handle(callback, args)
        heapq.heappush(self.timers, (time.monotonic() + delay, next(self.sequence), handle))
        return handle

    def _watch(self, sock: socket.socket, which: int, handle: Handle | None) -> None:
        """Set the reader (which=0) or writer (which=1) callback of ``sock``; None removes."""
        key = self.selector.get_map().get(sock.fileno())
        callbacks = key.data if key else [None, None]
        callbacks[which] = handle
        events = ((selectors.EVENT_READ if callbacks[0] else 0)
                  | (selectors.EVENT_WRITE if callbacks[1] else 0))
        if key and events:
            self.selector.modify(sock, events, callbacks)
        elif key:
            self.selector.unregister(sock)
        elif events:
            self.selector.register(sock, events, callbacks)

    def add_reader(self, sock: socket.socket, callback: Callable[..., Any], *args: Any) -> None:
        self._watch(sock, 0, Handle(callback, args))

    def remove_reader(self, sock: socket.socket) -> None:
        self._watch(sock, 0, None)

    def add_writer(self, sock: socket.socket, callback: Callable[..., Any], *args: Any) -> None:
        self._watch(sock, 1, Handle(callback, args))

    def remove_writer(self, sock: socket.socket) -> None:
        self._watch(sock, 1, None)

    def run_once(self) -> None:
        """One turn: wait for I/O (no longer than the next timer), then run what is ready."""
        if self.ready:
            timeout: float | None = 0  # callbacks are waiting: only peek at the sockets
        elif self.timers:
            timeout = max(0.0, self.timers[0][0] - time.monotonic())
        else:
            timeout = None  # nothing to do but wait for a socket
        for key, events in self.selector.select(timeout):
            reader, writer = key.data
            if events & selectors.EVENT_READ and reader:
                self.ready.append(reader)
            if events & selectors.EVENT_WRITE and writer:
                self.ready.append(writer)
        while self.timers and self.timers[0][0] <= time.monotonic():
            self.ready.append(heapq.heappop(self.timers)[2])
        for _ in range(len(self.ready)):  # only these: what they schedule waits a turn
            handle = self.ready.popleft()
            if not handle.cancelled:
                handle.callback(*handle.args)

    def run_forever(self) -> None:
        while True:
            self.run_once()
# --8<-- [end:loop]


# --8<-- [start:http]
class HTTPConnection:
    """One client, as callbacks: read a head, answer (maybe later), write, close."""

    def __init__(self, loop: Loop, sock: socket.socket) -> None:
        self.loop, self.sock, self.inbox, self.outbox = loop, sock, b"", b""
        loop.add_reader(sock, self.on_readable)

    def on_readable(self) -> None:
        try:
            chunk = self.sock.recv(65536)
        except ConnectionError:
            chunk = b""
        self.inbox += chunk
        if not chunk or len(self.inbox) > 8192:
            self.close()
        elif b"\r\n\r\n" in self.inbox:
            self.loop.remove_reader(self.sock)
            path = self.inbox.split(b" ", 2)[1] if self.inbox.count(b" ") >= 2 else b"/"
            if path == b"/slow":  # no sleep: ask to be called back later, and return
                self.loop.call_later(SLOW_SECONDS, self.respond, b"slow\n")
            else:
                self.respond(b"fast\n")

    def respond(self, body: bytes) -> None:
        self.outbox = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                       b"Connection: close\r\n\r\n%s" % (len(body), body))
        self.loop.add_writer(self.sock, self.on_writable)

    def on_writable(self) -> None:
        try:
            self.outbox = self.outbox[self.sock.send(self.outbox):]
        except ConnectionError:
            self.outbox = b""
        if not self.outbox:
            self.close()

    def close(self) -> None:
        self.loop.remove_reader(self.sock)
        self.loop.remove_writer(self.sock)
        self.sock.close()


def serve(port: int) -> None:
    """Serve HTTP on 127.0.0.1:``port`` on a new ``Loop``, forever."""
    loop = Loop()
    listener = socket.create_server(("127.0.0.1", port))
    listener.setblocking(False)

    def on_connection() -> None:
        sock, _ = listener.accept()
        sock.setblocking(False)
        HTTPConnection(loop, sock)

    loop.add_reader(listener, on_connection)
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    loop.run_forever()
# --8<-- [end:http]


if __name__ == "__main__":
    try:
        serve(int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
    except KeyboardInterrupt:
        pass
