"""The ASGI ``websocket`` glue (asgi_websocket.py) and the connection under it
(websocket_protocol.py), at protocol level: a mock transport, a fake clock.

Every test runs on every asyncio toy server that takes WebSocket (``SERVERS``: its HTTP/1.1
protocol class hands the connection over) and over both engines (``--ws toyservers``: the
project's RFC 6455 module; ``--ws wsproto``), so the glue and each way in are tested. What
is checked is what the ASGI WebSocket spec 2.4 and RFC 6455 say, seen on the wire and by the
app: the scope, the events, the app's mistakes (403, 500, 1011, ``OSError`` after a
disconnect), the denial response, the close handshake both ways, keepalive pings,
backpressure both ways, bad input's close codes, shutdown's 1001 or 1012, ``--ws none``, and
open WebSockets counted by ``--limit-concurrency``. End to end over sockets: test_websocket_e2e.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.mock import FakeClockLoop
from tests.support.protocol_harness import RecordingTransport, fake_loop_fixture
from tests.test_websocket import KEY, client_frame
from toyservers import websocket
from toyservers.asgi import ClientDisconnected
from toyservers.asgi_websocket import CLOSE_TIMEOUT, MAX_PINGS
from toyservers.config import Config
from toyservers.h2_server import HTTP1ToH2Protocol
from toyservers.h11_server import H11Protocol
from toyservers.httptools_server import HttpToolsProtocol
from toyservers.raw_asyncio import RawHTTPProtocol
from toyservers.registry import SERVERS as REGISTRY
from toyservers.state import ServerState
from toyservers.websocket import BINARY, CLOSE, PING, PONG, TEXT
from toyservers.websocket_protocol import WSProtocol

App = Callable[..., Any]
#: registry name -> the protocol class a connection starts on (each hands WebSocket over)
SERVERS: dict[str, type[Any]] = {"toy-raw": RawHTTPProtocol, "toy-h11": H11Protocol,
                                 "toy-httptools": HttpToolsProtocol, "toy-h2": HTTP1ToH2Protocol}
ACCEPT = b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
HANDSHAKE = (b"GET /chat%20room?x=1 HTTP/1.1\r\nHost: example.com\r\nUpgrade: websocket\r\n"
             b"Connection: Upgrade\r\nSec-WebSocket-Key: " + KEY + b"\r\n"
             b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: chat, superchat\r\n\r\n")


class Transport(RecordingTransport):
    """A RecordingTransport whose protocol can be switched (as asyncio's ``set_protocol``)."""

    protocol: Any = None

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def get_protocol(self) -> Any:
        return self.protocol


class Client:
    """One connection to a server whose protocol class is ``server``: bytes in, what the
    server wrote out, a fake clock. ``state``: another connection's, to share its server."""

    def __init__(self, loop: FakeClockLoop, app: App, server: type[Any] = RawHTTPProtocol,
                 state: ServerState | None = None, **config: Any) -> None:
        config.setdefault("access_log", False)
        self.loop, self.app, self.server = loop, app, server
        self.state = state or ServerState(app, Config(**config), {"started": True})
        self.transport = Transport()
        self.transport.protocol = self.call(lambda: server(self.state))
        self.call(lambda: self.transport.protocol.connection_made(self.transport))

    def call(self, fn: Callable[[], Any]) -> Any:
        async def inside() -> Any:
            return fn()
        return self.loop.run_until_complete(inside())

    def spin(self, rounds: int = 20) -> None:
        for _ in range(rounds):
            self.loop.run_until_complete(asyncio.sleep(0))

    def feed(self, data: bytes) -> None:
        """Deliver ``data`` to whichever protocol holds the connection; let the loop run."""
        self.call(lambda: self.transport.protocol.data_received(data))
        self.spin()

    def exchange(self, data: bytes) -> bytes:
        """``feed``, then what the server wrote since the last look."""
        self.feed(data)
        return self.transport.take()

    def handshake(self, request: bytes = HANDSHAKE) -> bytes:
        """Send the handshake; the response head (the rest of what came stays readable)."""
        head, _, rest = self.exchange(request).partition(b"\r\n\r\n")
        self.transport.buffer[:0] = rest
        return head + b"\r\n\r\n"

    def frames(self) -> list[tuple[int, bytes]]:
        """The frames the server wrote since the last look, as ``(opcode, payload)``."""
        data, out = self.transport.take(), []
        while data:
            size, at = data[1] & 0x7F, 2
            if size == 126:
                size, at = int.from_bytes(data[2:4], "big"), 4
            elif size == 127:
                size, at = int.from_bytes(data[2:10], "big"), 10
            assert not data[1] & 0x80, "a server frame is never masked"
            out.append((data[0] & 0x0F, data[at:at + size]))
            data = data[at + size:]
        return out

    def advance(self, seconds: float) -> None:
        self.loop.advance(seconds)
        self.spin()

    @property
    def protocol(self) -> Any:
        return self.transport.protocol

    @property
    def closed(self) -> bool:
        return self.transport.closed


@pytest.fixture
def fake_loop() -> Iterator[FakeClockLoop]:
    yield from fake_loop_fixture()


@pytest.fixture(params=[(server, engine) for server in SERVERS
                        for engine in ("toyservers", "wsproto")], ids="-".join)
def connect(request: pytest.FixtureRequest, fake_loop: FakeClockLoop) -> Callable[..., Client]:
    """``connect(app, **config)``: a connection to the server of the param, on its engine."""
    server, engine = request.param

    def make(app: App, **config: Any) -> Client:
        config.setdefault("ws", engine)
        config.setdefault("ws_per_message_deflate", False)
        return Client(fake_loop, app, SERVERS[server], **config)
    return make


def test_the_servers_here_are_the_toys_with_websocket() -> None:
    assert all("websocket" in REGISTRY[name].protocols for name in SERVERS)


def close_payload(code: int, reason: str = "") -> bytes:
    return code.to_bytes(2, "big") + reason.encode()


class Recorder:
    """An app that accepts (or does what ``on_connect`` says), echoes messages and records
    every event and what its sends raised."""

    def __init__(self, on_connect: Callable[..., Any] | None = None) -> None:
        self.scope: dict[str, Any] = {}
        self.received: list[dict[str, Any]] = []
        self.errors: list[BaseException] = []
        self.on_connect = on_connect
        self.send: Any = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.scope, self.send = scope, send
        self.received.append(await receive())
        if self.on_connect is not None:
            await self.on_connect(send)
            return
        await send({"type": "websocket.accept", "subprotocol": "chat"})
        while True:
            message = await receive()
            self.received.append(message)
            if message["type"] == "websocket.disconnect":
                return
            await send({"type": "websocket.send", **{k: v for k, v in message.items()
                                                     if k in ("text", "bytes")}})


# --- the handshake and the scope -----------------------------------------------------------------


def test_accept_answers_101_and_messages_echo(connect: Callable[..., Client]) -> None:
    app = Recorder()
    client = connect(app)
    head = client.handshake()
    assert head.startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
    assert b"sec-websocket-accept: " + ACCEPT.lower() in head.lower()
    assert b"sec-websocket-protocol: chat" in head.lower() and b"date: " in head.lower()
    assert isinstance(client.protocol, WSProtocol)
    client.feed(client_frame(TEXT, "héllo".encode()) + client_frame(BINARY, b"\x00\x01"))
    assert client.frames() == [(TEXT, "héllo".encode()), (BINARY, b"\x00\x01")]
    assert app.received[:3] == [{"type": "websocket.connect"},
                                {"type": "websocket.receive", "text": "héllo"},
                                {"type": "websocket.receive", "bytes": b"\x00\x01"}]


def test_the_scope_is_the_asgi_websocket_scope(connect: Callable[..., Client]) -> None:
    app = Recorder()
    client = connect(app, root_path="/app")
    client.handshake()
    scope = app.scope
    assert scope["type"] == "websocket" and scope["scheme"] == "ws"
    assert scope["asgi"] == {"version": "3.0", "spec_version": "2.4"}
    assert scope["http_version"] == "1.1" and "method" not in scope
    assert (scope["path"], scope["raw_path"]) == ("/app/chat room", b"/app/chat%20room")
    assert (scope["root_path"], scope["query_string"]) == ("/app", b"x=1")
    assert (b"host", b"example.com") in scope["headers"]
    assert scope["subprotocols"] == ["chat", "superchat"]
    assert scope["client"] == ("127.0.0.1", 50000) and scope["server"] == ("127.0.0.1", 8000)
    assert scope["state"] == {"started": True}
    assert scope["extensions"] == {"websocket.http.response": {}}


def test_bytes_sent_right_after_the_handshake_wait_for_the_accept(
        connect: Callable[..., Client]) -> None:
    gate = asyncio.Event()

    async def slow_accept(send: Any) -> None:
        await gate.wait()
        await send({"type": "websocket.accept"})
        await asyncio.sleep(3600)

    client = connect(Recorder(slow_accept))
    assert client.exchange(HANDSHAKE + client_frame(PING, b"early")) == b""
    assert client.transport.reading_paused
    gate.set()
    client.spin()
    client.transport.buffer[:] = client.transport.buffer.partition(b"\r\n\r\n")[2]
    assert client.frames() == [(PONG, b"early")]


@pytest.mark.parametrize(("extra", "status"), [
    (b"Sec-WebSocket-Version: 8\r\n", 426),
    (b"Content-Length: 3\r\n", 400),
])
def test_a_bad_handshake_is_answered_and_closed(connect: Callable[..., Client], extra: bytes,
                                                status: int) -> None:
    request = HANDSHAKE.replace(b"Sec-WebSocket-Version: 13\r\n", b"") if status == 426 else \
        HANDSHAKE
    app = Recorder()
    data = connect(app).exchange(request[:-2] + extra + b"\r\n" + b"abc" * (status == 400))
    assert data.startswith(b"HTTP/1.1 %d " % status) and b"connection: close" in data
    assert (b"sec-websocket-version: 13" in data) == (status == 426)
    assert app.received == []


def test_ws_none_serves_the_request_as_http(connect: Callable[..., Client]) -> None:
    scopes: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scopes.append(scope)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"plain"})

    data = connect(app, ws="none").exchange(HANDSHAKE)
    assert data.startswith(b"HTTP/1.1 200 OK") and data.endswith(b"plain")
    assert scopes[0]["type"] == "http"


