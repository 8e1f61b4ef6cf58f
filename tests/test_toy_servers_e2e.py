"""The three toy HTTP/1.1 servers end to end: each serves in a thread on 127.0.0.1 port 0
(``tests/support/running.py`` ``serving``) and is driven with httpx, raw sockets, curl and wrk.

Every test runs against toy-raw, toy-h11 and toy-httptools (one server per module and server,
or one of its own where a test needs another app or other limits). The protocol-level
behaviour is in test_protocols.py; the suite shared with the reference servers is
tests/conformance.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.echo_app import app as echo_app
from tests.support.protocol_harness import GET, PROTOCOLS, hello_app, statuses
from tests.support.running import HOST, serving

NET_TIMEOUT = 5.0  # seconds, for every socket and HTTP call


async def e2e_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """/stream streams three parts; /sleep answers after 0.2 s; /raise?exit|interrupt|cancel
    raises that; anything else is echoed (tests/support/echo_app.py)."""
    if scope["path"] == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(3):
            await send({"type": "http.response.body", "body": b"part%d;" % i, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif scope["path"] == "/sleep":
        await asyncio.sleep(0.2)  # the app is slow: what the test is about, not a wait
        await hello_app(scope, receive, send)
    elif scope["path"] == "/raise":
        raise {b"exit": SystemExit(1), b"interrupt": KeyboardInterrupt(),
               b"cancel": asyncio.CancelledError()}[scope["query_string"]]
    else:
        await echo_app(scope, receive, send)


@pytest.fixture(scope="module", params=list(PROTOCOLS), ids=list(PROTOCOLS))
def port(request: pytest.FixtureRequest) -> Iterator[int]:
    """One server per toy for the module, with short header and keep-alive deadlines."""
    with serving(request.param, e2e_app, timeout_headers=1.0, timeout_keep_alive=2.0) as port:
        yield port


@pytest.fixture(params=list(PROTOCOLS), ids=list(PROTOCOLS))
def toy(request: pytest.FixtureRequest) -> str:
    """A toy server's name, for a test that starts a server of its own."""
    return str(request.param)


def url(port: int, path: str = "") -> str:
    return f"http://{HOST}:{port}{path}"


def raw_exchange(port: int, data: bytes) -> bytes:
    """Send ``data``, read until the server closes (each call bounded by NET_TIMEOUT)."""
    with socket.create_connection((HOST, port), timeout=NET_TIMEOUT) as conn:
        conn.sendall(data)
        chunks = []
        while chunk := conn.recv(65536):  # a timeout or a reset fails the test
            chunks.append(chunk)
    return b"".join(chunks)


def test_httpx_get_post_chunked_stream_head_and_keep_alive(port: int) -> None:
    with httpx.Client(base_url=url(port), timeout=NET_TIMEOUT) as client:
        r = client.get("/a%20b", params={"q": "1"})
        assert r.status_code == 200 and r.json()["path"] == "/a b"
        assert r.json()["query_string"] == "q=1"
        r = client.post("/p", content=b'{"id": 1}')
        assert r.json()["body"] == '{"id": 1}'
        r = client.post("/c", content=iter([b"one", b"two"]))  # sent chunked
        assert r.json()["body"] == "onetwo"
        r = client.get("/stream")
        assert r.headers["transfer-encoding"] == "chunked" and r.text == "part0;part1;part2;"
        assert r.headers["server"] == "toyservers"
        for i in range(20):
            r = client.post(f"/n/{i}", json={"i": i})
            assert r.json()["path"] == f"/n/{i}" and json.loads(r.json()["body"]) == {"i": i}
        head = client.head("/")
        assert head.content == b"" and int(head.headers["content-length"]) > 0


def test_scope_over_the_wire_with_httpx(toy: str) -> None:
    seen: list[dict[str, Any]] = []

    async def scope_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope)
        await echo_app(scope, receive, send)

    with serving(toy, scope_app, root_path="/api") as port, \
            httpx.Client(timeout=NET_TIMEOUT) as client:
        response = client.post(f"{url(port)}/caf%C3%A9/x?q=%41&r",
                               content=b'{"id": 1}', headers={"X-Mixed-Case": "V"})
        again = client.get(f"{url(port)}/second")
    assert response.status_code == 200 and again.status_code == 200
    echoed = response.json()
    assert echoed["body"] == '{"id": 1}' and echoed["method"] == "POST"
    assert ["x-mixed-case", "V"] in echoed["headers"]
    scope = seen[0]
    assert scope["type"] == "http" and scope["asgi"] == {"version": "3.0", "spec_version": "2.4"}
    assert scope["http_version"] == "1.1" and scope["scheme"] == "http"
    assert scope["path"] == "/api/café/x" and scope["raw_path"] == b"/api/caf%C3%A9/x"
    assert scope["query_string"] == b"q=%41&r" and scope["root_path"] == "/api"
    assert scope["server"] == (HOST, port) and scope["client"][0] == HOST
    assert scope["client"] == seen[1]["client"]  # httpx reused the connection
    assert scope["state"] == {} and scope["state"] is not seen[1]["state"]


