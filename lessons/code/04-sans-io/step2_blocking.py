"""Lesson 4, step 2: h11 on a blocking socket. The smallest real server h11 can drive.

Run: ``.venv/bin/python lessons/code/04-sans-io/step2_blocking.py 8000``, then ``curl -i -d hello http://127.0.0.1:8000/x``.

Step 1's loop with a socket at each end: ``recv`` feeds ``receive_data`` whenever h11 says
``NEED_DATA``, and what ``send`` returns goes to ``sendall``. h11 decides everything HTTP:
where the head ends, how long the body is (Content-Length or chunked), whether the connection
may be reused, and which status a malformed request deserves (``error_status_hint``). The code
here only moves bytes and answers. It serves one connection at a time, in one thread: the
problem lesson 2 showed, kept on purpose so nothing but h11 is on the page.

Deliberately left out: concurrency (one client at a time), an application interface (the
answer is built inline), limits on sizes, ``Expect: 100-continue``, slow-client deadlines
beyond one idle timeout. ``toyservers/h11_server.py`` adds all of them.
Spec: RFC 9112 §6 (body length), §9.3 (persistence), §9.6 (tear-down); h11's
``examples/trio-server.py`` has the same loop on trio.
"""

from __future__ import annotations

import socket
import sys
from http import HTTPStatus

import h11

IDLE_SECONDS = 5.0
"""How long ``recv`` waits for the client's next bytes before we close, seconds."""


# --8<-- [start:next_event]
def next_event(sock: socket.socket, conn: h11.Connection) -> object:
    """The next event from ``conn`` (``Request``, ``Data``, ``EndOfMessage``,
    ``ConnectionClosed`` or the ``PAUSED`` sentinel), reading ``sock`` while h11 needs bytes."""
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(sock.recv(65536))  # b"" means the client closed: ConnectionClosed
# --8<-- [end:next_event]


# --8<-- [start:send]
def send(sock: socket.socket, conn: h11.Connection, status: int, body: bytes) -> None:
    """Answer with ``status`` and a plain-text ``body``; h11 frames it."""
    headers = [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))]
    reason = HTTPStatus(status).phrase  # h11 sends an empty reason phrase unless told
    data = conn.send(h11.Response(status_code=status, headers=headers, reason=reason))
    data += conn.send(h11.Data(data=body))
    data += conn.send(h11.EndOfMessage())
    sock.sendall(data)
# --8<-- [end:send]


# --8<-- [start:handle]
def handle(sock: socket.socket) -> None:
    """Serve requests on one connection until either side is done with it."""
    conn = h11.Connection(our_role=h11.SERVER)
    while True:
        try:
            event = next_event(sock, conn)
            if type(event) is not h11.Request:
                return  # ConnectionClosed (or PAUSED, which a server never sees here)
            body = b""
            while type(part := next_event(sock, conn)) is h11.Data:
                body += part.data
            answer = f"{event.method.decode()} {event.target.decode()}: {len(body)} bytes\n"
            send(sock, conn, 200, answer.encode())
        except h11.RemoteProtocolError as exc:
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                send(sock, conn, exc.error_status_hint, f"{exc}\n".encode())
            return
        if conn.our_state is h11.MUST_CLOSE:
            return  # "Connection: close", HTTP/1.0, or a body we could not frame
        conn.start_next_cycle()  # both sides DONE: read the next request
# --8<-- [end:handle]


# --8<-- [start:serve]
def serve(port: int) -> None:
    """Accept connections on 127.0.0.1:``port`` and serve them one after another."""
    with socket.create_server(("127.0.0.1", port)) as listener:
        print(f"listening on http://127.0.0.1:{port}", flush=True)
        while True:
            sock, _ = listener.accept()
            with sock:
                sock.settimeout(IDLE_SECONDS)
                try:
                    handle(sock)
                except (TimeoutError, ConnectionError):
                    pass  # an idle or vanished client: close and take the next one
# --8<-- [end:serve]


if __name__ == "__main__":
    serve(int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
