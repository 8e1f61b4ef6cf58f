"""toy-httptools (toyservers/httptools_server.py): what is its own, then end to end on loopback.

The behaviour it shares with the other toy servers is tested once for all three in
test_protocols.py. Here, on the shared protocol harness: what llhttp decides on its own; then
the real server on a socket bound to port 0 in a background thread, with httpx, raw sockets,
curl and wrk.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.support.echo_app import app as echo_app
from tests.support.protocol_harness import Harness, statuses
from toyservers.config import Config
from toyservers.httptools_server import serve

HOST = b"Host: test\r\n"
TIMEOUT = 5.0  # seconds, for every network call


def get(path: bytes = b"/", extra: bytes = b"") -> bytes:
    return b"GET " + path + b" HTTP/1.1\r\n" + HOST + extra + b"\r\n"


@pytest.fixture
def toy_server() -> str:
    return "toy-httptools"


# --- the protocol on the shared harness ----------------------------------------------------------


def test_llhttp_refuses_a_method_it_does_not_know_with_501(connect: Callable[..., Harness]
                                                           ) -> None:
    """llhttp parses a fixed list of methods; any other token is refused (RFC 9110 §9.1: 501
    for a method the server does not recognise). toy-raw and toy-h11 hand it to the app."""
    h = connect(echo_app)
    out = h.feed(b"BREW / HTTP/1.1\r\nHost: t\r\n\r\n" + get(b"/smuggled"))
    assert statuses(out) == [501] and b"connection: close" in out and h.closed


# --- end to end over 127.0.0.1 ----------------------------------------------------------------


def url(address: tuple[str, int], path: str = "") -> str:
    return f"http://{address[0]}:{address[1]}{path}"


@pytest.fixture(scope="module")
def address() -> Iterator[tuple[str, int]]:
    """Serve the echo app on port 0 in a thread for the module; yield its address."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop = asyncio.Event()
    config = Config(access_log=False, timeout_keep_alive=5.0)
    thread = threading.Thread(target=loop.run_until_complete,
                              args=(serve(echo_app, config, sock=sock, ready=lambda _: ready.set(),
                                          shutdown=stop),))
    thread.start()
    assert ready.wait(TIMEOUT)
    yield sock.getsockname()
    loop.call_soon_threadsafe(stop.set)
    thread.join(TIMEOUT)
    loop.close()


def test_httpx_keeps_one_connection_for_many_requests(address: tuple[str, int]) -> None:
    base = url(address)
    with httpx.Client(timeout=TIMEOUT) as client:
        for i in range(20):
            response = client.post(f"{base}/n/{i}", json={"i": i})
            assert response.status_code == 200
            assert response.json()["path"] == f"/n/{i}"
            assert json.loads(response.json()["body"]) == {"i": i}
        head = client.head(base)
        assert head.content == b"" and int(head.headers["content-length"]) > 0


def test_raw_socket_chunked_request_and_connection_close(address: tuple[str, int]) -> None:
    with socket.create_connection(address, timeout=TIMEOUT) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
                     b"Connection: close\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert statuses(data) == [200] and b'"body": "abcde"' in data
    assert b"connection: close" in data


def test_a_stalled_client_blocks_nobody(address: tuple[str, int]) -> None:
    with socket.create_connection(address, timeout=TIMEOUT) as stalled:
        stalled.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nab")
        response = httpx.get(url(address, "/"), timeout=TIMEOUT)
        assert response.status_code == 200


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl(address: tuple[str, int]) -> None:
    result = subprocess.run(
        ["curl", "-sS", "-m", "5", "-H", "Content-Type: application/json", "-d", '{"a": 1}',
         url(address, "/curl?q=1")], capture_output=True, timeout=10, check=True)
    echoed = json.loads(result.stdout)
    assert echoed["path"] == "/curl" and echoed["query_string"] == "q=1"
    assert echoed["body"] == '{"a": 1}'


@pytest.mark.wrk
@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")
def test_wrk_short_run_has_no_errors(address: tuple[str, int]) -> None:
    result = subprocess.run(["wrk", "-t1", "-c4", "-d1s", url(address, "/")],
                            capture_output=True, text=True, timeout=30, check=True)
    requests = int(result.stdout.split(" requests in ")[0].split()[-1])
    assert requests > 0, result.stdout
    assert "Socket errors" not in result.stdout and "Non-2xx" not in result.stdout, result.stdout


def test_random_bytes_never_kill_the_server(address: tuple[str, int]) -> None:
    import random

    rng = random.Random(1234)
    started = time.monotonic()
    for _ in range(40):
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
        if rng.random() < 0.5:
            blob = get()[: rng.randrange(10)] + blob
        with socket.create_connection(address, timeout=TIMEOUT) as sock:
            sock.sendall(blob)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
    assert time.monotonic() - started < 30
    assert httpx.get(url(address, "/alive"), timeout=TIMEOUT).status_code == 200
