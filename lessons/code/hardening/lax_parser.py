"""Request smuggling, CL.TE: one request to the proxy, two to a lax server behind it.

Run: ``.venv/bin/python lessons/code/hardening/lax_parser.py`` prints how each side reads the
bytes in ``ATTACK``; with a port, ``.venv/bin/python lessons/code/hardening/lax_parser.py 8000``
also sends them to the server on that port and prints its answer (a toy server: 400, close).

A request that carries both ``Content-Length`` and ``Transfer-Encoding: chunked`` has two
lengths. A proxy that frames by Content-Length (``proxy_view``) forwards everything after
the head as one body. A server behind it that frames by the chunked coding and keeps the
connection open (``lax_view``, the way many servers did before the advisories listed in
``tests/hostile/corpus.py``) ends the body at the empty last chunk, ``0\\r\\n\\r\\n``, and reads
what follows as the next request on the connection: ``GET /admin``, which the proxy never
saw, so none of its rules applied, and whose answer goes to whichever client's request the
proxy sends next on that connection.

RFC 9112 §6.3 closes the door twice: Transfer-Encoding overrides Content-Length, and "the
server MUST close the connection after responding to such a request"; §6.1 lets a server
refuse it outright, which the toy servers do (400 and a close: the corpus cases ``cl_and_te``
and ``te_and_cl``). The lax parser here does neither.

Deliberately left out: everything else a parser checks. ``parse_head`` takes any line with a
colon, ``chunked_body`` any hex it is given: it is wrong on purpose, and only for this.
Spec: RFC 9112 §6.1 (Transfer-Encoding), §6.3 (message body length), §7.1 (chunked coding).
"""

from __future__ import annotations

import socket
import sys

# --8<-- [start:attack]
SMUGGLED = b"GET /admin HTTP/1.1\r\nHost: example.com\r\n\r\n"
ATTACK = (b"POST / HTTP/1.1\r\nHost: example.com\r\n"
          b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n"
          b"0\r\n\r\n" % (5 + len(SMUGGLED))) + SMUGGLED
# --8<-- [end:attack]


def parse_head(data: bytes) -> tuple[str, dict[str, str], bytes]:
    """``(request line, {lower-case name: value}, the bytes after the head)``; a later field
    of the same name wins."""
    head, _, rest = data.partition(b"\r\n\r\n")
    line, *fields = head.decode("latin-1").split("\r\n")
    headers = {}
    for field in fields:
        name, _, value = field.partition(":")
        headers[name.strip().lower()] = value.strip()
    return line, headers, rest


# --8<-- [start:views]
def proxy_view(data: bytes) -> list[tuple[str, bytes]]:
    """The requests in ``data`` framed by Content-Length only: ``(request line, body)``."""
    requests = []
    while data:
        line, headers, rest = parse_head(data)
        length = int(headers.get("content-length", "0"))
        requests.append((line, rest[:length]))
        data = rest[length:]
    return requests


def lax_view(data: bytes) -> list[tuple[str, bytes]]:
    """The same, framed by the chunked coding when a request has it, and the connection kept
    open after it: the lax server."""
    requests = []
    while data:
        line, headers, rest = parse_head(data)
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body, data = chunked_body(rest)
        else:
            length = int(headers.get("content-length", "0"))
            body, data = rest[:length], rest[length:]
        requests.append((line, body))
    return requests


def chunked_body(data: bytes) -> tuple[bytes, bytes]:
    """``(the decoded body, the bytes after it)``: chunks up to the empty one (no trailers)."""
    body = b""
    while True:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return body, data.removeprefix(b"\r\n")
        body, data = body + data[:size], data[size + 2:]
# --8<-- [end:views]


def show(name: str, requests: list[tuple[str, bytes]]) -> None:
    print(f"{name} reads {len(requests)} request{'s' * (len(requests) > 1)}:")
    for line, body in requests:
        print(f"  {line} with a {len(body)}-byte body")


def send(port: int) -> None:
    """Send ATTACK to 127.0.0.1:``port``; print the answer and whether the server closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(ATTACK)
        answer = b""
        while data := sock.recv(65536):
            answer += data
    print(answer.decode("latin-1").replace("\r\n", "\n").rstrip("\n"))
    print(f"then the server closed; answers to GET /admin: {answer.count(b'HTTP/1.1 ') - 1}")


if __name__ == "__main__":
    show("the proxy (Content-Length)", proxy_view(ATTACK))
    show("the lax server (Transfer-Encoding)", lax_view(ATTACK))
    if len(sys.argv) > 1:
        print()
        send(int(sys.argv[1]))
