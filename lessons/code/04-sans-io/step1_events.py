"""Lesson 4, step 1: h11 by hand. Bytes go in, events come out, and no socket is involved.

Run: ``.venv/bin/python lessons/code/04-sans-io/step1_events.py``. It prints every event h11
produces, with both sides' states.

An ``h11.Connection`` is a parser and a framer wrapped around a state machine. You hand it
bytes with ``receive_data`` and ask for events with ``next_event``; it answers ``NEED_DATA``
when it needs more bytes, whatever way they were cut. You hand it events with ``send`` and get
back the bytes to write. Where the bytes come from and where they go is your business: that is
"sans-IO". Here they come from a list of byte strings, as if a socket had read them in three
unlucky pieces.

Deliberately left out: sockets (step 2 adds a blocking one), an application interface.
Spec: RFC 9112 §2-§3 (message and request line), §6 (body length), §9.3 (persistence);
h11's documentation, "Getting started" and "The state machine".
"""

from __future__ import annotations

import h11


# --8<-- [start:states]
def states(conn: h11.Connection) -> str:
    """Both sides' states, e.g. ``client=SEND_BODY server=SEND_RESPONSE``."""
    return f"client={conn.their_state.__name__} server={conn.our_state.__name__}"
# --8<-- [end:states]


# --8<-- [start:receive]
def receive(conn: h11.Connection, pieces: list[bytes]) -> None:
    """Feed ``pieces`` to ``conn`` one at a time, printing every event until NEED_DATA."""
    for piece in pieces:
        print(f"feed {piece!r}")
        conn.receive_data(piece)
        while True:
            event = conn.next_event()
            name = event.__name__ if isinstance(event, type) else repr(event)
            print(f"  -> {name}\n     {states(conn)}")
            if event is h11.NEED_DATA or type(event) is h11.EndOfMessage:
                break
# --8<-- [end:receive]


# --8<-- [start:respond]
def respond(conn: h11.Connection, body: bytes) -> bytes:
    """The bytes of a 200 response carrying ``body``: three events, framed by h11."""
    data = conn.send(h11.Response(status_code=200, reason=b"OK", headers=[
        ("Content-Type", "text/plain"), ("Content-Length", str(len(body)))]))
    print(f"  <- Response\n     {states(conn)}")
    data += conn.send(h11.Data(data=body))
    data += conn.send(h11.EndOfMessage())
    print(f"  <- EndOfMessage\n     {states(conn)}")
    return data
# --8<-- [end:respond]


def main() -> None:
    """One request in three pieces, the response, the next cycle, then a malformed request."""
    # --8<-- [start:main]
    conn = h11.Connection(our_role=h11.SERVER)
    print(f"start: {states(conn)}")
    receive(conn, [b"POST /users HTTP/1.1\r\nHost: exa",
                   b"mple\r\nContent-Length: 5\r\n\r\nhel",
                   b"lo"])
    data = respond(conn, b"thanks\n")
    print(f"bytes to write: {data!r}")
    conn.start_next_cycle()  # keep-alive: both sides DONE, so both go back to IDLE
    print(f"next cycle: {states(conn)}")

    broken = h11.Connection(our_role=h11.SERVER)
    broken.receive_data(b"GET / HTTP/1.1\r\nHost: a\r\nBad Header: x\r\n\r\n")
    try:
        broken.next_event()
    except h11.RemoteProtocolError as exc:
        print(f"RemoteProtocolError: {exc} (answer {exc.error_status_hint})")
    # --8<-- [end:main]


if __name__ == "__main__":
    main()
