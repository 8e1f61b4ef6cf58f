"""toy-raw (toyservers/raw_asyncio.py): what is its own, around the hand-written HTTP/1.1 parser
(whose own tests are in test_http1_parser.py).

The behaviour it shares with the other toy servers is tested once for all three in
test_protocols.py. Here: how far it decodes a burst of chunks ahead of the app, on the shared
protocol harness; and the real server on 127.0.0.1 port 0 with httpx, raw sockets, curl and wrk.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.support.echo_app import app as echo_app
from tests.support.protocol_harness import GET, Harness, after, hello_app, split_response
from toyservers.config import Config
from toyservers.raw_asyncio import HIGH_WATER_LIMIT, serve


@pytest.fixture
def toy_server() -> str:
    return "toy-raw"


# --- the protocol on the shared harness ----------------------------------------------------------


def test_tiny_chunks_are_decoded_only_up_to_the_high_water_mark(
        connect: Callable[..., Harness]) -> None:
    """A burst of one-byte chunks is decoded no further than HIGH_WATER_LIMIT bytes of body
    waiting for the app; the rest stays undecoded in the read buffer until the app takes them."""
    gate = asyncio.Event()
    chunks = HIGH_WATER_LIMIT + 5000
    h = connect(after(gate, echo_app))
    h.feed(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
           + b"1\r\nx\r\n" * chunks + b"0\r\n\r\n")
    cycle = h.protocol.cycle
    assert cycle is not None and len(cycle.body) == HIGH_WATER_LIMIT
    assert h.reading_paused and len(h.protocol.buffer) == 5000 * 6 + 5
    gate.set()
    h.spin(50)
    assert json.loads(split_response(h.take())[2])["body"] == "x" * chunks
    assert not h.reading_paused and not h.closed


# --- end to end: the real server on 127.0.0.1 ------------------------------------------------


async def e2e_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await echo_app(scope, receive, send)
        return
    if scope["path"] == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(3):
            await send({"type": "http.response.body", "body": b"part%d;" % i, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif scope["path"] == "/sleep":
        await asyncio.sleep(0.2)
        await hello_app(scope, receive, send)
    elif scope["path"] == "/raise":
        raise {b"exit": SystemExit(1), b"interrupt": KeyboardInterrupt(),
               b"cancel": asyncio.CancelledError()}[scope["query_string"]]
    else:
        await echo_app(scope, receive, send)


@pytest.fixture(scope="module")
def server_port() -> Iterator[int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, asyncio.Event] = {}

    async def main() -> None:
        holder["shutdown"] = asyncio.Event()
        config = Config(access_log=False, timeout_headers=1.0, timeout_keep_alive=2.0,
                        timeout_graceful_shutdown=2.0)
        await serve(e2e_app, config, sock=sock, shutdown=holder["shutdown"],
                    ready=lambda address: ready.set())

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(10), "toy-raw did not start"
    yield port
    loop.call_soon_threadsafe(holder["shutdown"].set)
    thread.join(10)
    assert not thread.is_alive()
    loop.close()


def raw_exchange(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Send ``data``, then read until the server closes (or ``timeout`` seconds pass)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):  # a timeout or a reset fails the test
            chunks.append(chunk)
        return b"".join(chunks)


def test_e2e_httpx_get_post_chunked_and_keep_alive(server_port: int) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{server_port}", timeout=5) as client:
        r = client.get("/a%20b", params={"q": "1"})
        assert r.status_code == 200 and r.json()["path"] == "/a b"
        r = client.post("/p", content=b'{"id": 1}')
        assert r.json()["body"] == '{"id": 1}'
        r = client.post("/c", content=iter([b"one", b"two"]))  # sent chunked
        assert r.json()["body"] == "onetwo"
        r = client.get("/stream")
        assert r.headers["transfer-encoding"] == "chunked" and r.text == "part0;part1;part2;"
        assert r.headers["server"] == "toyservers"


def test_e2e_raw_pipelining_and_bad_requests(server_port: int) -> None:
    out = raw_exchange(server_port, b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\n"
                                    b"GET /sleep HTTP/1.1\r\nHost: x\r\n\r\n"
                                    b"GET /3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert out.count(b"HTTP/1.1 200 OK") == 3
    assert out.index(b'"path": "/1"') < out.index(b"hello") < out.index(b'"path": "/3"')
    out = raw_exchange(server_port, b"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n" + GET)
    assert out.startswith(b"HTTP/1.1 400 ") and out.count(b"HTTP/1.1") == 1
    out = raw_exchange(server_port, b"GET / HTTP/2.0\r\nHost: x\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 505 ")


@pytest.mark.parametrize("exc", ["exit", "interrupt", "cancel"])
def test_e2e_app_base_exception_gets_500_and_the_server_keeps_serving(server_port: int,
                                                                      exc: str) -> None:
    out = raw_exchange(server_port, b"GET /raise?%s HTTP/1.1\r\nHost: x\r\n\r\n" % exc.encode())
    assert out.startswith(b"HTTP/1.1 500 ") and b"connection: close" in out
    assert httpx.get(f"http://127.0.0.1:{server_port}/after", timeout=5).status_code == 200


def test_e2e_slow_headers_get_408(server_port: int) -> None:
    out = raw_exchange(server_port, b"GET / HTTP/1.1\r\nHost: x\r\n")
    assert out.startswith(b"HTTP/1.1 408 ")


def test_e2e_stalled_connection_does_not_block_others(server_port: int) -> None:
    with socket.create_connection(("127.0.0.1", server_port), timeout=5) as stalled:
        stalled.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
        r = httpx.get(f"http://127.0.0.1:{server_port}/other", timeout=5)
        assert r.status_code == 200


def test_e2e_curl(server_port: int) -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl not installed")
    result = subprocess.run(
        [curl, "-sS", "--max-time", "5", "-X", "POST", "-H", "Transfer-Encoding: chunked",
         "-d", "hello", f"http://127.0.0.1:{server_port}/curl"],
        capture_output=True, timeout=10, check=True)
    assert json.loads(result.stdout)["body"] == "hello"


@pytest.mark.wrk
def test_e2e_wrk_runs_without_errors(server_port: int) -> None:
    wrk = shutil.which("wrk")
    if wrk is None:
        pytest.skip("wrk not installed")
    result = subprocess.run([wrk, "-t1", "-c4", "-d1s", f"http://127.0.0.1:{server_port}/"],
                            capture_output=True, text=True, timeout=30, check=True)
    assert "requests in" in result.stdout
    requests = int(result.stdout.split(" requests in")[0].split()[-1])
    assert requests > 0
    assert "Socket errors" not in result.stdout and "Non-2xx" not in result.stdout
