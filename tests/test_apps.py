"""The user endpoint at every layer: the shared msgspec endpoint, then each app on a real server.

ASGI apps run on uvicorn, WSGI apps on gunicorn, and ``apps.raw_user`` on its own; each must
echo the user as JSON and answer a malformed, truncated or wrongly shaped body with a 4xx and a
JSON error body, never a 500.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from apps.user import SAMPLE_BODY, UserError, endpoint
from bench.process import ServerProcess, free_port
from toyservers.registry import get

HOST = "127.0.0.1"
ECHO = json.loads(SAMPLE_BODY)
JSON = {"Content-Type": "application/json"}

# --- the shared endpoint, no server ---------------------------------------------------------


def test_endpoint_echoes_the_user_as_compact_json() -> None:
    assert json.loads(endpoint(SAMPLE_BODY)) == ECHO
    assert endpoint(b'{"email": "a@b.c", "name": "n", "id": 7}') == (
        b'{"id":7,"name":"n","email":"a@b.c"}'
    )


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"", 400),
        (b"{", 400),
        (b'{"id": 1, "name": "us', 400),  # truncated
        (b"not json", 400),
        (b"\xff\xfe", 400),
        (b"[1, 2]", 422),
        (b'{"id": 1}', 422),  # incomplete user
        (b'{"id": "1", "name": "user", "email": "user@email.com"}', 422),
        (b'{"id": 1, "name": null, "email": "user@email.com"}', 422),
    ],
)
def test_endpoint_rejects_bodies_that_are_not_a_user(body: bytes, status: int) -> None:
    with pytest.raises(UserError) as info:
        endpoint(body)
    assert info.value.status == status
    error = json.loads(info.value.body())
    assert error["error"] == ("malformed JSON" if status == 400 else "invalid user")
    assert error["detail"]


# --- each app on a real server ---------------------------------------------------------------

# (app id, argv builder): fastapi answers malformed JSON with 422 (its own choice), the others 400
SERVED = {
    "raw": lambda port: [sys.executable, "-m", "apps.raw_user", "--host", HOST,
                         "--port", str(port)],
    "asgi": lambda port: get("uvicorn").command("apps.asgi_user:app", HOST, port),
    "starlette": lambda port: get("uvicorn").command("apps.starlette_user:app", HOST, port),
    "fastapi": lambda port: get("uvicorn").command("apps.fastapi_user:app", HOST, port),
    "wsgi": lambda port: get("gunicorn").command("apps.wsgi_user:app", HOST, port),
    "flask": lambda port: get("gunicorn").command("apps.flask_user:app", HOST, port),
}
MALFORMED_STATUS = {"fastapi": 422}


@pytest.fixture(scope="module", params=list(SERVED))
def served(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    name: str = request.param
    port = free_port()
    with ServerProcess(SERVED[name](port), port=port) as server:
        yield name, server.url


def test_app_echoes_the_user(served: tuple[str, str]) -> None:
    _, url = served
    response = httpx.post(url + "/", content=SAMPLE_BODY, headers=JSON, timeout=5)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == ECHO


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b"{not json", "malformed"),
        (b'{"id": 1, "name": "user", "em', "malformed"),  # truncated
        (b'{"id": 1}', "shape"),  # incomplete user
        (b'{"id": "one", "name": "user", "email": "user@email.com"}', "shape"),
    ],
)
def test_app_answers_a_bad_body_with_a_json_4xx(served: tuple[str, str], body: bytes,
                                                  kind: str) -> None:
    name, url = served
    response = httpx.post(url + "/", content=body, headers=JSON, timeout=5)
    expected = 422 if kind == "shape" else MALFORMED_STATUS.get(name, 400)
    assert response.status_code == expected
    assert response.headers["content-type"].startswith("application/json")
    assert isinstance(response.json(), dict)


def test_app_keeps_the_connection_for_several_requests(served: tuple[str, str]) -> None:
    _, url = served
    with httpx.Client(base_url=url, timeout=5) as client:
        answers = [client.post("/", content=SAMPLE_BODY, headers=JSON) for _ in range(5)]
    assert [a.json() for a in answers] == [ECHO] * 5


# --- raw_user's own HTTP/1.1 handling, byte by byte -------------------------------------------


@pytest.fixture(scope="module")
def raw_port() -> Iterator[int]:
    port = free_port()
    with ServerProcess(SERVED["raw"](port), port=port):
        yield port


def request(body: bytes = SAMPLE_BODY, *, extra: bytes = b"", method: bytes = b"POST",
            target: bytes = b"/", version: bytes = b"HTTP/1.1") -> bytes:
    head = b"%s %s %s\r\nHost: test\r\nContent-Length: %d\r\n%s\r\n" % (
        method, target, version, len(body), extra)
    return head + body


def read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def exchange(port: int, *pieces: bytes) -> bytes:
    """Send ``pieces`` one ``sendall`` each, then read until the server closes."""
    with socket.create_connection((HOST, port), timeout=5) as sock:
        for piece in pieces:
            sock.sendall(piece)
        return read_until_closed(sock)


def statuses(data: bytes) -> list[int]:
    """Status codes of the responses in ``data`` (bodies here never contain ``HTTP/1.1 ``)."""
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)]


def test_raw_answers_pipelined_requests_in_order(raw_port: int) -> None:
    data = exchange(raw_port, request(b"{}") + request(b'{"id": 1') + request(
        extra=b"Connection: close\r\n"))
    assert statuses(data) == [422, 400, 200]
    assert data.endswith(SAMPLE_BODY.replace(b" ", b""))
    assert data.count(b"Connection: close") == 1


def test_raw_waits_for_the_whole_body_across_packets(raw_port: int) -> None:
    whole = request(extra=b"Connection: close\r\n")
    with socket.create_connection((HOST, raw_port), timeout=5) as sock:
        sock.sendall(whole[:20])
        sock.sendall(whole[20:-10])
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(1)  # nothing may come back before the last body byte
        sock.settimeout(5)
        sock.sendall(whole[-10:])
        data = read_until_closed(sock)
    assert statuses(data) == [200]
    assert json.loads(data.partition(b"\r\n\r\n")[2]) == ECHO


def test_raw_keeps_http11_connections_open(raw_port: int) -> None:
    with socket.create_connection((HOST, raw_port), timeout=5) as sock:
        for _ in range(3):
            sock.sendall(request())
            data = b""
            while not data.endswith(SAMPLE_BODY.replace(b" ", b"")):
                chunk = sock.recv(65536)
                assert chunk, "server closed a keep-alive connection"
                data += chunk
            assert statuses(data) == [200]


def test_raw_closes_http10_unless_asked_to_keep_alive(raw_port: int) -> None:
    assert statuses(exchange(raw_port, request(version=b"HTTP/1.0"))) == [200]
    data = exchange(raw_port, request(version=b"HTTP/1.0", extra=b"Connection: keep-alive\r\n")
                    + request(extra=b"Connection: close\r\n"))
    assert statuses(data) == [200, 200]
    assert b"Connection: keep-alive" in data


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (request(target=b"/other", extra=b"Connection: close\r\n"), 404),
        (request(method=b"GET", extra=b"Connection: close\r\n"), 405),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501),
        (b"POST / HTTP/1.1\r\nContent-Length: nope\r\n\r\n", 400),
        (b"GARBAGE\r\n\r\n", 400),
    ],
)
def test_raw_answers_what_it_does_not_serve(raw_port: int, raw: bytes, status: int) -> None:
    data = exchange(raw_port, raw)
    assert statuses(data) == [status]
    assert json.loads(data.partition(b"\r\n\r\n")[2])["error"]


def test_raw_stops_cleanly_on_sigterm_with_a_connection_open() -> None:
    port = free_port()
    server = ServerProcess(SERVED["raw"](port), port=port)
    with server, socket.create_connection((HOST, port), timeout=5) as sock:
        sock.sendall(request())
        assert statuses(sock.recv(65536)) == [200]
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=10) == 0
        assert sock.recv(65536) == b""  # the open keep-alive connection was closed


def test_raw_port_in_use_is_one_line() -> None:
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run(SERVED["raw"](port), capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert out.stderr.strip().count("\n") == 0
    assert f"cannot listen on {HOST}:{port}" in out.stderr
