"""WebSocket, HTTP/2 (cleartext, prior knowledge) and the ``tls`` extension, where offered
(trailers and early hints: ``test_extensions.py``; pathsend and zerocopysend:
``test_file_responses.py``).

An extension counts as offered when the server lists it in ``scope["extensions"]`` over
HTTP/1.1 *and* the message it names has its effect on the wire.

Spec: ASGI WebSocket spec 2.4; RFC 6455 §4 (opening handshake); RFC 9113 §3.3 (prior
knowledge); the ASGI ``tls`` extension (connection details in the scope of a request that
came over TLS). HTTPS: RFC 9110 §4.2.2, ASGI HTTP scope ``scheme``.
"""

from __future__ import annotations

import socket

import h2.config
import h2.connection
import h2.events
import httpx
import pytest
from websockets.sync.client import connect as ws_connect

from tests.conformance import apps
from tests.conformance.conftest import ConformanceServer, TLSServer
from tests.conformance.support import HOST, IO_TIMEOUT

feature = pytest.mark.feature


@feature("websocket")
def test_websocket_echo(server: ConformanceServer) -> None:
    url = f"ws://{HOST}:{server.port}/ws"
    with ws_connect(url, open_timeout=IO_TIMEOUT, close_timeout=2.0) as ws:
        ws.send("hello")
        assert ws.recv(timeout=IO_TIMEOUT) == "hello"
        ws.send(b"\x00\x01binary")
        assert ws.recv(timeout=IO_TIMEOUT) == b"\x00\x01binary"


def _h2_get(port: int, path: str) -> tuple[dict[bytes, bytes], bytes]:
    """One GET over h2c with prior knowledge: (response headers, body)."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    with socket.create_connection((HOST, port), timeout=IO_TIMEOUT) as sock:
        conn.initiate_connection()
        conn.send_headers(1, [(":method", "GET"), (":path", path), (":scheme", "http"),
                              (":authority", f"{HOST}:{port}")], end_stream=True)
        sock.sendall(conn.data_to_send())
        headers: dict[bytes, bytes] = {}
        body = bytearray()
        while True:
            data = sock.recv(65536)
            assert data, "server closed the HTTP/2 connection"
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    headers = {bytes(k): bytes(v) for k, v in event.headers or []}
                elif isinstance(event, h2.events.DataReceived):
                    body += event.data or b""
                    conn.acknowledge_received_data(event.flow_controlled_length or 0, 1)
                elif isinstance(event, h2.events.StreamEnded):
                    return headers, bytes(body)
                elif isinstance(event, h2.events.ConnectionTerminated):
                    raise AssertionError(f"server ended the HTTP/2 connection: {event}")
            sock.sendall(conn.data_to_send())


@feature("h2c-prior-knowledge")
def test_h2c_prior_knowledge(server: ConformanceServer) -> None:
    headers, body = _h2_get(server.port, "/length")
    assert headers.get(b":status") == b"200"
    assert body == apps.HELLO


@feature("h2c-prior-knowledge")
def test_h2_scope_http_version(server: ConformanceServer) -> None:
    headers, body = _h2_get(server.port, "/scope")
    assert headers.get(b":status") == b"200"
    assert b'"http_version": "2"' in body


def _scope_over_tls(server: TLSServer) -> dict[str, object]:
    response = httpx.get(f"https://{HOST}:{server.port}/scope", verify=server.client_context,
                         timeout=IO_TIMEOUT)
    assert response.status_code == 200, response
    scope: dict[str, object] = response.json()
    return scope


@feature("https")
def test_https_request_has_scheme_https(tls_server: TLSServer) -> None:
    scope = _scope_over_tls(tls_server)
    assert scope["scheme"] == "https" and scope["http_version"] == "1.1", scope


@feature("ext-tls")
def test_tls_extension(tls_server: TLSServer) -> None:
    scope = _scope_over_tls(tls_server)
    assert "tls" in scope["extensions"], scope["extensions"]  # type: ignore[operator]
    tls = scope["tls"]
    assert isinstance(tls, dict)
    assert tls["tls_version"] in (0x0303, 0x0304)  # TLS 1.2 or 1.3
    assert isinstance(tls["cipher_suite"], int) and tls["cipher_suite"] > 0
    assert tls["server_cert"] in (None, tls_server.server_cert)  # None: "unable to provide"
    assert {"server_cert", "client_cert_chain", "client_cert_name", "client_cert_error"} <= set(
        tls["keys"])
