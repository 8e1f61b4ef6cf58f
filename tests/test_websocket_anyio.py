"""WebSocket on toy-anyio and toy-anyio-trio (websocket_anyio.py): what test_websocket_server.py
checks of toy-raw's asyncio protocol with a mock transport, checked here over loopback, on
both anyio backends, with apps written with anyio.

The ASGI WebSocket spec 2.4's rules for an app's mistakes (403, 500, 1011, ``OSError`` after a
disconnect), the denial response, the close handshake, keepalive pings and their timeout,
backpressure both ways (``ws_max_queue`` pauses reading; ``send()`` waits while more than the
high-water mark is unsent), a handshake refused with 503 on shutdown, and WebSockets counted
by ``limit_concurrency``. Bad input's close codes, shutdown's 1001 and a reload's 1012:
test_websocket_e2e.py, on every server.
"""

from __future__ import annotations

import threading
from typing import Any

import anyio
import anyio.to_thread
import pytest

from tests.conformance.wsclient import CLOSE, PING, PONG, TEXT, RawWebSocket, close_payload
from tests.support.running import serving
from toyservers.asgi import ClientDisconnected
from toyservers.http1 import HIGH_WATER_LIMIT
from toyservers.websocket_anyio import Sender

TIMEOUT = 10.0
SERVERS = ["toy-anyio", "toy-anyio-trio"]
pytestmark = pytest.mark.parametrize("name", SERVERS)


async def accept_and_echo(receive: Any, send: Any) -> None:
    await send({"type": "websocket.accept"})
    while (message := await receive())["type"] == "websocket.receive":
        await send({"type": "websocket.send", "text": message.get("text"),
                    "bytes": message.get("bytes")})


class App:
    """Runs ``on_connect(receive, send)`` after ``websocket.connect``; records what happened."""

    def __init__(self, on_connect: Any = accept_and_echo) -> None:
        self.on_connect = on_connect
        self.called = threading.Event()
        self.done = threading.Event()
        self.events: list[Any] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.called.set()
        try:
            assert (await receive())["type"] == "websocket.connect"
            await self.on_connect(receive, send)
        except BaseException as exc:
            self.events.append(exc)
            raise
        finally:
            self.done.set()


# --- the app's mistakes and the denial response --------------------------------------------------


@pytest.mark.parametrize(("mistake", "status"), [("close", 403), ("return", 500),
                                                 ("raise", 500)])
def test_an_unanswered_handshake_gets_403_or_500(name: str, mistake: str, status: int) -> None:
    async def on_connect(receive: Any, send: Any) -> None:
        if mistake == "close":
            await send({"type": "websocket.close"})
        elif mistake == "raise":
            raise ValueError("boom")

    with serving(name, App(on_connect)) as port, RawWebSocket(port) as ws:
        assert ws.response.status == status


def test_the_denial_response_is_sent_as_http(name: str) -> None:
    async def deny(receive: Any, send: Any) -> None:
        await send({"type": "websocket.http.response.start", "status": 401,
                    "headers": [(b"www-authenticate", b"Bearer")]})
        await send({"type": "websocket.http.response.body", "body": b"no ", "more_body": True})
        await send({"type": "websocket.http.response.body", "body": b"entry"})

    with serving(name, App(deny)) as port, RawWebSocket(port) as ws:
        assert ws.response.status == 401 and ws.response.header("www-authenticate") == "Bearer"


@pytest.mark.parametrize(("fails", "code"), [(True, 1011), (False, 1000)])
def test_an_app_that_ends_after_accept_is_closed(name: str, fails: bool, code: int) -> None:
    async def accept_then_end(receive: Any, send: Any) -> None:
        await send({"type": "websocket.accept"})
        if fails:
            raise RuntimeError("app error")

    with serving(name, App(accept_then_end)) as port, RawWebSocket(port) as ws:
        closing = ws.read_close()
        assert closing is not None and closing.close_code == code
        ws.send_frame(CLOSE, close_payload(code))


def test_the_clients_close_is_answered_and_a_later_send_raises_an_oserror(name: str) -> None:
    async def record(receive: Any, send: Any) -> None:
        await send({"type": "websocket.accept"})
        app.events.append(await receive())
        await send({"type": "websocket.send", "text": "late"})

    app = App(record)
    with serving(name, app) as port, RawWebSocket(port) as ws:
        ws.send_frame(CLOSE, close_payload(4001, "bye"))
        closing = ws.read_close()
        assert closing is not None and closing.close_code == 4001
        assert app.done.wait(TIMEOUT)
    assert app.events[0] == {"type": "websocket.disconnect", "code": 4001, "reason": "bye"}
    assert isinstance(app.events[1], ClientDisconnected) and isinstance(app.events[1], OSError)