# --- the app's mistakes (ASGI WebSocket spec 2.4) ------------------------------------------------


def test_close_before_accept_is_a_403(connect: Callable[..., Client]) -> None:
    async def refuse(send: Any) -> None:
        await send({"type": "websocket.close"})

    app = Recorder(refuse)
    client = connect(app)
    assert client.handshake().startswith(b"HTTP/1.1 403 Forbidden")
    assert client.closed


@pytest.mark.parametrize("mistake", ["return", "raise", "bad subprotocol", "handshake header"])
def test_an_app_that_does_not_answer_the_handshake_gets_a_500(
        connect: Callable[..., Client], mistake: str, caplog: pytest.LogCaptureFixture) -> None:
    async def on_connect(send: Any) -> None:
        if mistake == "raise":
            raise ValueError("boom")
        if mistake == "bad subprotocol":
            await send({"type": "websocket.accept", "subprotocol": "other"})
        if mistake == "handshake header":
            await send({"type": "websocket.accept",
                        "headers": [(b"sec-websocket-protocol", b"chat")]})

    client = connect(Recorder(on_connect))
    assert client.handshake().startswith(b"HTTP/1.1 500 ")
    assert client.closed
    assert any(r.levelname == "ERROR" for r in caplog.records)


def test_the_denial_response_is_sent_as_http(connect: Callable[..., Client]) -> None:
    async def deny(send: Any) -> None:
        await send({"type": "websocket.http.response.start", "status": 401,
                    "headers": [(b"www-authenticate", b"Bearer")]})
        await send({"type": "websocket.http.response.body", "body": b"no ", "more_body": True})
        await send({"type": "websocket.http.response.body", "body": b"entry"})

    client = connect(Recorder(deny))
    data = client.exchange(HANDSHAKE)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 401 Unauthorized") and b"www-authenticate: Bearer" in head
    assert b"connection: close" in head and body == b"3\r\nno \r\n5\r\nentry\r\n0\r\n\r\n"
    assert client.closed


