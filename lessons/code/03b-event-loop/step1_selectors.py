"""Lesson 3b, step 1: many connections in one thread, with a selector and no framework.

Run: ``.venv/bin/python lessons/code/03b-event-loop/step1_selectors.py 8000``, then
``curl http://127.0.0.1:8000/hello``.

Every socket is non-blocking: ``recv`` and ``send`` return at once, with what the kernel had
or could take, or raise ``BlockingIOError``. The one call that waits is ``select()``: it
sleeps until at least one registered socket is ready (epoll on Linux, kqueue on the BSDs and
macOS, behind ``selectors.DefaultSelector``) and says which. Each connection keeps its own
state, the bytes read so far and the bytes left to write, because no stack frame waits for it.

Deliberately left out: keep-alive (one request per connection, then close), request bodies,
timers (lesson 3b, step 2 adds them), limits on the number of connections.
Spec: RFC 9112 §2.1 (message format), §9.6 (``Connection: close``); selectors(3.11) module
documentation; epoll(7).
"""

from __future__ import annotations

import selectors
import socket
import sys

MAX_HEAD = 8192
"""Largest request head we read, bytes; beyond it the connection is dropped."""


# --8<-- [start:state]
class Connection:
    """What one client's conversation has reached: bytes read, then bytes left to write."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbox = b""   # the request head so far
        self.outbox = b""  # the response not yet taken by the kernel
# --8<-- [end:state]


def respond(head: bytes) -> bytes:
    """The whole response for one request head: 200 with the request line echoed back."""
    request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    body = f"you asked for {request_line}\n".encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n%s" % (len(body), body))


# --8<-- [start:loop]
def serve(port: int) -> None:
    """Serve HTTP on 127.0.0.1:``port`` forever, one thread, any number of connections."""
    selector = selectors.DefaultSelector()
    listener = socket.create_server(("127.0.0.1", port))
    listener.setblocking(False)
    selector.register(listener, selectors.EVENT_READ, data=None)
    print(f"listening on http://127.0.0.1:{port} with {type(selector).__name__}", flush=True)
    while True:
        for key, events in selector.select():  # the only call that waits
            if key.data is None:  # the listener is readable: a client is waiting in accept
                sock, _ = listener.accept()
                sock.setblocking(False)
                selector.register(sock, selectors.EVENT_READ, data=Connection(sock))
                continue
            conn: Connection = key.data
            if events & selectors.EVENT_READ:
                try:
                    chunk = conn.sock.recv(65536)  # ready: this returns without waiting
                except ConnectionError:
                    chunk = b""
                conn.inbox += chunk
                if not chunk or len(conn.inbox) > MAX_HEAD:  # gone, or too big: drop it
                    selector.unregister(conn.sock)
                    conn.sock.close()
                elif b"\r\n\r\n" in conn.inbox:  # a whole head: from now on, we write
                    conn.outbox = respond(conn.inbox)
                    selector.modify(conn.sock, selectors.EVENT_WRITE, data=conn)
            elif events & selectors.EVENT_WRITE:
                try:
                    sent = conn.sock.send(conn.outbox)  # may take only part of it
                except ConnectionError:
                    conn.outbox, sent = b"", 0  # the client left: nothing more to write
                conn.outbox = conn.outbox[sent:]
                if not conn.outbox:
                    selector.unregister(conn.sock)
                    conn.sock.close()
# --8<-- [end:loop]


if __name__ == "__main__":
    try:
        serve(int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
    except KeyboardInterrupt:
        pass
