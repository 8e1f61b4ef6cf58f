"""Exercise 4, starter: write a sans-IO server as a pure function, bytes in, bytes out.

``answer(data)`` is everything a server does on one connection, without the connection: it
feeds ``data`` (what a client sent, possibly several pipelined requests cut anywhere) to an
``h11.Connection`` and returns the bytes the server would write back. Because no socket is
involved, a test can check any conversation with one call.

YOUR TASK: write the body of ``answer`` below (look for "EXERCISE"). Check your work with
``make exercise N=4``; the failures tell you what is still wrong. Run
``.venv/bin/python lessons/exercises/04-sans-io/starter.py`` to see it answer two pipelined
requests.

Spec: RFC 9112 §6 (body length), §9.3 (persistence; §9.3.2 pipelining: responses in request
order), §9.6 (tear-down); h11's documentation ("Getting started", "The state machine").
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
    # ---- EXERCISE: replace the line below with your code. ----------------------------------
    # Hints: ``conn = h11.Connection(our_role=h11.SERVER)``, ``conn.receive_data(data)``, then
    # loop on ``conn.next_event()``: a ``Request``, its ``Data`` events, ``EndOfMessage``;
    # ``h11.NEED_DATA`` means "no more bytes". ``response()`` above frames an answer. After it,
    # ``conn.our_state`` is ``h11.DONE`` (call ``conn.start_next_cycle()`` and go on) or
    # ``h11.MUST_CLOSE`` (stop). ``h11.RemoteProtocolError`` has ``error_status_hint``.
    raise NotImplementedError("exercise 4: drive h11 in answer()")
# --8<-- [end:exercise]


if __name__ == "__main__":
    print(answer(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
                 b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc").decode())