@pytest.mark.parametrize(("fails", "code"), [(True, 1011), (False, 1000)])
def test_an_app_that_ends_after_accept_is_closed(connect: Callable[..., Client], fails: bool,
                                                 code: int) -> None:
    async def accept_then_end(send: Any) -> None:
        await send({"type": "websocket.accept"})
        if fails:
            raise RuntimeError("app error")

    client = connect(Recorder(accept_then_end))
    client.handshake()
    assert client.frames() == [(CLOSE, close_payload(code))]
    assert not client.closed  # the client's close frame is awaited
    client.feed(client_frame(CLOSE, close_payload(code)))
    assert client.closed


def test_a_send_after_the_client_left_raises_an_oserror(connect: Callable[..., Client]) -> None:
    app = Recorder()
    client = connect(app)
    client.handshake()
    client.call(lambda: client.protocol.connection_lost(None))
    client.spin()
    assert app.received[-1] == {"type": "websocket.disconnect", "code": 1006, "reason": ""}

    async def send_again() -> None:
        await app.send({"type": "websocket.send", "text": "late"})

    with pytest.raises(ClientDisconnected) as info:
        client.loop.run_until_complete(send_again())
    assert isinstance(info.value, OSError)


# --- the close handshake (RFC 6455 §7) -----------------------------------------------------------


