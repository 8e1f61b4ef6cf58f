"""HTTP/1.1 message framing and connection management, checked on the wire with raw sockets.

Spec: RFC 9112 §6 (message body), §7.1 (chunked), §9 (connection management); RFC 9110
§6.6.1 (Date), §9.3.2 (HEAD), §10.1.1 (Expect).
"""

from __future__ import annotations

import email.utils
import time

import httpx
import pytest

from tests.conformance import apps
from tests.conformance.conftest import ConformanceServer
from tests.conformance.support import Connection, get, request

feature = pytest.mark.feature


@feature("keep-alive")
def test_two_requests_share_one_connection(server: ConformanceServer) -> None:
    with Connection(server.port) as conn:
        for _ in range(2):
            conn.send(request("GET", "/length"))
            response = conn.read_response()
            assert response is not None and response.status == 200
            assert response.body == apps.HELLO


@feature("keep-alive")
def test_httpx_reuses_the_connection(server: ConformanceServer) -> None:
    ports = set()
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=5.0) as client:
        for _ in range(3):
            response = client.get("/scope")
            assert response.status_code == 200
            ports.add(tuple(response.json()["client"]))
    assert len(ports) == 1, f"each request came from a new connection: {ports}"


@feature("pipelining")
def test_pipelined_responses_come_in_request_order(server: ConformanceServer) -> None:
    # RFC 9112 §9.3.2: a server MUST send the responses in the order the requests were received.
    delays = [300, 0, 100]
    batch = b"".join(request("GET", f"/delay?ms={ms}&id={i}") for i, ms in enumerate(delays))
    with Connection(server.port) as conn:
        conn.send(batch)
        bodies = []
        for _ in delays:
            response = conn.read_response()
            assert response is not None and response.complete
            bodies.append(response.body)
    assert bodies == [b"0", b"1", b"2"]


@feature("http10")
def test_http10_closes_after_the_response(server: ConformanceServer) -> None:
    # RFC 9112 §9.3: HTTP/1.0 without "keep-alive" is not persistent.
    with Connection(server.port) as conn:
        conn.send(request("GET", "/length", version="HTTP/1.0", host=False))
        response = conn.read_response()
        assert response is not None and response.body == apps.HELLO
        assert conn.closed_within(3.0), "connection left open after an HTTP/1.0 response"


@feature("http10")
def test_http10_gets_no_chunked_encoding(server: ConformanceServer) -> None:
    # RFC 9112 §6.1: a server MUST NOT send Transfer-Encoding unless the request is HTTP/1.1+.
    with Connection(server.port) as conn:
        conn.send(request("GET", "/chunked", version="HTTP/1.0", host=False))
        response = conn.read_response()
        assert response is not None
        assert response.header("transfer-encoding") is None
        assert response.body == b"".join(apps.CHUNKED_PARTS)


@feature("connection-close")
def test_request_connection_close_is_honoured(server: ConformanceServer) -> None:
    # RFC 9112 §9.6: a server that receives "close" MUST close after the final response.
    with Connection(server.port) as conn:
        conn.send(request("GET", "/length", headers=[("Connection", "close")]))
        response = conn.read_response()
        assert response is not None and response.body == apps.HELLO
        assert conn.closed_within(3.0), "connection left open after Connection: close"


@feature("connection-close")
def test_app_connection_close_is_honoured(server: ConformanceServer) -> None:
    with Connection(server.port) as conn:
        conn.send(request("GET", "/connection-close"))
        response = conn.read_response()
        assert response is not None and response.body == apps.HELLO
        assert (response.header("connection") or "").lower() == "close"
        assert conn.closed_within(3.0), "app sent Connection: close, server kept the connection"


@feature("chunked-request")
def test_chunked_request_body_reaches_the_app(server: ConformanceServer) -> None:
    chunks = [b"hello ", b"chunked ", b"world" * 1000]
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    with Connection(server.port) as conn:
        conn.send(request("POST", "/echo", headers=[("Transfer-Encoding", "chunked")]) + body)
        response = conn.read_response()
        assert response is not None and response.status == 200
        assert response.body == b"".join(chunks)
        conn.send(request("GET", "/length"))
        after = conn.read_response()
        assert after is not None and after.body == apps.HELLO