def test_raw_pipelining_waits_for_a_slow_response(port: int) -> None:
    out = raw_exchange(port, b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\n"
                             b"GET /sleep HTTP/1.1\r\nHost: x\r\n\r\n"
                             b"GET /3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert statuses(out) == [200, 200, 200]
    assert out.index(b'"path": "/1"') < out.index(b"hello") < out.index(b'"path": "/3"')


def test_raw_socket_chunked_request_and_connection_close(port: int) -> None:
    out = raw_exchange(port, b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
                             b"Connection: close\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n")
    assert statuses(out) == [200] and b'"body": "abcde"' in out
    assert b"connection: close" in out.lower()


def test_hostile_bytes_over_a_socket_get_status_and_close(toy: str) -> None:
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
        b"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n" + smuggle: 400,
    }
    with serving(toy, echo_app, max_body_size=10) as port:
        for raw, status in cases.items():
            out = raw_exchange(port, raw)
            assert statuses(out) == [status], (raw[:60], out)
            assert b"connection: close" in out.lower() and b"smuggled" not in out


@pytest.mark.parametrize("exc", ["exit", "interrupt", "cancel"])
def test_app_base_exception_gets_500_and_the_server_keeps_serving(port: int, exc: str) -> None:
    out = raw_exchange(port, b"GET /raise?%s HTTP/1.1\r\nHost: x\r\n\r\n" % exc.encode())
    assert statuses(out) == [500] and b"connection: close" in out
    assert httpx.get(url(port, "/after"), timeout=NET_TIMEOUT).status_code == 200


def test_slow_headers_get_408(port: int) -> None:
    out = raw_exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n")  # the deadline is 1 s
    assert statuses(out) == [408]


def test_stalled_clients_block_nobody(port: int) -> None:
    with socket.create_connection((HOST, port), timeout=NET_TIMEOUT) as body, \
            socket.create_connection((HOST, port), timeout=NET_TIMEOUT) as head:
        body.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
        head.sendall(b"GET / HTTP/1.1\r\nHost:")  # and never finishes
        assert httpx.get(url(port, "/other"), timeout=NET_TIMEOUT).status_code == 200
        two = (b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\n"
               b"GET /2 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        out = raw_exchange(port, two)
    assert statuses(out) == [200, 200] and out.index(b'"/1"') < out.index(b'"/2"')


def test_random_bytes_never_kill_the_server(port: int) -> None:
    rng = random.Random(1234)
    started = time.monotonic()
    for _ in range(40):
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
        if rng.random() < 0.5:
            blob = GET[: rng.randrange(10)] + blob
        with socket.create_connection((HOST, port), timeout=NET_TIMEOUT) as sock:
            sock.sendall(blob)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
    assert time.monotonic() - started < 30
    assert httpx.get(url(port, "/alive"), timeout=NET_TIMEOUT).status_code == 200


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl(port: int) -> None:
    def curl(*args: str) -> bytes:
        return subprocess.run(["curl", "-sS", "--max-time", "5", *args], capture_output=True,
                              timeout=NET_TIMEOUT * 2, check=True).stdout

    echoed = json.loads(curl("-H", "Content-Type: application/json", "-d", '{"a": 1}',
                             url(port, "/curl?q=1")))
    assert echoed["path"] == "/curl" and echoed["query_string"] == "q=1"
    assert echoed["body"] == '{"a": 1}'
    chunked = curl("-X", "POST", "-H", "Transfer-Encoding: chunked", "-d", "hello",
                   url(port, "/chunked"))
    assert json.loads(chunked)["body"] == "hello"
    interim, _, final = curl("-i", "-d", "hello", "-H", "Expect: 100-continue",
                             url(port, "/expect")).partition(b"\r\n\r\n")
    assert interim == b"HTTP/1.1 100 Continue"  # curl waits for it before sending the body
    assert final.startswith(b"HTTP/1.1 200 OK\r\n")
    assert json.loads(final.split(b"\r\n\r\n", 1)[1])["body"] == "hello"
    head = curl("-I", "--http1.0", url(port, "/"))
    assert head.startswith(b"HTTP/1.1 200 OK") and b"connection: close" in head.lower()


@pytest.mark.wrk
@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")
def test_wrk_short_run_has_no_errors(port: int) -> None:
    result = subprocess.run(["wrk", "-t1", "-c4", "-d1s", url(port, "/")],
                            capture_output=True, text=True, timeout=30, check=True)
    out = result.stdout
    requests = int(out.split(" requests in ")[0].split()[-1])
    assert requests > 0, out
    assert "Socket errors" not in out and "Non-2xx" not in out, out
