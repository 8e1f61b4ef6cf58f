"""WebSocket end to end on every toy server that takes it (``SERVERS``), over loopback: a
real client, raw bytes, real processes.

- the ``websockets`` client library against each server in a thread (toy-raw and toy-anyio on
  both engines, the others on the one ``--ws auto`` gives them): echo, permessage-deflate, a
  subprotocol, a 1 MiB message, the close handshake both ways, wss:// over TLS;
- hostile input as raw bytes (RFC 6455 §7.4.1's codes: 1002, 1007, 1008 for a ping flood,
  1009), on each server, each case repeated on a server process whose RSS must stay flat;
- the flags (``--ws``, ``--ws-max-size``, ``--ws-per-message-deflate``) through ``toyserve``;
- graceful shutdown: SIGTERM closes open WebSockets with 1001 on each server; under
  ``--workers``, a SIGHUP reload closes toy-raw's old workers' with 1012;
- toy-wsgi refuses a handshake with 501.
"""

from __future__ import annotations

import signal
import socket
import ssl
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.support import ws_echo_app
from tests.support.running import HOST, PeakRSS, RunningServer, running_server, serving
from tests.test_websocket import EMPTY_FLOOD, KEY, client_frame
from toyservers.asgi_websocket import MAX_PINGS
from toyservers.registry import SERVERS as REGISTRY
from toyservers.websocket import BINARY, CLOSE, CONTINUATION, PING, TEXT

APP = "tests.support.ws_echo_app:app"
TIMEOUT = 10.0
REQUEST = (b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           b"Sec-WebSocket-Key: " + KEY + b"\r\nSec-WebSocket-Version: 13\r\n")


#: the toy servers with WebSocket: toy-h2's is toy-httptools' HTTP/1.1 protocol, handed on
SERVERS = ["toy-raw", "toy-h11", "toy-httptools", "toy-h2", "toy-anyio", "toy-anyio-trio"]
#: (server, --ws): toy-raw and toy-anyio on both engines, the others on their own (wsproto for
#: toy-h11 and toy-anyio-trio)
SERVER_ENGINES = [("toy-raw", "toyservers"), ("toy-raw", "wsproto"), ("toy-anyio", "toyservers"),
                  *((server, "auto") for server in SERVERS[1:])]
#: one process per asyncio toy for the slower process tests (trio runs toy-anyio's code)
PROCESS_SERVERS = SERVERS[:-1]


@pytest.fixture(params=SERVER_ENGINES, ids="-".join)
def port(request: pytest.FixtureRequest) -> Iterator[int]:
    """The server of the param serving the echo app in a thread, on its engine."""
    server, engine = request.param
    with serving(server, ws_echo_app.app, ws=engine) as bound:
        yield bound


def test_the_servers_here_are_the_toys_with_websocket() -> None:
    assert {name for name, spec in REGISTRY.items() if spec.kind == "toy"
            and "websocket" in spec.protocols} == set(SERVERS)


def client(port: int, path: str = "/ws", **options: object) -> ClientConnection:
    scheme = "wss" if "ssl" in options else "ws"
    return connect(f"{scheme}://{HOST}:{port}{path}", open_timeout=TIMEOUT, close_timeout=TIMEOUT,
                   **options)  # type: ignore[arg-type]


# --- a real client -------------------------------------------------------------------------------


def test_the_websockets_client_talks_to_the_server(port: int) -> None:
    with client(port, subprotocols=["chat", "other"], max_size=None) as ws:
        assert ws.subprotocol == "chat"
        assert ws.response.headers["Sec-WebSocket-Extensions"].startswith("permessage-deflate")
        ws.send("héllo")
        assert ws.recv(timeout=TIMEOUT) == "héllo"
        big = bytes(range(256)) * 4096  # 1 MiB, in one message, deflated both ways
        ws.send(big)
        assert ws.recv(timeout=TIMEOUT) == big
        ws.send(["frag", "mented"])  # a fragmented message
        assert ws.recv(timeout=TIMEOUT) == "fragmented"
        ws.ping(b"x").wait(TIMEOUT)


def test_the_close_handshake_both_ways(port: int) -> None:
    with client(port) as ws:
        ws.close(4000, "leaving")
    deadline = time.monotonic() + TIMEOUT
    while not ws_echo_app.DISCONNECTS and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ws_echo_app.DISCONNECTS.pop() == {"type": "websocket.disconnect", "code": 4000,
                                             "reason": "leaving"}
    with client(port, "/close") as ws, pytest.raises(ConnectionClosed):
        ws.recv(timeout=TIMEOUT)
    assert (ws.close_code, ws.close_reason) == (4001, "bye")


