"""toy-h2's WebSocket over HTTP/2 (RFC 8441), checked by an RFC 8441 client.

Autobahn|Testsuite speaks HTTP/1.1 only, so these tests drive toy-h2 (served in a thread, on
127.0.0.1 port 0) with ``tests/support/h2_websocket_client.py``: h2 for the connection and the
extended CONNECT, wsproto for the frames. End to end: text and binary echo, fragments with a
ping between, a 1 MiB message each way across the flow-control windows, the close handshake
from either side, 1009 past ``ws_max_size``, the client's RST_STREAM, permessage-deflate, two
WebSockets and a plain request at once on one connection, RFC 8441's errors, and a toy-h2
process stopped by SIGTERM (1001, then GOAWAY). In memory (``tests/support/h2_harness.py``, a
fake clock): backpressure both ways, graceful shutdown, the close timeout, the concurrency
limit and the access line. Last, the frame transcript lesson 13 shows.

Spec: RFC 8441 §3-§5; RFC 6455 §5.4, §5.5, §7.4; RFC 7692; RFC 9113 §6.9.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h2.events
import pytest
import wsproto.events as ws
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from hyperframe.frame import DataFrame
from wsproto.extensions import PerMessageDeflate

from apps import ws_echo
from tests.conformance.h2client import StreamResult
from tests.conformance.wsclient import CLOSE, PING, TEXT, close_payload, frame
from tests.support.h2_harness import H2Harness
from tests.support.h2_websocket_client import H2WebSocketClient, echo_until_disconnect
from tests.support.mock import FakeClockLoop
from tests.support.protocol_harness import fake_loop_fixture
from tests.support.running import running_server, serving

ROOT = Path(__file__).resolve().parent.parent
TRANSCRIPT = ROOT / "lessons" / "transcripts" / "13-rfc8441-frames.txt"
H2_CLIENT = ROOT / "lessons" / "code" / "13-websocket" / "h2_client.py"  # prints TRANSCRIPT
MIB = 1024 * 1024
#: Each WebSocket's query string and the last websocket.disconnect its app's receive() gave.
DISCONNECTS: queue.Queue[tuple[bytes, dict[str, Any]]] = queue.Queue()
HOLDS = [asyncio.Event()]  # what /hold waits on: the last one (each in-memory test makes one)
WAIT = 5.0  # seconds a test waits for the server thread's app


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """``/scope``: the scope as JSON; ``/reject``: close before accept (a 403); ``/deny``: a
    denial response (401); ``/close``: close 4001 "bye" at once; ``/hold``: accept and read
    nothing until ``HOLDS[-1]`` is set (backpressure); ``/wait``: answer the handshake only
    once ``HOLDS[-1]`` is set; else an echo. Every WebSocket's last
    ``websocket.disconnect`` goes to ``DISCONNECTS``. HTTP: ``200 plain``."""
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"plain"})
        return
    assert (await receive())["type"] == "websocket.connect"
    path = scope["path"]
    if path == "/reject":
        await send({"type": "websocket.close"})
        return
    if path == "/deny":
        await send({"type": "websocket.http.response.start", "status": 401,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "websocket.http.response.body", "body": b"no", "more_body": True})
        await send({"type": "websocket.http.response.body", "body": b" entry"})
        return
    if path == "/wait":
        await HOLDS[-1].wait()
    offered = scope["subprotocols"]
    await send({"type": "websocket.accept", "subprotocol": offered[-1] if offered else None})
    if path == "/scope":
        shown = {k: scope[k] for k in ("type", "http_version", "scheme", "path",
                                        "query_string", "subprotocols")}
        await send({"type": "websocket.send", "text": json.dumps(shown, default=bytes.decode)})
    elif path == "/close":
        await send({"type": "websocket.close", "code": 4001, "reason": "bye"})
    elif path == "/hold":
        await HOLDS[-1].wait()
    await echo_until_disconnect(scope, receive, send, DISCONNECTS)


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with serving("toy-h2", app, ws_max_size=2 * MIB) as port:
        yield port


@pytest.fixture
def client(port: int) -> Iterator[H2WebSocketClient]:
    with H2WebSocketClient(port) as client:
        yield client


def disconnect(tag: bytes) -> dict[str, Any]:
    """The websocket.disconnect of the WebSocket opened with query string ``tag``."""
    while True:
        query, message = DISCONNECTS.get(timeout=WAIT)
        if query == tag:
            return message


# --- end to end -------------------------------------------------------------------------------


def test_the_setting_and_the_websocket_scope(client: H2WebSocketClient) -> None:
    assert client.conn.remote_settings[SettingCodes.ENABLE_CONNECT_PROTOCOL] == 1  # RFC 8441 §3
    sid = client.connect("/scope?room=1", [("sec-websocket-protocol", "chat.v1, chat.v2")])
    stream = client.streams[sid]
    assert stream.status == 200 and "sec-websocket-accept" not in stream.headers  # §5
    assert stream.headers["sec-websocket-protocol"] == "chat.v2"
    scope = json.loads(client.messages(sid, 1)[0])
    assert scope == {"type": "websocket", "http_version": "2", "scheme": "ws",
                     "path": "/scope", "query_string": "room=1",
                     "subprotocols": ["chat.v1", "chat.v2"]}


def test_text_and_binary_messages_echo(client: H2WebSocketClient) -> None:
    sid = client.connect()
    client.send(sid, ws.TextMessage(data="héllo"))
    client.send(sid, ws.BytesMessage(data=b"\x00\xff"))
    client.send(sid, ws.TextMessage(data=""))
    assert client.messages(sid, 3) == ["héllo", b"\x00\xff", ""]


def test_fragments_with_a_ping_between_are_one_message(client: H2WebSocketClient) -> None:
    """RFC 6455 §5.4: control frames may come between the fragments of a message."""
    sid = client.connect()
    client.send(sid, ws.TextMessage(data="frag", message_finished=False))
    client.send(sid, ws.Ping(payload=b"between"))
    client.send(sid, ws.TextMessage(data="mented", message_finished=True))
    events = client.receive(sid, lambda got: len(got) >= 2)
    assert events == [ws.Pong(payload=b"between"), ws.TextMessage(data="fragmented")]


def test_a_mebibyte_message_crosses_the_flow_control_windows(client: H2WebSocketClient
                                                            ) -> None:
    """16 times the 64 KiB initial window each way: the server grants credit as its engine
    reads, and sends its echo as the client's WINDOW_UPDATEs come (RFC 9113 §6.9)."""
    sid = client.connect()
    body = bytes(range(256)) * (MIB // 256)
    client.send(sid, ws.BytesMessage(data=body))
    assert client.messages(sid, 1) == [body]


def test_the_client_closes(client: H2WebSocketClient) -> None:
    """The app sees the client's code; the server answers it and ends its side of the stream
    (RFC 8441 §5: END_STREAM is the TCP FIN)."""
    sid = client.connect("/ws?client-closes")
    client.send(sid, ws.CloseConnection(code=4000, reason="done"))
    assert client.close_of(sid).code == 4000
    client.pump(lambda: client.streams[sid].ended)
    assert client.streams[sid].ended and client.streams[sid].reset_code is None
    assert disconnect(b"client-closes") == {"type": "websocket.disconnect", "code": 4000,
                                            "reason": "done"}


def test_the_app_closes(client: H2WebSocketClient) -> None:
    sid = client.connect("/close")
    close = client.close_of(sid)
    assert (close.code, close.reason) == (4001, "bye")
    client.pump(lambda: client.streams[sid].ended)
    assert client.streams[sid].ended  # our close frame carried END_STREAM
    client.send(sid, close.response(), end_stream=True)
    assert client.response(client.request("GET", "/")).status == 200  # the connection goes on


def test_a_message_over_the_limit_closes_1009(client: H2WebSocketClient) -> None:
    sid = client.connect("/ws?too-big")
    client.send_bytes(sid, frame(0x2, b"", length=3 * MIB))  # announced, never sent
    assert client.close_of(sid).code == 1009
    assert disconnect(b"too-big")["code"] == 1009


def test_the_clients_rst_stream_is_a_lost_connection(client: H2WebSocketClient) -> None:
    sid = client.connect("/ws?reset")
    client.send(sid, ws.TextMessage(data="one"))
    assert client.messages(sid, 1) == ["one"]
    client.conn.reset_stream(sid, ErrorCodes.CANCEL)
    client.flush()
    assert disconnect(b"reset")["code"] == 1006
    other = client.connect()  # the connection goes on
    client.send(other, ws.TextMessage(data="two"))
    assert client.messages(other, 1) == ["two"]


def test_two_websockets_and_a_request_at_once_on_one_connection(client: H2WebSocketClient
                                                                ) -> None:
    first, second = client.connect(), client.connect()
    client.send(first, ws.TextMessage(data="to the first"))
    client.send(second, ws.BytesMessage(data=b"to the second"))
    plain = client.request("GET", "/plain")
    client.send(first, ws.TextMessage(data="again"))
    assert client.response(plain).data == b"plain"
    assert client.messages(first, 2) == ["to the first", "again"]
    assert client.messages(second, 1) == [b"to the second"]


def test_permessage_deflate_is_negotiated_in_the_connect(client: H2WebSocketClient) -> None:
    sid = client.connect(extensions=[PerMessageDeflate()])
    assert client.streams[sid].headers["sec-websocket-extensions"].startswith(
        "permessage-deflate")
    text = "compress me " * 100
    client.send(sid, ws.TextMessage(data=text))
    assert client.messages(sid, 1) == [text]
    assert len(client.streams[sid].data) < len(text) // 4  # it came back compressed


@pytest.mark.parametrize(("protocol", "headers", "status"), [
    ("webtransport", [], 501),  # a protocol we do not speak (RFC 8441 names no status)
    ("websocket", [("sec-websocket-version", "8")], 426),  # RFC 6455 §4.4
    ("websocket", [("sec-websocket-version", "13"), ("sec-websocket-version", "13")], 400),
])
def test_extended_connects_that_open_no_websocket(
        client: H2WebSocketClient, protocol: str, headers: list[tuple[str, str]],
        status: int) -> None:
    stream = client.response(client.connect(headers=headers, protocol=protocol))
    assert stream.status == status
    if status == 426:
        assert stream.headers["sec-websocket-version"] == "13"


def test_a_plain_connect_keeps_its_501(client: H2WebSocketClient) -> None:
    """No ``:protocol``: RFC 9113 §8.5's CONNECT (no ``:scheme``, no ``:path``), a tunnel that
    toy-h2 does not make, as before RFC 8441."""
    sid = client.conn.get_next_available_stream_id()
    client.streams[sid] = StreamResult()
    client.conn.send_headers(sid, [(":method", "CONNECT"), (":authority", "a:443")])
    client.flush()
    assert client.response(sid).status == 501


def test_close_before_accept_is_a_403_and_the_denial_response(client: H2WebSocketClient
                                                             ) -> None:
    assert client.response(client.connect("/reject")).status == 403
    denied = client.response(client.connect("/deny"))
    assert (denied.status, bytes(denied.data)) == (401, b"no entry")


def test_without_the_setting_protocol_is_a_stream_error() -> None:
    """RFC 8441 §3: with ``--ws none`` the setting is not sent, and a CONNECT with
    ``:protocol`` is malformed: RST_STREAM PROTOCOL_ERROR, the connection going on."""
    with serving("toy-h2", app, ws="none") as port, H2WebSocketClient(port) as client:
        assert client.conn.remote_settings[SettingCodes.ENABLE_CONNECT_PROTOCOL] == 0
        sid = client.connect()  # sent all the same
        assert client.response(sid).reset_code == ErrorCodes.PROTOCOL_ERROR
        assert client.response(client.request("GET", "/")).status == 200


# --- in memory --------------------------------------------------------------------------------


@pytest.fixture
def loop() -> Iterator[FakeClockLoop]:
    yield from fake_loop_fixture()


def send_connect(h: H2Harness, path: bytes = b"/ws") -> int:
    """An extended CONNECT for a WebSocket on ``path`` (RFC 8441 §5); its stream id."""
    sid: int = h.client.get_next_available_stream_id()
    h.client.send_headers(sid, [(b":method", b"CONNECT"), (b":protocol", b"websocket"),
                                (b":scheme", b"http"), (b":authority", b"example.com"),
                                (b":path", path), (b"sec-websocket-version", b"13")])
    h.pump()
    return sid


def open_ws(h: H2Harness, path: bytes = b"/ws") -> int:
    sid = send_connect(h, path)
    assert h.response(sid)[0] == 200
    return sid


def server_frames(h: H2Harness, sid: int) -> bytes:
    return h.response(sid)[2]


def test_a_slow_app_shuts_the_clients_window(loop: FakeClockLoop) -> None:
    """No credit goes back while ``ws_max_queue`` messages wait for the app: the client's
    window closes; once the app reads, the credit comes back (RFC 9113 §6.9)."""
    HOLDS.append(asyncio.Event())
    h = H2Harness(loop, app, ws_max_queue=2)
    sid = open_ws(h, b"/hold")
    window = h.client.local_flow_control_window(sid)
    message = frame(TEXT, b"x" * 1000)
    sent = 0
    while h.client.local_flow_control_window(sid) >= len(message):
        h.client.send_data(sid, message)
        sent += 1
        h.pump()
    assert sent > 3 and h.client.local_flow_control_window(sid) < len(message) < window
    HOLDS[-1].set()
    h.pump()
    assert h.client.local_flow_control_window(sid) > window // 2  # credit came back
    assert server_frames(h, sid).count(b"x" * 1000) == sent  # every message echoed


def test_send_waits_for_the_clients_window(loop: FakeClockLoop) -> None:
    """A client that grants no credit: the echo stops at its window, and goes on with its
    WINDOW_UPDATE."""
    h = H2Harness(loop, app)
    sid = open_ws(h)
    h.auto_ack = False
    big = frame(0x2, b"y" * 70_000)  # past the 65,535-byte initial window
    for at in range(0, len(big), 16384):
        h.client.send_data(sid, big[at:at + 16384])
        h.pump()
    assert len(server_frames(h, sid)) == 65535
    h.client.acknowledge_received_data(65535, sid)
    h.auto_ack = True
    h.pump()
    assert server_frames(h, sid).endswith(b"y" * 70_000)


def test_graceful_shutdown_closes_1001_then_goaway(loop: FakeClockLoop) -> None:
    h = H2Harness(loop, app)
    sid = open_ws(h)
    h.call(h.protocol.shutdown)
    h.pump()
    closing = server_frames(h, sid)
    assert closing == bytes([0x80 | CLOSE, 22]) + close_payload(1001, "server shutting down")
    assert h.of(h2.events.StreamEnded, sid) and h.goaways == [(0, sid)]
    h.client.send_data(sid, frame(CLOSE, close_payload(1001)), end_stream=True)
    h.pump()
    assert h.transport.closed  # no stream left: the connection closes


def test_a_reload_closes_1012(loop: FakeClockLoop) -> None:
    """In a worker retired by a reload (``ws_shutdown_code`` 1012, "Service Restart")."""
    h = H2Harness(loop, app, ws_shutdown_code=1012)
    sid = open_ws(h)
    h.call(h.protocol.shutdown)
    h.pump()
    assert server_frames(h, sid) == bytes([0x80 | CLOSE, 22]) + close_payload(
        1012, "server shutting down")


def test_graceful_shutdown_refuses_an_unanswered_handshake_503(loop: FakeClockLoop) -> None:
    """A CONNECT the app has not answered yet gets a 503 response on its stream (RFC 9110
    §15.6.4), and the app's later accept finds the client gone."""
    HOLDS.append(asyncio.Event())
    h = H2Harness(loop, app)
    sid = send_connect(h, b"/wait")
    assert h.response(sid)[0] == 0  # no answer yet
    h.call(h.protocol.shutdown)
    h.pump()
    status, _, body = h.response(sid)
    assert (status, body) == (503, b"Service Unavailable")
    assert h.of(h2.events.StreamEnded, sid)
    HOLDS[-1].set()
    h.pump()


def test_a_close_that_gets_no_answer_is_reset(loop: FakeClockLoop) -> None:
    h = H2Harness(loop, app)
    sid = open_ws(h, b"/close")
    h.advance(10.0)
    h.pump()
    assert [e.error_code for e in h.of(h2.events.StreamReset, sid)] == [ErrorCodes.CANCEL]
    assert not h.protocol.streams


def test_ping_is_answered_and_the_access_line(loop: FakeClockLoop,
                                              caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, "toyservers.access"):
        h = H2Harness(loop, app, access_log=True)
        sid = open_ws(h, b"/ws?x=1")
    assert '"CONNECT /ws?x=1 HTTP/2" 200' in caplog.text
    h.client.send_data(sid, frame(PING, b"p"))
    h.pump()
    assert server_frames(h, sid) == bytes([0x80 | 0xA, 1]) + b"p"


# --- the frame transcript lesson 13 shows -----------------------------------------------------


def test_the_rfc8441_frame_transcript_is_current() -> None:
    """``lessons/code/13-websocket/h2_client.py`` against toy-h2 serving ``apps.ws_echo`` (no
    ``date`` field, so every run is the same) prints ``lessons/transcripts/13-rfc8441-frames.txt``;
    regenerate with ``UPDATE_TRANSCRIPTS=1`` and review the diff."""
    with serving("toy-h2", ws_echo.app, date_header=False) as port:
        out = subprocess.run([sys.executable, str(H2_CLIENT), str(port)], capture_output=True,
                             text=True, timeout=30, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    if os.environ.get("UPDATE_TRANSCRIPTS") == "1":
        TRANSCRIPT.write_text(out.stdout)
    assert TRANSCRIPT.read_text() == out.stdout, (
        f"{TRANSCRIPT.name} is stale: rerun with UPDATE_TRANSCRIPTS=1 and review the diff")
    assert "ENABLE_CONNECT_PROTOCOL = 1" in out.stdout and ":protocol: websocket" in out.stdout
    assert "ws bytes: 81 85 37 fa 21 3d 7f 9f 4d 51 58" in out.stdout  # RFC 6455 §5.7
    assert "ws bytes: 81 05 48 65 6c 6c 6f" in out.stdout  # the echo, unmasked


def test_websockets_count_against_limit_concurrency(loop: FakeClockLoop) -> None:
    """A WebSocket's app is a running task, as uvicorn's --limit-concurrency counts it: past
    the limit, an extended CONNECT is answered 503 (RFC 9110 §15.6.4)."""
    HOLDS.append(asyncio.Event())
    h = H2Harness(loop, app, limit_concurrency=1)
    open_ws(h, b"/hold")
    assert h.response(send_connect(h))[0] == 503
    HOLDS[-1].set()


def test_sigterm_closes_websocket_streams_1001_then_goaway() -> None:
    """A toy-h2 process told to stop (SIGTERM): the WebSocket stream gets close 1001 with
    END_STREAM, then the connection its GOAWAY; once the client answers the close, the stream
    is done, the connection closes and the process exits."""
    with running_server("toy-h2", app="tests.support.ws_echo_app:app") as server:
        with H2WebSocketClient(server.port) as client:
            sid = client.connect()
            client.send(sid, ws.TextMessage(data="before"))
            assert client.messages(sid, 1) == ["before"]
            assert server.process.proc is not None
            server.process.proc.send_signal(signal.SIGTERM)
            assert client.close_of(sid).code == 1001
            assert client.pump(lambda: client.terminated is not None)
            assert (client.terminated.error_code, client.terminated.last_stream_id) == (0, sid)
            assert client.streams[sid].ended  # the close frame carried END_STREAM
            # h2 sends nothing after a GOAWAY it received; RFC 9113 §6.8 lets this stream
            # finish: our close frame, framed by hand
            client.sock.sendall(DataFrame(sid, frame(CLOSE, close_payload(1001)),
                                          flags=["END_STREAM"]).serialize())
            assert server.process.proc.wait(timeout=WAIT * 3) == 0, server.log_tail()
