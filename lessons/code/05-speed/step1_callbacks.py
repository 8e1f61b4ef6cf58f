"""Lesson 5, step 1: httptools on a byte string. llhttp calls you back; no socket involved.

Run: ``.venv/bin/python lessons/code/05-speed/step1_callbacks.py``. It prints each callback as
llhttp reaches that part of the request, for two requests pipelined in one string and fed in three
pieces.

Where h11 hands you events when you ask (``next_event``), ``httptools.HttpRequestParser``
pushes: ``feed_data(chunk)`` runs llhttp, the C parser inside Node.js, over the chunk and calls
a method on your object at each landmark (``on_url``, ``on_header``, ``on_headers_complete``,
``on_body``, ``on_message_complete``). A callback you do not define costs nothing. httptools
joins a header cut by a chunk boundary before ``on_header``, but ``on_url`` and ``on_body`` get
whatever pieces the chunks make: append, do not assign.

Deliberately left out: sockets (step 2), responses (httptools only parses; you write the
response bytes yourself), errors beyond one malformed request.
Spec: RFC 9112 §2-§7 (message syntax, body length, chunked coding); httptools' README
(the callback protocol).
"""

from __future__ import annotations

import httptools


# --8<-- [start:printer]
class Printer:
    """Callbacks that print what llhttp found; the parser is given to us after creation."""

    parser: httptools.HttpRequestParser

    def on_message_begin(self) -> None:
        print("on_message_begin()")

    def on_url(self, url: bytes) -> None:
        print(f"on_url({url!r})")

    def on_header(self, name: bytes, value: bytes) -> None:
        print(f"on_header({name!r}, {value!r})")

    def on_headers_complete(self) -> None:
        parser = self.parser
        print(f"on_headers_complete(): method={parser.get_method()!r} "
              f"version={parser.get_http_version()} keep_alive={parser.should_keep_alive()}")

    def on_body(self, body: bytes) -> None:
        print(f"on_body({body!r})")

    def on_message_complete(self) -> None:
        print("on_message_complete()")
# --8<-- [end:printer]


def main() -> None:
    """Two pipelined requests, one chunked, fed in three pieces; then a malformed one."""
    # --8<-- [start:main]
    printer = Printer()
    printer.parser = parser = httptools.HttpRequestParser(printer)
    stream = (b"POST /users?id=7 HTTP/1.1\r\nHost: example\r\nContent-Length: 5\r\n\r\nhello"
              b"PUT /notes HTTP/1.1\r\nHost: example\r\nTransfer-Encoding: chunked\r\n\r\n"
              b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    for piece in (stream[:9], stream[9:65], stream[65:]):
        print(f"--- feed_data({len(piece)} bytes)")
        parser.feed_data(piece)

    broken = httptools.HttpRequestParser(Printer())
    try:
        broken.feed_data(b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n")
    except httptools.HttpParserError as exc:
        print(f"{type(exc).__name__}: {exc}")
    # --8<-- [end:main]


if __name__ == "__main__":
    main()