@pytest.mark.parametrize("server", PROCESS_SERVERS)
def test_over_tls_the_scope_says_wss(tmp_path: Path, server: str) -> None:
    ca = trustme.CA()
    issued = ca.issue_cert(HOST)
    issued.private_key_pem.write_to_path(tmp_path / "key.pem")
    issued.cert_chain_pems[0].write_to_path(tmp_path / "cert.pem")
    scopes: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scopes.append(scope)
        await ws_echo_app.app(scope, receive, send)

    context = ssl.create_default_context()
    ca.configure_trust(context)
    with serving(server, app, ssl_keyfile=str(tmp_path / "key.pem"),
                 ssl_certfile=str(tmp_path / "cert.pem")) as bound, \
            client(bound, ssl=context) as ws:
        ws.send("secret")
        assert ws.recv(timeout=TIMEOUT) == "secret"
    assert scopes[0]["scheme"] == "wss" and "tls" in scopes[0]["extensions"]
    assert "websocket.http.response" in scopes[0]["extensions"]


# --- hostile input -------------------------------------------------------------------------------


def handshake(port: int, extra: bytes = b"") -> tuple[socket.socket, bytes]:
    """A raw WebSocket handshake; the socket and what came after the 101's head."""
    sock = socket.create_connection((HOST, port), timeout=TIMEOUT)
    sock.sendall(REQUEST + extra + b"\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed during the handshake: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101 "), head
    return sock, rest


def close_code(sock: socket.socket, data: bytes, send: bytes) -> int | None:
    """Send ``send``, read to the end of the connection; the close frame's code."""
    try:
        sock.sendall(send)
    except OSError:  # the server closed while we were still sending: read what it said
        pass
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except OSError:
        pass
    sock.close()
    while len(data) >= 2:
        size, at = data[1] & 0x7F, 2
        if size == 126:
            size, at = int.from_bytes(data[2:4], "big"), 4
        if data[0] & 0x0F == CLOSE:
            return int.from_bytes(data[at:at + 2], "big")
        data = data[at + size:]
    return None


BOMB = (lambda c: (c.compress(bytes(50_000_000)) + c.flush(zlib.Z_SYNC_FLUSH))[:-4])(
    zlib.compressobj(wbits=-15))
HOSTILE = {  # name: (bytes after the handshake, the close code, offer permessage-deflate)
    "unmasked frame": (client_frame(TEXT, b"x", masked=False), 1002, False),
    "reserved opcode": (client_frame(0x3, b"x"), 1002, False),
    "RSV1 without an extension": (client_frame(TEXT, b"x", rsv=0x40), 1002, False),
    "fragmented ping": (client_frame(PING, b"x", fin=False), 1002, False),
    "126-byte ping": (client_frame(PING, b"x" * 126), 1002, False),
    "continuation first": (client_frame(CONTINUATION, b"x"), 1002, False),
    "invalid UTF-8": (client_frame(TEXT, b"ok", fin=False) + client_frame(
        CONTINUATION, b"\xc0\xaf"), 1007, False),
    "64-bit length past max": (bytes([0x82, 0xFF]) + (2**62).to_bytes(8, "big") + b"mask",
                               1009, False),
    "deflate bomb": (client_frame(BINARY, BOMB, rsv=0x40), 1009, True),
    "ping flood": (client_frame(PING, b"x") * (MAX_PINGS + 1), 1008, False),
    "empty fragment flood": (EMPTY_FLOOD, 1008, False),
}
DEFLATE = b"Sec-WebSocket-Extensions: permessage-deflate\r\n"


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_input_gets_its_close_code(port: int, case: str) -> None:
    data, code, deflate = HOSTILE[case]
    sock, rest = handshake(port, DEFLATE if deflate else b"")
    assert close_code(sock, rest, data) == code


@pytest.mark.parametrize(("extra", "status"), [
    (b"Sec-WebSocket-Version: 8\r\n", b"426"), (b"Content-Length: 2\r\n\r\nhi", b"400")])
def test_a_bad_handshake_is_refused(port: int, extra: bytes, status: bytes) -> None:
    request = REQUEST.replace(b"Sec-WebSocket-Version: 13\r\n", b"") if status == b"426" \
        else REQUEST
    with socket.create_connection((HOST, port), timeout=TIMEOUT) as sock:
        sock.sendall(request + extra + b"\r\n" * (status == b"426"))
        assert sock.recv(65536).startswith(b"HTTP/1.1 " + status)


@pytest.fixture(scope="module", params=PROCESS_SERVERS)
def server(request: pytest.FixtureRequest) -> Iterator[RunningServer]:
    with running_server(request.param, toyserve("--ws-max-size", str(1 << 20),  # type: ignore[arg-type]
                                                server=request.param)) as running:
        yield running