def test_the_clients_close_is_answered_with_its_code_and_the_server_closes_first(
        connect: Callable[..., Client]) -> None:
    app = Recorder()
    client = connect(app)
    client.handshake()
    client.feed(client_frame(CLOSE, close_payload(4001, "bye")))
    assert client.frames() == [(CLOSE, close_payload(4001))]
    assert client.closed
    assert app.received[-1] == {"type": "websocket.disconnect", "code": 4001, "reason": "bye"}


def test_the_apps_close_waits_for_the_clients_then_a_deadline(
        connect: Callable[..., Client]) -> None:
    received: list[dict[str, Any]] = []

    async def close_at_once(send: Any) -> None:
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": 4000, "reason": "done"})

    client = connect(Recorder(close_at_once))
    client.handshake()
    assert client.frames() == [(CLOSE, close_payload(4000, "done"))]
    client.feed(client_frame(TEXT, b"dropped"))  # a message after our close: read, dropped
    assert client.frames() == [] and not client.closed and received == []
    client.advance(CLOSE_TIMEOUT)
    assert client.closed


# --- keepalive pings -----------------------------------------------------------------------------


def test_pings_are_answered_and_keepalive_pings_want_their_pong(
        connect: Callable[..., Client]) -> None:
    client = connect(Recorder(), ws_ping_interval=20.0, ws_ping_timeout=5.0)
    client.handshake()
    client.feed(client_frame(PING, b"are you there"))
    assert client.frames() == [(PONG, b"are you there")]
    client.advance(20.0)
    [(opcode, payload)] = client.frames()
    assert opcode == PING and len(payload) == 4
    client.feed(client_frame(PONG, payload))
    client.advance(5.0)
    assert not client.closed and client.frames() == []
    client.advance(15.0)
    [(opcode, payload)] = client.frames()  # the next one: no pong this time
    client.advance(5.0)
    assert client.frames() == [(CLOSE, close_payload(1011, "keepalive ping timeout"))]
    assert client.closed


def test_a_late_pong_does_not_cancel_the_close_deadline(connect: Callable[..., Client]) -> None:
    async def close_later(send: Any) -> None:
        await send({"type": "websocket.accept"})
        await asyncio.sleep(25)  # on the fake clock: after the first keepalive ping
        await send({"type": "websocket.close"})

    client = connect(Recorder(close_later), ws_ping_interval=20.0, ws_ping_timeout=20.0)
    client.handshake()
    client.advance(20.0)
    [(_, payload)] = client.frames()
    client.advance(5.0)
    assert client.frames() == [(CLOSE, close_payload(1000))]
    client.feed(client_frame(PONG, payload))  # the ping's answer, after our close
    client.advance(CLOSE_TIMEOUT)
    assert client.closed


# --- backpressure --------------------------------------------------------------------------------


def test_reading_pauses_while_ws_max_queue_messages_wait(connect: Callable[..., Client]) -> None:
    gate = asyncio.Event()
    got: list[dict[str, Any]] = []

    async def slow_reader(send: Any) -> None:
        await send({"type": "websocket.accept"})
        receive = client.protocol.cycle.receive
        await gate.wait()
        while len(got) < 10:
            got.append(await receive())

    client = connect(Recorder(slow_reader), ws_max_queue=4)
    client.handshake()
    client.feed(b"".join(client_frame(TEXT, b"%d" % i) for i in range(10)))
    assert client.transport.reading_paused
    assert len(client.protocol.cycle.queue) == 4  # the rest waits in the engine, unparsed
    gate.set()
    client.spin(50)
    assert [m["text"] for m in got] == [str(i) for i in range(10)]
    assert not client.transport.reading_paused


def test_send_waits_while_the_client_is_not_reading(connect: Callable[..., Client]) -> None:
    gate, sent = asyncio.Event(), []

    async def sender(send: Any) -> None:
        await send({"type": "websocket.accept"})
        await gate.wait()
        for i in range(3):
            await send({"type": "websocket.send", "bytes": b"x"})
            sent.append(i)

    client = connect(Recorder(sender))
    client.handshake()
    client.call(lambda: client.protocol.pause_writing())  # the transport's buffer is full
    gate.set()
    client.spin()
    assert sent == []
    client.call(lambda: client.protocol.resume_writing())
    client.spin()
    assert sent == [0, 1, 2]


# --- bad input (RFC 6455 §7.4.1 codes) -----------------------------------------------------------


