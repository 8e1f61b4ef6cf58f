"""Lesson 10: two 103 Early Hints, then a chunked body with a trailer, as bytes on the wire.

The app (``app``) sends two ``http.response.early_hint`` messages, a response that promises
trailers, its body in two chunks, and a ``server-timing`` trailer. Serve it with a toy server:

    .venv/bin/toyserve hints_trailers:app --app-dir lessons/code/10-http2 \
        --server toy-httptools --port 8000

and ``main`` sends one raw HTTP/1.1 request with ``TE: trailers`` (and ``Connection: TE,
close``: TE is hop-by-hop, RFC 9110 §10.1.4) on a socket, reads to the end of the connection
and prints the bytes both ways, one line per CRLF-ended line, the CRLFs shown as ``\\r\\n``.
``Date`` values are replaced by RFC 9110's example date (the same length), so the transcript
is the same on every run.

Run: ``.venv/bin/python lessons/code/10-http2/hints_trailers.py 8000``.
Spec: RFC 8297 (103 Early Hints); RFC 9112 §7.1 (chunked, §7.1.2 the trailer section);
RFC 9110 §6.5 (trailer fields), §10.1.4 (TE); asgiref docs/extensions.rst ("Early Hints",
"HTTP Trailers").
"""

from __future__ import annotations

import re
import socket
import sys
from typing import Any

REQUEST = (b"GET /page HTTP/1.1\r\nHost: 127.0.0.1\r\n"
           b"TE: trailers\r\nConnection: TE, close\r\n\r\n")
A_DATE = b"Date: Sun, 06 Nov 1994 08:49:37 GMT"  # RFC 9110 §5.6.7's example, 29 bytes too


# --8<-- [start:app]
async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Two early hints, then ``hello, `` and ``world!`` in two chunks, then a trailer.

    Where the server does not offer ``http.response.trailers`` (HTTP/1.1 without ``TE:
    trailers``), the response does not promise them and the trailer is not sent.
    """
    if scope["type"] != "http":
        return
    offered = scope.get("extensions") or {}
    if "http.response.early_hint" in offered:
        await send({"type": "http.response.early_hint",
                    "links": [b"</style.css>; rel=preload; as=style"]})
        await send({"type": "http.response.early_hint",
                    "links": [b"</app.js>; rel=preload; as=script"]})
    trailers = "http.response.trailers" in offered
    await send({"type": "http.response.start", "status": 200, "trailers": trailers,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello, ", "more_body": True})
    await send({"type": "http.response.body", "body": b"world!", "more_body": False})
    if trailers:
        await send({"type": "http.response.trailers",
                    "headers": [(b"server-timing", b"app;dur=1.5")], "more_trailers": False})
# --8<-- [end:app]


def show(arrow: str, data: bytes) -> None:
    """Print ``data`` under a heading, one line per ``\\r\\n``-ended line."""
    print(f"{arrow} ({len(data)} bytes)")
    for line in re.findall(rb"[^\n]*\n|[^\n]+$", data):
        print("    " + repr(line)[2:-1])


def main(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5.0) as sock:
        sock.sendall(REQUEST)
        received = b""
        while chunk := sock.recv(65536):  # Connection: close: the server ends it
            received += chunk
    show(">>> client sends", REQUEST)
    show("<<< server sends", re.sub(rb"Date: [^\r]*", A_DATE, received, flags=re.I))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
