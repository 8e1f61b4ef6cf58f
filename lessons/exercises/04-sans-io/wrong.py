"""Exercise 4, a plausible wrong answer: one request per conversation.

It answers the first request well, and stops: after a response, h11's state machine is in
``DONE`` on both sides and ``next_event()`` returns ``PAUSED``, not the next request, until
``conn.start_next_cycle()`` starts a new cycle. Every single-request check passes; pipelining
does not. ``EXERCISE_IMPL=wrong make exercise N=4`` shows what a student who wrote it reads;
``tests/test_exercises.py`` checks that it fails with this hint:

Fails: test_pipelined_requests_are_answered_in_order: AssertionError: only the first of three
"""

from __future__ import annotations

from http import HTTPStatus

import h11


def response(conn: h11.Connection, status: int, body: bytes) -> bytes:
    """The bytes of one plain-text response with ``status`` and ``body``, framed by ``conn``."""
    headers = [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))]
    head = h11.Response(status_code=status, headers=headers, reason=HTTPStatus(status).phrase)
    return conn.send(head) + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())


# --8<-- [start:exercise]
def answer(data: bytes) -> bytes:
    """What a server writes back after receiving ``data`` on a new connection.

    Each complete request gets ``200 OK`` with the text body ``"<METHOD> <target>: <n> bytes\\n"``
    (``n``: the request body's length), in order. A malformed request gets the status h11
    suggests (``error_status_hint``, usually 400) with any text body, and nothing after it is
    read. Nothing after a request that ends the connection (``Connection: close``, HTTP/1.0)
    is read either. An incomplete last request gets no answer yet.
    """
    conn = h11.Connection(our_role=h11.SERVER)
    conn.receive_data(data)
    out = b""
    while True:
        try:
            event = conn.next_event()
            if type(event) is not h11.Request:
                return out  # NEED_DATA: the rest has not arrived
            size = 0
            while type(part := conn.next_event()) is h11.Data:
                size += len(part.data)
            if part is h11.NEED_DATA:
                return out
        except h11.RemoteProtocolError as exc:
            return out + response(conn, exc.error_status_hint, f"{exc}\n".encode())
        text = f"{event.method.decode()} {event.target.decode()}: {size} bytes\n"
        out += response(conn, 200, text.encode())
        if conn.our_state is not h11.DONE:
            return out  # MUST_CLOSE: h11 added "Connection: close" for us
# --8<-- [end:exercise]


if __name__ == "__main__":
    print(answer(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
                 b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc").decode())