@pytest.mark.parametrize(("data", "code"), [
    (client_frame(TEXT, b"x", masked=False), 1002),
    (client_frame(TEXT, b"x", rsv=0x40), 1002),
    (client_frame(0x5, b"x"), 1002),
    (client_frame(TEXT, b"ok \xff"), 1007),
    (bytes([0x82, 0xFF]) + (2**62).to_bytes(8, "big") + b"mask", 1009),
])
def test_bad_input_closes_with_its_code(connect: Callable[..., Client], data: bytes,
                                        code: int) -> None:
    app = Recorder()
    client = connect(app, ws_max_size=1 << 20)
    client.handshake()
    client.feed(data)
    [(opcode, payload)] = client.frames()
    assert opcode == CLOSE and int.from_bytes(payload[:2], "big") == code
    assert client.closed and app.received[-1]["code"] == code


@pytest.mark.parametrize(("ending", "code"), [
    (client_frame(TEXT, b"bad rsv", rsv=0x20) + client_frame(PING, b"unanswered"), 1002),
    (client_frame(CLOSE, close_payload(1000)) + client_frame(PING, b"unanswered"), 1000),
])
def test_messages_read_before_a_close_or_an_error_are_answered_first(
        connect: Callable[..., Client], ending: bytes, code: int) -> None:
    """Autobahn's case 3.2 (an RSV error after a message, then a ping): the echo, then the
    close frame, and no pong; a close frame after a message likewise."""
    client = connect(Recorder())
    client.handshake()
    client.feed(client_frame(TEXT, b"Hello, world!") + ending)
    frames = [(opcode, payload[:2] if opcode == CLOSE else payload)
              for opcode, payload in client.frames()]
    echo = [] if code == 1000 and client.state.config.ws == "wsproto" else [  # (no message
        (TEXT, b"Hello, world!")]  # after a close frame in wsproto: ClientDisconnected)
    assert frames == [*echo, (CLOSE, close_payload(code))]
    assert client.closed


def test_a_message_over_ws_max_size_closes_1009(connect: Callable[..., Client]) -> None:
    client = connect(Recorder(), ws_max_size=1000)
    client.handshake()
    client.feed(client_frame(TEXT, b"a" * 600, fin=False) + client_frame(0, b"a" * 600))
    assert [(op, p[:2]) for op, p in client.frames()] == [(CLOSE, b"\x03\xf1")]


def test_a_ping_flood_closes_1008(connect: Callable[..., Client]) -> None:
    client = connect(Recorder())
    client.handshake()
    client.feed(client_frame(PING) * MAX_PINGS)
    assert len(client.frames()) == MAX_PINGS and not client.closed
    client.feed(client_frame(PING))
    assert client.frames() == [(CLOSE, close_payload(1008, "ping flood"))] and client.closed


# --- shutdown and the concurrency limit ----------------------------------------------------------


@pytest.mark.parametrize("code", [1001, 1012])
def test_shutdown_closes_open_websockets_with_the_shutdown_code(
        connect: Callable[..., Client], code: int) -> None:
    app = Recorder()
    client = connect(app, ws_shutdown_code=code)
    client.handshake()
    client.call(client.protocol.shutdown)
    client.spin()
    assert client.frames() == [(CLOSE, close_payload(code, "server shutting down"))]
    assert app.received[-1]["code"] == code
    client.feed(client_frame(CLOSE, close_payload(code)))
    assert client.closed


def test_shutdown_refuses_a_handshake_not_answered_yet(connect: Callable[..., Client]) -> None:
    async def never(send: Any) -> None:
        await asyncio.sleep(3600)

    client = connect(Recorder(never))
    client.feed(HANDSHAKE)
    client.call(client.protocol.shutdown)
    assert client.transport.take().startswith(b"HTTP/1.1 503 ")


def test_open_websockets_count_against_limit_concurrency(connect: Callable[..., Client]) -> None:
    first = connect(Recorder(), limit_concurrency=1)
    first.handshake()
    assert len(first.state.connections) == 1 and len(first.state.tasks) == 1
    second = Client(first.loop, first.app, first.server, first.state)
    assert second.exchange(HANDSHAKE).startswith(b"HTTP/1.1 503 ")


def test_the_engine_names_agree_with_config() -> None:
    assert set(Config.__annotations__) >= {"ws", "ws_max_size", "ws_max_queue",
                                           "ws_ping_interval", "ws_ping_timeout",
                                           "ws_per_message_deflate", "ws_shutdown_code"}
    assert websocket.MAX_SIZE == Config().ws_max_size == 16 * 1024 * 1024
