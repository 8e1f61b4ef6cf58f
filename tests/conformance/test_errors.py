"""Failing apps, hostile requests and slow clients: the right status, then the connection closes.

Spec: ASGI HTTP spec 2.4 (a server must handle app exceptions); RFC 9112 §3.2 (Host),
§5.1 (no whitespace before the colon), §6.3 (invalid Content-Length, Transfer-Encoding with
Content-Length), §9.3 (keep-alive); RFC 6585 §5 (431).
"""

from __future__ import annotations

import pytest

from tests.conformance import apps
from tests.conformance.conftest import ConformanceServer
from tests.conformance.support import Connection, get, request

feature = pytest.mark.feature

CLOSE_WAIT = 3.0  # seconds a server gets to close a connection it must close


@feature("app-exception-500")
def test_exception_before_start_gives_500(server: ConformanceServer) -> None:
    response = get(server.port, "/raise")
    assert response.status == 500


@feature("app-exception-500")
def test_server_survives_exceptions(server: ConformanceServer) -> None:
    for _ in range(3):
        assert get(server.port, "/raise").status == 500
    assert get(server.port, "/length").body == apps.HELLO


@feature("app-exception-500")
def test_exception_after_start_closes_the_connection(server: ConformanceServer) -> None:
    with Connection(server.port) as conn:
        conn.send(request("GET", "/raise-after-start"))
        response = conn.read_response()
        assert response is not None and response.status == 200
        assert not response.complete, "a response cut by an exception looked complete"
        assert conn.eof or conn.closed_within(CLOSE_WAIT)


@feature("no-response-500")
def test_app_returning_without_response_gives_500(server: ConformanceServer) -> None:
    response = get(server.port, "/noresponse")
    assert response.status == 500


@feature("headers-too-large-431")
def test_oversized_header_block_gets_431(server: ConformanceServer) -> None:
    with Connection(server.port) as conn:
        conn.send(request("GET", "/length", headers=[("X-Big", "a" * (1024 * 1024))]))
        response = conn.read_response()
        assert response is not None, "closed without a response"
        assert response.status == 431
        assert conn.closed_within(CLOSE_WAIT)


@feature("too-many-headers-431")
def test_too_many_header_fields_get_431(server: ConformanceServer) -> None:
    fields = [(f"X-Field-{i}", "v") for i in range(2000)]
    with Connection(server.port) as conn:
        conn.send(request("GET", "/length", headers=fields))
        response = conn.read_response()
        assert response is not None, "closed without a response"
        assert response.status == 431
        assert conn.closed_within(CLOSE_WAIT)


MALFORMED = {
    # RFC 9112 §5.1: whitespace between field name and colon MUST be rejected with 400.
    "space-before-colon": b"GET /length HTTP/1.1\r\nHost: a\r\nX-Foo : bar\r\n\r\n",
    # RFC 9112 §3.2: an HTTP/1.1 request without Host, or with two, MUST get 400.
    "no-host": b"GET /length HTTP/1.1\r\nX-Foo: bar\r\n\r\n",
    "two-hosts": b"GET /length HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    # RFC 9112 §6.3: an invalid Content-Length is unrecoverable: MUST respond 400 and close.
    "bad-content-length": b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 1x\r\n\r\nx",
    "field-without-colon": b"GET /length HTTP/1.1\r\nHost: a\r\nno colon here\r\n\r\n",
}


@feature("malformed-400")
@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_request_gets_400_and_close(server: ConformanceServer, case: str) -> None:
    follow_up = request("GET", "/length")
    with Connection(server.port) as conn:
        conn.send(MALFORMED[case] + follow_up)
        response = conn.read_response()
        assert response is not None, "closed without a response"
        assert response.status == 400
        assert conn.closed_within(CLOSE_WAIT), "connection kept open after a 400"
        assert b"HTTP/1.1 200" not in conn.buffer, "the request after the bad one was served"


@feature("malformed-400")
def test_content_length_with_transfer_encoding_closes(server: ConformanceServer) -> None:
    # RFC 9112 §6.3: the server MAY reject or use Transfer-Encoding alone, but it MUST close
    # the connection after responding.
    smuggle = (b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    with Connection(server.port) as conn:
        conn.send(smuggle + request("GET", "/length"))
        response = conn.read_response()
        assert response is not None, "closed without a response"
        assert conn.closed_within(CLOSE_WAIT), "connection kept open after TE + CL"
        assert b"HTTP/1.1 200" not in conn.buffer, "the request after TE + CL was served"
