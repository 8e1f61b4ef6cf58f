"""Exercise 5, a plausible wrong answer: ``on_url`` keeps the last piece of the URL.

llhttp calls a data callback with whatever the bytes fed so far hold: a request that arrives
in one ``feed_data`` gives the URL in one call, one that arrives a byte at a time gives it in
many. ``self.url = url`` keeps only the last piece. ``EXERCISE_IMPL=wrong make exercise N=5``
shows what a student who wrote it reads; ``tests/test_exercises.py`` checks that it fails
with this hint:

Fails: test_one_byte_at_a_time_gives_the_same_request: Failed: fed one byte at a time
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httptools


@dataclass
class Request:
    """One complete request, in the shapes an ASGI scope uses.

    ``headers``: ``(name, value)`` byte pairs in wire order, names lower-cased;
    ``body``: the whole body, bytes (de-chunked when it was chunked).
    """

    method: str = ""
    path: str = ""
    query_string: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    keep_alive: bool = True


class Collector:
    """Collects requests from the bytes of one connection. Raises httptools.HttpParserError
    (from ``feed``) for a malformed request."""

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.current = Request()
        self.url = b""
        self.body: list[bytes] = []
        self.done: list[Request] = []

    def feed(self, data: bytes) -> list[Request]:
        """Parse one chunk; return the requests it completed, oldest first."""
        self.parser.feed_data(data)
        done, self.done = self.done, []
        return done

    # --8<-- [start:exercise]
    def on_message_begin(self) -> None:
        self.current = Request()
        self.url = b""
        self.body = []

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.current.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        parsed = httptools.parse_url(self.url)
        self.current.method = self.parser.get_method().decode("ascii")
        self.current.path = (parsed.path or b"/").decode("ascii")
        self.current.query_string = parsed.query or b""
        self.current.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)  # may arrive in pieces

    def on_message_complete(self) -> None:
        self.current.body = b"".join(self.body)
        self.done.append(self.current)
    # --8<-- [end:exercise]


if __name__ == "__main__":
    collector = Collector()
    stream = (b"POST /users?id=7 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
              b"GET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    for piece in (stream[:10], stream[10:70], stream[70:]):
        for request in collector.feed(piece):
            print(request)
