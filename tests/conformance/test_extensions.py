"""The ASGI HTTP extensions trailers and early hints, over HTTP/1.1 and HTTP/2, where offered.

An extension counts as offered when the server names it in ``scope["extensions"]`` (the
suite's routes answer 501 otherwise) *and* its message has its effect on the wire, read as
raw bytes over a socket (HTTP/1.1) or as h2's events (HTTP/2, clear text, prior knowledge).
Each row's test also checks where the extension must *not* be offered, so a server that
offers it nowhere fails the whole row (and a declared gap stays a strict expected failure).

Spec: asgiref docs/extensions.rst ("HTTP Trailers": "The ASGI server will only send the
trailing headers in case the client has sent the TE: trailers header"; "Early Hints");
RFC 9112 §7.1.2 (the chunked trailer section); RFC 9110 §10.1.4 (TE), §15.2 ("A server MUST
NOT send a 1xx response to an HTTP/1.0 client"); RFC 8297 (103 Early Hints); RFC 9113 §8.1
(an HTTP/2 response: informational HEADERS, HEADERS, DATA, trailing HEADERS).
"""

from __future__ import annotations

import socket

import pytest

from tests.conformance import apps
from tests.conformance.conftest import ConformanceServer
from tests.conformance.h2client import H2Client
from tests.conformance.support import HOST, IO_TIMEOUT, Connection, get, request

feature = pytest.mark.feature
TE = [("TE", "trailers"), ("Connection", "TE")]  # RFC 9110 §10.1.4: TE is a connection option
TRAILER_LINE = b"%s: %s\r\n" % apps.TRAILER


def _raw_exchange(port: int, data: bytes) -> bytes:
    """Send ``data``, read until the server closes (the request says ``Connection: close``)."""
    with socket.create_connection((HOST, port), timeout=IO_TIMEOUT) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


@feature("ext-trailers")
def test_trailer_section_follows_the_last_chunk(server: ConformanceServer) -> None:
    raw = _raw_exchange(server.port, request(
        "GET", "/trailers", headers=[("TE", "trailers"), ("Connection", "close, TE")]))
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), raw
    assert b"\r\ntransfer-encoding: chunked" in head.lower(), head
    # RFC 9112 §7.1: last-chunk ("0" CRLF), the trailer section, then the final CRLF
    assert body.lower().endswith(b"\r\n0\r\n" + TRAILER_LINE + b"\r\n"), body
    with Connection(server.port) as conn:  # the connection persists after a trailer section
        conn.send(request("GET", "/trailers", headers=TE))
        response = conn.read_response()
        assert response is not None and response.complete, response
        assert response.body == apps.HELLO and response.trailers == [
            (apps.TRAILER[0].decode(), apps.TRAILER[1].decode())]
        conn.send(request("GET", "/length"))
        after = conn.read_response()
    assert after is not None and after.status == 200 and after.body == apps.HELLO
    # Without TE: trailers the client may discard them: the extension is not offered.
    assert "http.response.trailers" not in get(server.port, "/scope").json()["extensions"]


@feature("ext-trailers-h2")
def test_trailers_come_as_a_last_headers_frame(server: ConformanceServer) -> None:
    with H2Client(server.port) as client:
        stream = client.response(client.request("GET", "/trailers", headers=[("te", "trailers")]))
    assert stream.status == 200, stream
    assert bytes(stream.data) == apps.HELLO
    assert stream.trailers == {apps.TRAILER[0].decode(): apps.TRAILER[1].decode()}


@feature("ext-early-hints")
def test_early_hints_precede_the_response(server: ConformanceServer) -> None:
    with Connection(server.port) as conn:
        conn.send(request("GET", "/early-hints"))
        hints = [conn.read_response(informational=True) for _ in range(2)]
        final = conn.read_response()
    for hint, links in zip(hints, (apps.EARLY_LINKS, apps.EARLY_LINKS[:1]), strict=True):
        assert hint is not None and hint.status == 103, hint
        assert [value for name, value in hint.headers if name == "link"] == [
            link.decode() for link in links]
    assert final is not None and final.status == 200 and final.body == apps.HELLO
    # RFC 9110 §15.2: no 1xx to an HTTP/1.0 client, so the extension is not offered there.
    with Connection(server.port) as conn:
        conn.send(request("GET", "/early-hints", version="HTTP/1.0"))
        first = conn.read_response(informational=True)
    assert first is not None and first.status == 501, first


@feature("ext-early-hints-h2")
def test_early_hints_come_as_informational_headers(server: ConformanceServer) -> None:
    with H2Client(server.port) as client:
        stream = client.response(client.request("GET", "/early-hints"))
    links = [[("link", link.decode()) for link in apps.EARLY_LINKS],
             [("link", apps.EARLY_LINK.decode())]]
    sent = [[(n, v) for n, v in hint if n in (":status", "link")] for hint in stream.informational]
    assert sent == [[(":status", "103"), *hint] for hint in links], stream  # (Date may come too)
    assert stream.status == 200 and bytes(stream.data) == apps.HELLO
