"""The body from a file: the ASGI ``http.response.pathsend`` and ``http.response.zerocopysend``
extensions, over HTTP/1.1 and HTTP/2 (h2c prior knowledge), and pathsend of a path that
cannot be opened. The app's routes are ``apps.file_responses``; a server that does not offer
an extension answers them 501, and its rows are declared in ``support.UNSUPPORTED``.

Spec: ASGI extensions (asgiref docs/extensions.rst: "Path Send", "Zero Copy Send": offset
given, the file position is not used; missing, the bytes come from the position); ASGI HTTP
spec 2.4 (``send()`` raising an ``OSError`` subclass); RFC 9112 §6.3, RFC 9113 §8.1.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance import apps
from tests.conformance.conftest import ConformanceServer
from tests.conformance.h2client import H2Client
from tests.conformance.support import Connection, request

feature = pytest.mark.feature

FILE = Path(apps.SELF_PATH).read_bytes()


def _get(server: ConformanceServer, path: str) -> tuple[int, bytes]:
    with Connection(server.port) as conn:
        conn.send(request("GET", path))
        response = conn.read_response()
    assert response is not None, f"no response to {path}"
    return response.status, response.body


def _get_h2(server: ConformanceServer, path: str) -> tuple[int, bytes]:
    with H2Client(server.port) as client:
        stream = client.response(client.request("GET", path))
    return stream.status, bytes(stream.data)


@feature("ext-pathsend")
def test_pathsend(server: ConformanceServer) -> None:
    assert _get(server, "/pathsend") == (200, FILE)


@feature("ext-pathsend-h2")
def test_pathsend_h2(server: ConformanceServer) -> None:
    assert _get_h2(server, "/pathsend") == (200, FILE)


@feature("ext-zerocopysend")
def test_zerocopysend(server: ConformanceServer) -> None:
    assert _get(server, "/zerocopysend") == (200, FILE)


@feature("ext-zerocopysend-h2")
def test_zerocopysend_h2(server: ConformanceServer) -> None:
    assert _get_h2(server, "/zerocopysend") == (200, FILE)


@feature("ext-pathsend-error")
def test_pathsend_of_a_missing_file_raises_in_the_app(server: ConformanceServer) -> None:
    status, body = _get(server, "/pathsend-missing")
    assert (status, body) == (200, b"pathsend raised FileNotFoundError"), (status, body[:200])