@pytest.mark.parametrize("case", list(HOSTILE))
def test_rss_stays_flat_under_hostile_input(server: RunningServer, case: str) -> None:
    """Each case 20 times over; the server's RSS may grow by no more than 10 MB. A deflate
    bomb makes the server inflate up to ws_max_size before its 1009, as much as an honest
    message of that size (zlib builds it in blocks, then joins them: twice that at the peak),
    so this server's limit is 1 MiB: with the default 16 MiB, RSS rises once by about 36 MB
    (the allocator keeps those pages) and then stays there, bomb after bomb."""
    data, code, deflate = HOSTILE[case]
    sock, rest = handshake(server.port, DEFLATE if deflate else b"")
    assert close_code(sock, rest, data) == code  # warm up: the first one's allocations
    with PeakRSS(server) as rss:
        for _ in range(20):
            sock, rest = handshake(server.port, DEFLATE if deflate else b"")
            assert close_code(sock, rest, data) == code
    final = server.process.rss() - rss.baseline
    print(f"{case}: RSS {rss.baseline / 1e6:.1f} MB, peak +{rss.growth / 1e6:.2f} MB, "
          f"after +{final / 1e6:.2f} MB", file=sys.stderr)
    assert final < 10e6, f"RSS grew by {final / 1e6:.1f} MB"


# --- the flags, shutdown and reload --------------------------------------------------------------


def toyserve(*flags: str, workers: int = 1, server: str = "toy-raw") -> object:
    """A ``toyserve`` command line for running_server: ``server`` serving the echo app."""
    def argv(port: int) -> list[str]:
        return [sys.executable, "-m", "toyservers", APP, "--server", server, "--port",
                str(port), "--log-level", "warning", "--timeout-graceful-shutdown", "5",
                *(("--workers", str(workers)) if workers > 1 else ()), *flags]
    return argv


@pytest.mark.parametrize(("name", "engine"), [("toy-raw", "wsproto"),
                                             ("toy-anyio", "toyservers")])
def test_the_ws_flags_reach_the_server(name: str, engine: str) -> None:
    with running_server(name, toyserve("--ws", engine, "--ws-max-size", "100",  # type: ignore[arg-type]
                                       "--ws-per-message-deflate", "false", server=name)
                        ) as running:
        with client(running.port) as ws:
            assert "Sec-WebSocket-Extensions" not in ws.response.headers
            ws.send("x" * 100)
            assert ws.recv(timeout=TIMEOUT) == "x" * 100
            ws.send("x" * 101)
            with pytest.raises(ConnectionClosed):
                ws.recv(timeout=TIMEOUT)
        assert ws.close_code == 1009
    with running_server(name, toyserve("--ws", "none", server=name)) as running:  # type: ignore[arg-type]
        with socket.create_connection((HOST, running.port), timeout=TIMEOUT) as sock:
            sock.sendall(REQUEST + b"\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK")


def wait_closed(ws: ClientConnection) -> int | None:
    with pytest.raises(ConnectionClosed):
        while True:
            ws.recv(timeout=TIMEOUT)
    return ws.close_code


@pytest.mark.parametrize("server", SERVERS)
def test_sigterm_closes_open_websockets_with_1001(server: str) -> None:
    with running_server(server, toyserve(server=server)) as running:  # type: ignore[arg-type]
        with client(running.port) as ws:
            ws.send("hi")
            assert ws.recv(timeout=TIMEOUT) == "hi"
            assert running.process.proc is not None
            running.process.proc.send_signal(signal.SIGTERM)
            assert wait_closed(ws) == 1001
        running.process.proc.wait(TIMEOUT)


@pytest.mark.parametrize("name", ["toy-raw", "toy-anyio"])  # (trio runs no workers)
def test_a_reload_under_workers_closes_the_old_workers_websockets_with_1012(name: str) -> None:
    with running_server(name, toyserve(workers=2, server=name)) as running:  # type: ignore[arg-type]
        with client(running.port) as ws:
            assert running.process.proc is not None
            running.process.proc.send_signal(signal.SIGHUP)
            assert wait_closed(ws) == 1012
        with client(running.port) as ws:  # the new workers serve
            ws.send("again")
            assert ws.recv(timeout=TIMEOUT) == "again"


def test_toy_wsgi_refuses_a_handshake_with_501() -> None:
    with running_server("toy-wsgi", app="apps.wsgi_user:app") as running:
        with socket.create_connection((HOST, running.port), timeout=TIMEOUT) as sock:
            sock.sendall(REQUEST + b"\r\n")
            response = sock.recv(65536)
    assert response.startswith(b"HTTP/1.1 501 Not Implemented") and b"close" in response
