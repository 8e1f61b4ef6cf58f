"""toy-h2's keepalive pings on WebSocket streams (RFC 8441): ``--ws-ping-interval`` and
``--ws-ping-timeout`` mean what they mean over HTTP/1.1.

From the 200 on, the server pings each WebSocket every interval; a client that answers keeps
its WebSocket, one that does not gets close 1011 within interval + timeout and its app
``websocket.disconnect`` with 1011; an interval of 0 or None sends none. In memory
(``tests/support/h2_harness.py``, a fake clock) the deadlines are checked to the second, with
several WebSockets on one connection's timer, and the path of a client that vanished: 1011,
RST_STREAM after ``CLOSE_TIMEOUT``, then the connection's idle GOAWAY. End to end (toy-h2 in
a thread, ``tests/support/h2_websocket_client.py``: h2 and wsproto's frames) with a 0.2 s
interval, every wait is on frames arriving (pings counted, the close), never a sleep.

Spec: RFC 6455 §5.5.2-§5.5.3 (ping, pong), §7.4.1 (1011); RFC 8441 §5; ASGI WebSocket spec
2.4 (``websocket.disconnect``'s ``code``).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from typing import Any

import h2.events
import pytest
import wsproto.connection
import wsproto.events as ws
from h2.errors import ErrorCodes
from wsproto import ConnectionType

from tests.conformance.wsclient import PONG, frame
from tests.support.h2_harness import H2Harness
from tests.support.h2_websocket_client import H2WebSocketClient, echo_until_disconnect
from tests.support.mock import FakeClockLoop
from tests.support.protocol_harness import fake_loop_fixture
from tests.support.running import serving
from toyservers.asgi_websocket import CLOSE_TIMEOUT

#: Each WebSocket's query string and the websocket.disconnect its app's receive() gave.
DISCONNECTS: queue.Queue[tuple[bytes, dict[str, Any]]] = queue.Queue()
WAIT = 5.0  # seconds a test waits for a frame, or for the server thread's app
#: Seconds the end-to-end close may come after interval + timeout: the test client and the
#: server thread share one process on a loaded machine.
MARGIN = 5.0


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """HTTP: ``200 plain``. WebSocket: accept, echo, and put the ``websocket.disconnect``
    that ends it on ``DISCONNECTS``."""
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"plain"})
        return
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    await echo_until_disconnect(scope, receive, send, DISCONNECTS)


def disconnect(tag: bytes) -> dict[str, Any]:
    """The websocket.disconnect of the WebSocket opened with query string ``tag``."""
    while True:
        query, message = DISCONNECTS.get(timeout=WAIT)
        if query == tag:
            return message


# --- in memory, on a fake clock ---------------------------------------------------------------


@pytest.fixture
def loop() -> Iterator[FakeClockLoop]:
    yield from fake_loop_fixture()


class Peer:
    """One WebSocket of an ``H2Harness`` client: wsproto reads the server's frames on stream
    ``sid`` and frames the client's (masked)."""

    def __init__(self, h: H2Harness, path: bytes = b"/ws") -> None:
        self.h, self.sid = h, h.client.get_next_available_stream_id()
        h.client.send_headers(self.sid, [
            (b":method", b"CONNECT"), (b":protocol", b"websocket"), (b":scheme", b"http"),
            (b":authority", b"example.com"), (b":path", path),
            (b"sec-websocket-version", b"13")])
        h.pump()
        assert h.response(self.sid)[0] == 200
        self.socket = wsproto.connection.Connection(ConnectionType.CLIENT)
        self.read = 0  # bytes of the stream's DATA fed to wsproto

    def events(self) -> list[ws.Event]:
        """The server's frames on the stream since the last call."""
        self.h.pump()
        data = self.h.response(self.sid)[2]
        self.socket.receive_data(data[self.read:])
        self.read = len(data)
        return list(self.socket.events())

    def send(self, event: ws.Event) -> None:
        self.h.client.send_data(self.sid, self.socket.send(event))
        self.h.pump()

    def ping(self) -> bytes:
        """The payload of the one keepalive ping that came since the last call."""
        [event] = self.events()
        assert isinstance(event, ws.Ping) and len(event.payload) == 4
        return bytes(event.payload)


