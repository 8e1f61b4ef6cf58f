"""toy-h11 (toyservers/h11_server.py): what is its own, and end to end.

The behaviour it shares with the other toy servers is tested once for all three in
test_protocols.py (with h11's own decisions there as strict xfails). Here, on the shared
protocol harness: what h11 decides (every transfer-coding but chunked is 501, its bound on an
incomplete event), and how toy-h11 pulls events in slices; then the real server over 127.0.0.1
on a port-0 socket with httpx, raw sockets, curl and wrk.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import subprocess
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.support.echo_app import app as echo_app
from tests.support.protocol_harness import GET, Harness, body_reader, statuses
from toyservers.config import Config
from toyservers.h11_server import MAX_EVENTS, serve

App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]
Connect = Callable[..., Harness]
NET_TIMEOUT = 5.0  # seconds, for every socket and HTTP call
POST_A = b"POST / HTTP/1.1\r\nHost: a\r\n"
CHUNKED = POST_A + b"Transfer-Encoding: chunked\r\n\r\n"


@pytest.fixture
def toy_server() -> str:
    return "toy-h11"


# --- the protocol on the shared harness ----------------------------------------------------------


@pytest.mark.parametrize("head", [
    POST_A + b"Transfer-Encoding: chunked, gzip\r\n\r\n",
    POST_A + b"Transfer-Encoding: gzip\r\n\r\n",
    POST_A + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
    POST_A + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n",
])
def test_h11_refuses_every_other_transfer_encoding(connect: Connect, head: bytes) -> None:
    """What h11 lets through of our Transfer-Encoding checks is refused all the same (501 and
    close), so nothing is smuggled."""
    h = connect(echo_app)
    out = h.feed(head + b"0\r\n\r\n" + GET)
    assert statuses(out) == [501] and h.closed


def test_an_unending_chunk_size_line_gets_431_at_h11s_bound(connect: Connect) -> None:
    """A chunk-size line that never ends: h11's bound on an incomplete event (24 KiB here)."""
    h = connect(echo_app)
    out = h.feed(CHUNKED + b"5;" + b"e" * 30000)
    assert statuses(out) == [431] and h.closed


def test_incomplete_heads_over_the_limits(connect: Connect) -> None:
    """h11 refuses a head still incomplete past max_request_line + max_header_size (431);
    when the request line itself has not ended, that is 414."""
    limits = {"max_request_line": 100, "max_header_size": 100}
    h = connect(echo_app, **limits)
    out = b"".join([h.feed(b"GET /" + b"a" * 50) for _ in range(5)])
    assert statuses(out) == [414] and h.closed
    h = connect(echo_app, **limits)
    out = h.feed(b"GET / HTTP/1.1\r\n")
    out += b"".join([h.feed(b"X: " + b"a" * 50 + b"\r\n") for _ in range(5)])
    assert statuses(out) == [431] and h.closed


def test_tiny_chunks_are_pulled_in_slices(connect: Connect) -> None:
    """A burst of 1-byte chunks is pulled MAX_EVENTS events at a time, so the loop gets a
    turn in between (reading pauses meanwhile), and the app still gets the whole body."""
    sizes: list[int] = []
    h = connect(body_reader(sizes))
    count = 5 * MAX_EVENTS
    burst = CHUNKED + b"1\r\nx\r\n" * count + b"0\r\n\r\n"
    # a slice done when data_received returns; the rest waits for the loop
    assert h.call(lambda: (h.protocol.data_received(burst), h.reading_paused)[1])
    h.spin(100)
    assert sum(sizes) == count and len(sizes) >= 3  # the app read between slices
    assert statuses(h.take()) == [200] and not h.reading_paused


# --- end to end over 127.0.0.1 -----------------------------------------------------------------