# --- keepalive, backpressure ---------------------------------------------------------------------


def test_keepalive_pings_want_their_pong(name: str) -> None:
    """A ping every 0.1 s; the first is answered, the second is not: close 1011."""
    with serving(name, App(), ws_ping_interval=0.1, ws_ping_timeout=0.5) as port, \
            RawWebSocket(port) as ws:
        ping = ws.read_frame()
        assert ping.opcode == PING and len(ping.payload) == 4
        ws.send_frame(PONG, ping.payload)
        ws.send_frame(PING, b"mine")
        # (our ping's pong and the next keepalive ping, in either order under load)
        assert sorted([ws.read_frame().opcode, ws.read_frame().opcode]) == [PING, PONG]
        closing = ws.read_close()
        assert closing is not None
        assert (closing.close_code, closing.close_reason) == (1011, "keepalive ping timeout")


def test_reading_pauses_while_ws_max_queue_messages_wait(name: str) -> None:
    gate = threading.Event()
    seen: list[Any] = []

    async def slow_reader(receive: Any, send: Any) -> None:
        await send({"type": "websocket.accept"})
        await anyio.to_thread.run_sync(gate.wait, abandon_on_cancel=True)
        cycle = receive.__self__
        with anyio.fail_after(TIMEOUT):
            while not cycle.reading_paused:  # the reading task gets to the tenth message
                await anyio.sleep(0.01)
        seen.append(len(cycle.queue))
        for _ in range(10):
            seen.append((await receive())["text"])
        await send({"type": "websocket.send", "text": "done"})

    with serving(name, App(slow_reader), ws_max_queue=4) as port, RawWebSocket(port) as ws:
        for i in range(10):
            ws.send_frame(TEXT, b"%d" % i)
        gate.set()
        assert ws.read_message()[:2] == (TEXT, b"done")
    assert seen == [4, *(str(i) for i in range(10))]


class Blocked(anyio.abc.ByteStream):
    """A stream whose ``send`` waits until ``opened`` is set; it keeps what was sent."""

    def __init__(self) -> None:
        self.opened, self.sent = anyio.Event(), b""

    async def send(self, item: bytes) -> None:
        await self.opened.wait()
        self.sent += item

    async def receive(self, max_bytes: int = 65536) -> bytes:
        raise anyio.EndOfStream

    async def send_eof(self) -> None: ...
    async def aclose(self) -> None: ...


def test_send_waits_while_more_than_the_high_water_mark_is_unsent(name: str) -> None:
    async def main() -> None:
        stream = Blocked()
        sender = Sender(stream)
        async with anyio.create_task_group() as group:
            group.start_soon(sender.run)
            sender.write(b"x" * HIGH_WATER_LIMIT)
            assert not sender.write_paused
            sender.write(b"y")
            assert sender.write_paused
            with anyio.move_on_after(0.05) as waited:
                await sender.drain()
            assert waited.cancelled_caught  # the stream has not taken the bytes
            stream.opened.set()
            with anyio.fail_after(TIMEOUT):
                await sender.drain()
                await sender.flush()
            assert stream.sent == b"x" * HIGH_WATER_LIMIT + b"y" and sender.unsent == 0
            group.cancel_scope.cancel()

    anyio.run(main, backend="trio" if name.endswith("trio") else "asyncio")


# --- shutdown and the concurrency limit ----------------------------------------------------------


def test_shutdown_refuses_a_handshake_not_answered_yet(name: str) -> None:
    async def never(receive: Any, send: Any) -> None:
        await anyio.sleep_forever()

    app = App(never)
    with serving(name, app, timeout_graceful_shutdown=0.5) as port:
        ws = RawWebSocket.__new__(RawWebSocket)
        waiting = threading.Thread(target=ws.__init__, args=(port,))
        waiting.start()
        assert app.called.wait(TIMEOUT)
    waiting.join(TIMEOUT)
    assert ws.response.status == 503
    ws.close()


def test_open_websockets_count_against_limit_concurrency(name: str) -> None:
    with serving(name, App(), limit_concurrency=1) as port, RawWebSocket(port) as first:
        first.send_frame(TEXT, b"open")
        assert first.read_message()[:2] == (TEXT, b"open")
        with RawWebSocket(port) as second:
            assert second.response.status == 503