def test_a_ping_every_interval_and_1011_for_a_missing_pong(loop: FakeClockLoop) -> None:
    """A ping ``interval`` seconds after the 200, the next ``interval`` seconds after its
    pong; the second goes unanswered: ``timeout`` seconds later, close 1011 on the stream
    (with END_STREAM) and 1011 for the app, as over HTTP/1.1."""
    h = H2Harness(loop, app, ws_ping_interval=20.0, ws_ping_timeout=5.0)
    peer = Peer(h, b"/ws?missing")
    h.advance(19.5)
    assert peer.events() == []
    h.advance(0.5)
    peer.send(ws.Pong(peer.ping()))
    h.advance(19.5)  # 5 s of the pong's deadline and more: answered, so no close
    assert peer.events() == []
    h.advance(0.5)
    assert peer.ping()
    h.advance(4.5)
    assert peer.events() == []
    h.advance(0.5)
    assert peer.events() == [ws.CloseConnection(1011, "keepalive ping timeout")]
    assert h.of(h2.events.StreamEnded, peer.sid)  # our close frame ends the stream
    assert disconnect(b"missing") == {"type": "websocket.disconnect", "code": 1011,
                                      "reason": "keepalive ping timeout"}


def test_a_client_that_vanished_is_reset_then_its_connection_closed(loop: FakeClockLoop
                                                                    ) -> None:
    """A client gone without a FIN answers nothing: 1011 after interval + timeout, RST_STREAM
    CANCEL ``CLOSE_TIMEOUT`` seconds later, and with no stream left the idle deadline
    (``timeout_keep_alive``) ends the connection with GOAWAY."""
    h = H2Harness(loop, app, ws_ping_interval=20.0, ws_ping_timeout=5.0, timeout_keep_alive=5.0)
    peer = Peer(h)
    h.advance(20.0)
    h.advance(5.0)
    assert peer.events()[-1] == ws.CloseConnection(1011, "keepalive ping timeout")
    h.advance(CLOSE_TIMEOUT)
    h.pump()
    assert [e.error_code for e in h.of(h2.events.StreamReset, peer.sid)] == [ErrorCodes.CANCEL]
    assert not h.protocol.streams and not h.transport.closed
    h.advance(5.0)
    h.pump()
    assert h.goaways == [(0, peer.sid)] and h.transport.closed


def test_only_the_pong_of_our_ping_counts(loop: FakeClockLoop) -> None:
    """An unsolicited pong, or one with another payload, does not answer the keepalive ping
    (RFC 6455 §5.5.3: the pong carries the ping's data); a late pong after our close frame
    does not put off the close deadline."""
    h = H2Harness(loop, app, ws_ping_interval=20.0, ws_ping_timeout=5.0)
    peer = Peer(h)
    peer.send(ws.Pong(b"none asked"))
    h.advance(20.0)
    payload = peer.ping()
    peer.send(ws.Pong(b"abcd" if payload != b"abcd" else b"dcba"))
    h.advance(5.0)
    assert peer.events() == [ws.CloseConnection(1011, "keepalive ping timeout")]
    h.client.send_data(peer.sid, frame(PONG, payload))  # (wsproto sends none after a close)
    h.pump()
    h.advance(CLOSE_TIMEOUT)
    h.pump()
    assert [e.error_code for e in h.of(h2.events.StreamReset, peer.sid)] == [ErrorCodes.CANCEL]


def test_websockets_of_one_connection_each_keep_their_own_schedule(loop: FakeClockLoop
                                                                   ) -> None:
    """Three WebSockets opened 5 s apart, on one timer: each is pinged ``interval`` seconds
    after its own 200, and the one that does not answer alone is closed; a request beside
    them is served as ever."""
    h = H2Harness(loop, app, ws_ping_interval=20.0, ws_ping_timeout=5.0)
    first = Peer(h)
    h.advance(5.0)
    second = Peer(h)
    h.advance(5.0)
    third = Peer(h)
    assert len(h.protocol.ws_timers.due) == 3
    h.advance(10.0)  # 20 s after the first's 200
    first.send(ws.Pong(first.ping()))
    assert second.events() == third.events() == []
    h.advance(5.0)
    assert second.ping() and third.events() == []  # the second does not answer
    h.advance(5.0)
    third.send(ws.Pong(third.ping()))
    assert second.events() == [ws.CloseConnection(1011, "keepalive ping timeout")]
    assert first.events() == third.events() == []
    sid = h.request(b"/")
    h.pump()
    assert h.response(sid)[0] == 200 and h.response(sid)[2] == b"plain"
    h.advance(20.0)
    assert first.ping() and third.ping()