@contextlib.contextmanager
def running(app: App = echo_app, **settings: Any) -> Iterator[int]:
    """Serve ``app`` with toy-h11 in a thread on a port-0 socket; yield the port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    settings.setdefault("access_log", False)
    config = Config(port=port, lifespan="off", timeout_graceful_shutdown=2.0, **settings)
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ready = threading.Event()
    errors: list[BaseException] = []

    def main() -> None:
        try:
            loop.run_until_complete(serve(app, config, sock=sock, ready=lambda _: ready.set(),
                                          shutdown=stop))
        except BaseException as exc:
            errors.append(exc)
            ready.set()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    assert ready.wait(NET_TIMEOUT) and not errors, errors
    try:
        yield port
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(NET_TIMEOUT)
        loop.close()
        assert not thread.is_alive() and not errors, errors


def raw_exchange(port: int, data: bytes) -> bytes:
    """Send ``data``, read until the server closes (bounded by NET_TIMEOUT)."""
    with socket.create_connection(("127.0.0.1", port), timeout=NET_TIMEOUT) as conn:
        conn.sendall(data)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_scope_over_the_wire_with_httpx() -> None:
    seen: list[dict[str, Any]] = []

    async def scope_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope)
        await echo_app(scope, receive, send)

    with running(scope_app, root_path="/api") as port, httpx.Client(timeout=NET_TIMEOUT) as client:
        response = client.post(f"http://127.0.0.1:{port}/caf%C3%A9/x?q=%41&r",
                               content=b'{"id": 1}', headers={"X-Mixed-Case": "V"})
        again = client.get(f"http://127.0.0.1:{port}/second")
    assert response.status_code == 200 and again.status_code == 200
    echoed = response.json()
    assert echoed["body"] == '{"id": 1}' and echoed["method"] == "POST"
    assert ["x-mixed-case", "V"] in echoed["headers"]
    scope = seen[0]
    assert scope["type"] == "http" and scope["asgi"] == {"version": "3.0", "spec_version": "2.4"}
    assert scope["http_version"] == "1.1" and scope["scheme"] == "http"
    assert scope["path"] == "/api/café/x" and scope["raw_path"] == b"/api/caf%C3%A9/x"
    assert scope["query_string"] == b"q=%41&r" and scope["root_path"] == "/api"
    assert scope["server"] == ("127.0.0.1", port) and scope["client"][0] == "127.0.0.1"
    assert scope["client"] == seen[1]["client"]  # httpx reused the connection
    assert scope["state"] == {} and scope["state"] is not seen[1]["state"]


def test_hostile_bytes_over_a_socket_get_status_and_close() -> None:
    smuggle = b"GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"
    cases = {
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
        b"0\r\n\r\n" + smuggle: 400,
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: foo, chunked\r\n\r\n0\r\n\r\n": 501,
        b"GET / HTTP/2.0\r\nHost: a\r\n\r\n": 505,
        b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: a\r\n\r\n": 414,
        b"GET / HTTP/1.1\r\nHost: a\r\nX: " + b"a" * 17000 + b"\r\n\r\n": 431,
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\n": 413,
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX"
        b"0\r\n\r\n" + smuggle: 400,
        b"GET / HTTP/1.1\r\n\r\n": 400,
    }
    with running(max_body_size=10) as port:
        for raw, status in cases.items():
            out = raw_exchange(port, raw)
            assert statuses(out) == [status], (raw[:60], out)
            assert b"connection: close" in out.lower() and b"smuggled" not in out


def test_pipelined_requests_over_a_socket_and_stalled_client_blocks_nobody() -> None:
    with running(timeout_headers=30.0) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=NET_TIMEOUT) as stalled:
            stalled.sendall(b"GET / HTTP/1.1\r\nHost:")  # and never finishes
            two = (b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\n"
                   b"GET /2 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            out = raw_exchange(port, two)
    assert statuses(out) == [200, 200] and out.index(b'"/1"') < out.index(b'"/2"')


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl() -> None:
    with running() as port:
        result = subprocess.run(
            ["curl", "-s", "-i", "--max-time", "5", "-d", "hello", "-H", "Expect: 100-continue",
             f"http://127.0.0.1:{port}/curl"],
            capture_output=True, timeout=NET_TIMEOUT * 2, check=True)
        head = subprocess.run(["curl", "-s", "-I", "--max-time", "5", "--http1.0",
                               f"http://127.0.0.1:{port}/"],
                              capture_output=True, timeout=NET_TIMEOUT * 2, check=True)
    interim, _, final = result.stdout.partition(b"\r\n\r\n")
    assert interim == b"HTTP/1.1 100 Continue"  # curl waits for it before sending the body
    assert final.startswith(b"HTTP/1.1 200 OK\r\n")
    assert json.loads(final.split(b"\r\n\r\n", 1)[1])["body"] == "hello"
    assert head.stdout.startswith(b"HTTP/1.1 200 OK")
    assert b"connection: close" in head.stdout.lower()  # h11 closes every HTTP/1.0 exchange


@pytest.mark.wrk
@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")
def test_wrk_short_run_has_no_errors() -> None:
    with running() as port:
        result = subprocess.run(["wrk", "-t1", "-c4", "-d1s", f"http://127.0.0.1:{port}/"],
                                capture_output=True, text=True, timeout=30, check=True)
    out = result.stdout
    requests = int(out.split(" requests in ")[0].split()[-1])
    assert requests > 0, out
    assert "Socket errors" not in out and "Non-2xx" not in out, out