@feature("chunked-response")
def test_response_without_length_is_chunked(server: ConformanceServer) -> None:
    with Connection(server.port) as conn:
        conn.send(request("GET", "/chunked"))
        response = conn.read_response()
        assert response is not None and response.complete
        assert response.chunked, f"no chunked encoding: {response.headers}"
        assert response.header("content-length") is None
        assert response.body == b"".join(apps.CHUNKED_PARTS)


@feature("content-length")
def test_response_keeps_the_app_content_length(server: ConformanceServer) -> None:
    with Connection(server.port) as conn:
        conn.send(request("GET", "/length"))
        response = conn.read_response()
        assert response is not None
        assert response.header("content-length") == str(len(apps.HELLO))
        assert response.header("transfer-encoding") is None
        assert response.body == apps.HELLO


@feature("content-length")
def test_request_body_by_content_length(server: ConformanceServer) -> None:
    body = bytes(range(256)) * 300
    with httpx.Client(timeout=5.0) as client:
        response = client.post(f"http://127.0.0.1:{server.port}/echo", content=body)
    assert response.status_code == 200
    assert response.content == body


@feature("head")
def test_head_response_has_no_body(server: ConformanceServer) -> None:
    # RFC 9110 §9.3.2: the server MUST NOT send content in the response to HEAD. The next
    # response on the connection must start right after the HEAD response's header block.
    with Connection(server.port) as conn:
        conn.send(request("HEAD", "/length"))
        head = conn.read_response(head=True)
        assert head is not None and head.status == 200
        conn.send(request("GET", "/length"))
        after = conn.read_response()
        assert after is not None and after.status == 200 and after.body == apps.HELLO


@feature("head")
def test_head_keeps_the_get_headers(server: ConformanceServer) -> None:
    with Connection(server.port) as conn:
        conn.send(request("HEAD", "/length"))
        head = conn.read_response(head=True)
        assert head is not None
        assert head.header("content-length") == str(len(apps.HELLO))


@feature("date-header")
def test_date_header_is_a_current_imf_fixdate(server: ConformanceServer) -> None:
    # RFC 9110 §6.6.1: an origin server with a clock MUST send Date in 2xx responses.
    response = get(server.port, "/length")
    value = response.header("date")
    assert value is not None, f"no Date header in {response.headers}"
    assert value.endswith(" GMT")
    sent = email.utils.parsedate_to_datetime(value).timestamp()
    assert abs(sent - time.time()) < 5.0


@feature("expect-100-continue")
def test_100_continue_waits_for_the_app_to_read(server: ConformanceServer) -> None:
    key = f"expect-{server.name}-{time.monotonic_ns()}"
    headers = [("Expect", "100-continue"), ("Content-Length", "5")]
    with Connection(server.port) as conn:
        conn.send(request("POST", f"/expect?key={key}", headers=headers))
        assert not conn.closed_within(0.5) and conn.buffer == b"", (
            f"server answered before the app read the body: {conn.buffer!r}")
        assert get(server.port, f"/release?key={key}").status == 200
        interim = conn.read_response(informational=True)
        assert interim is not None and interim.status == 100
        conn.send(b"abcde")
        final = conn.read_response()
        assert final is not None and final.status == 200 and final.body == b"abcde"


@feature("expect-100-continue")
def test_no_100_continue_when_the_app_never_reads(server: ConformanceServer) -> None:
    headers = [("Expect", "100-continue"), ("Content-Length", "5"), ("Connection", "close")]
    with Connection(server.port) as conn:
        conn.send(request("POST", "/no-read", headers=headers))
        response = conn.read_response(informational=True)
        assert response is not None and response.status == 200


@feature("http10")
def test_no_100_continue_to_http10(server: ConformanceServer) -> None:
    # RFC 9110 §10.1.1: a server that receives 100-continue in HTTP/1.0 MUST ignore it.
    key = f"expect10-{server.name}-{time.monotonic_ns()}"
    headers = [("Expect", "100-continue"), ("Content-Length", "5")]
    with Connection(server.port) as conn:
        conn.send(request("POST", f"/expect?key={key}", version="HTTP/1.0", headers=headers,
                          host=False))
        assert get(server.port, f"/release?key={key}").status == 200
        conn.send(b"abcde")
        response = conn.read_response(informational=True)
        assert response is not None and response.status == 200 and response.body == b"abcde"