@pytest.mark.parametrize("interval", [0.0, None])
def test_no_pings_when_the_interval_is_off(loop: FakeClockLoop, interval: float | None) -> None:
    """``--ws-ping-interval 0`` (or None) turns the keepalive off, as over HTTP/1.1."""
    h = H2Harness(loop, app, ws_ping_interval=interval, ws_ping_timeout=5.0)
    peer = Peer(h)
    for _ in range(10):
        h.advance(60.0)
    assert peer.events() == []
    peer.send(ws.TextMessage("still here"))
    assert peer.events() == [ws.TextMessage("still here")]


def test_without_a_timeout_pings_go_on_unanswered(loop: FakeClockLoop) -> None:
    """``--ws-ping-timeout 0`` (or None): pings every interval, and no pong is waited for."""
    h = H2Harness(loop, app, ws_ping_interval=20.0, ws_ping_timeout=None)
    peer = Peer(h)
    for _ in range(3):
        h.advance(20.0)
        assert peer.ping()


def test_plain_requests_make_no_timer_and_a_lost_connection_stops_it(loop: FakeClockLoop
                                                                       ) -> None:
    """A connection that serves only requests never makes the WebSocket timers (no cost on
    plain HTTP/2); once a WebSocket made them, losing the connection cancels their timer."""
    h = H2Harness(loop, app, ws_ping_interval=20.0)
    sid = h.request(b"/")
    h.pump()
    assert h.response(sid)[0] == 200 and "ws_timers" not in vars(h.protocol)
    Peer(h)
    timers = h.protocol.ws_timers
    assert timers.deadline.handle is not None
    h.call(lambda: h.protocol.connection_lost(None))
    assert timers.due == {} and timers.deadline.handle is None


# --- end to end, 0.2 s intervals ---------------------------------------------------------------


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with serving("toy-h2", app, ws_ping_interval=0.2, ws_ping_timeout=5.0) as port:
        yield port


def answer_pings(client: H2WebSocketClient, sid: int, count: int) -> list[ws.Event]:
    """Answer the server's pings on stream ``sid`` as they come, until ``count`` came (or a
    close frame); the events."""
    answered = 0

    def until(got: list[ws.Event]) -> bool:
        nonlocal answered
        for ping in [e for e in got if isinstance(e, ws.Ping)][answered:]:
            client.send(sid, ping.response())
            answered += 1
        return answered >= count or any(isinstance(e, ws.CloseConnection) for e in got)

    return client.receive(sid, until, timeout=WAIT + count * 0.2)


def test_a_client_that_answers_keeps_its_websocket(port: int) -> None:
    """Five pings 0.2 s apart, each answered: no close, and the WebSocket still echoes."""
    with H2WebSocketClient(port) as client:
        sid = client.connect("/ws?answers")
        events = answer_pings(client, sid, 5)
        assert sum(isinstance(e, ws.Ping) for e in events) >= 5  # (two may come in one read)
        assert not any(isinstance(e, ws.CloseConnection) for e in events)
        client.send(sid, ws.TextMessage(data="still here"))
        assert client.messages(sid, 1) == ["still here"]


def test_a_client_that_stops_answering_gets_1011_in_time() -> None:
    """Interval 0.2 s, timeout 0.3 s: the first ping answered, then none; the close 1011
    comes within interval + timeout of the last pong (plus ``MARGIN``), ends the stream, and
    the app's receive() says 1011."""
    with serving("toy-h2", app, ws_ping_interval=0.2, ws_ping_timeout=0.3) as port, \
            H2WebSocketClient(port) as client:
        sid = client.connect("/ws?stops")
        events = answer_pings(client, sid, 1)
        answered = time.monotonic()
        if not any(isinstance(e, ws.CloseConnection) for e in events):  # (else: a late pong)
            events = client.receive(sid, lambda got: any(isinstance(e, ws.CloseConnection)
                                                         for e in got),
                                    timeout=0.2 + 0.3 + MARGIN)
        elapsed = time.monotonic() - answered
        closing = [e for e in events if isinstance(e, ws.CloseConnection)]
        assert closing == [ws.CloseConnection(1011, "keepalive ping timeout")]
        assert elapsed < 0.2 + 0.3 + MARGIN
        assert client.pump(lambda: client.streams[sid].ended)  # END_STREAM with the close
        assert disconnect(b"stops")["code"] == 1011

