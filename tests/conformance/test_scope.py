"""The HTTP connection scope the app sees, and lifespan startup and state.

Spec: ASGI HTTP spec 2.4, "HTTP Connection Scope" (path decoded from percent-encoding and
UTF-8, raw_path without the query string, headers lowercased in the order received, client and
server as (host, port)); ASGI Lifespan spec 2.0 (startup, ``state`` copied into request scopes).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.conftest import ConformanceServer
from tests.conformance.support import HOST, Connection, get, request

feature = pytest.mark.feature

TARGET = "/scope/caf%C3%A9%20x%2Fy?q=1&r=%20&s"


def _scope(server: ConformanceServer) -> tuple[dict[str, Any], tuple[str, int]]:
    """GET TARGET with mixed-case, repeated headers; the app's scope and our socket address."""
    headers = [("X-Case-One", "1"), ("x-case-two", "2"), ("X-CASE-ONE", "3")]
    with Connection(server.port) as conn:
        local = conn.sock.getsockname()
        conn.send(request("GET", TARGET, headers=headers))
        response = conn.read_response()
    assert response is not None and response.status == 200
    value = response.json()
    assert isinstance(value, dict)
    return value, (local[0], local[1])


@feature("scope")
def test_scope_basics(server: ConformanceServer) -> None:
    scope, _ = _scope(server)
    assert scope["type"] == "http"
    assert scope["asgi"]["version"] == "3.0"
    assert scope["http_version"] == "1.1"
    assert scope["method"] == "GET"
    assert scope["scheme"] == "http"
    assert scope["root_path"] == ""


@feature("scope")
def test_path_is_percent_decoded_and_raw_path_is_not(server: ConformanceServer) -> None:
    scope, _ = _scope(server)
    assert scope["path"] == "/scope/café x/y"
    assert scope["raw_path"] == "/scope/caf%C3%A9%20x%2Fy"
    assert scope["query_string"] == "q=1&r=%20&s"


@feature("scope")
def test_headers_lowercased_with_values_in_order(server: ConformanceServer) -> None:
    # ASGI: names lowercased; "order of header values must be preserved ... the order of
    # header names is not important"; duplicates preserved.
    scope, _ = _scope(server)
    assert all(name == name.lower() for name, _ in scope["headers"])
    assert [v for n, v in scope["headers"] if n == "x-case-one"] == ["1", "3"]
    assert [v for n, v in scope["headers"] if n == "x-case-two"] == ["2"]


@feature("scope")
def test_client_and_server_addresses(server: ConformanceServer) -> None:
    scope, local = _scope(server)
    assert scope["client"] == [local[0], local[1]]
    assert scope["server"] == [HOST, server.port]


@feature("lifespan")
def test_lifespan_startup_ran_before_serving(server: ConformanceServer) -> None:
    assert server.lifespan_file.read_text().splitlines() == ["startup"]


@feature("lifespan")
def test_lifespan_state_reaches_requests(server: ConformanceServer) -> None:
    assert get(server.port, "/state").json() == {"lifespan": "started"}
