"""toy-h2's protocol against an h2 client, in memory (tests/support/h2_harness.py): streams,
flow control both ways, trailers, resets, GOAWAY, the hand-over from HTTP/1.1, and the bounds
on each known HTTP/2 attack. A few end-to-end tests at the end go over real sockets: ALPN over
TLS, and large bodies both ways through httpx.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import h2.events
import hpack
import httpx
import pytest
import trustme
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from hyperframe.frame import (
    ContinuationFrame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from tests.support.h2_harness import AUTHORITY, H2Harness, SwitchingTransport, split_frames
from tests.support.mock import FakeClockLoop
from tests.support.protocol_harness import fake_loop_fixture
from tests.support.running import serving
from toyservers import h2_server, http2, protocol

Scope = dict[str, Any]
RST_STREAM = 0x3  # the frame type (RFC 9113 §6.4)


@pytest.fixture
def loop() -> Iterator[FakeClockLoop]:
    yield from fake_loop_fixture()


# --- apps ------------------------------------------------------------------------------------


class Recorder:
    """An app that records each scope and every message it received, then answers
    ``status`` with ``body`` (read the whole request body first)."""

    def __init__(self, body: bytes = b"hello", status: int = 200) -> None:
        self.scopes: list[Scope] = []
        self.messages: list[dict[str, Any]] = []
        self.body, self.status = body, status

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        self.scopes.append(scope)
        while True:
            message = await receive()
            self.messages.append(message)
            if message["type"] == "http.disconnect" or not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": self.status,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": self.body})


def gated(gate: asyncio.Event, app: Any) -> Any:
    async def waiting(scope: Scope, receive: Any, send: Any) -> None:
        await gate.wait()
        await app(scope, receive, send)
    return waiting


DISCONNECTED: list[str] = []  # the paths whose app saw http.disconnect


async def disconnect_waiter(scope: Scope, receive: Any, send: Any) -> None:
    """Waits for a body that never ends: returns on http.disconnect (noted in DISCONNECTED)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    DISCONNECTED.append(scope["path"])


def streamer(size: int, piece: int = 16384) -> Any:
    """Sends ``size`` bytes of body in messages of ``piece`` bytes."""
    async def app(scope: Scope, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        sent = 0
        while sent < size:
            n = min(piece, size - sent)
            await send({"type": "http.response.body", "body": b"x" * n, "more_body": True})
            sent += n
        await send({"type": "http.response.body", "body": b""})
    return app


# --- streams -----------------------------------------------------------------------------------


def test_a_stream_is_an_asgi_http_scope(loop: FakeClockLoop) -> None:
    app = Recorder()
    h = H2Harness(loop, app)
    sid = h.request(b"/p%20q?x=1", headers=[(b"cookie", b"a=1"), (b"cookie", b"b=2"),
                                            (b"user-agent", b"t")])
    h.pump()
    status, fields, body = h.response(sid)
    assert (status, body, fields[b"content-type"]) == (200, b"hello", b"text/plain")
    assert b"date" in fields and fields[b"server"] == b"toyservers"
    scope = app.scopes[0]
    assert scope["http_version"] == "2" and scope["method"] == "GET" and scope["scheme"] == "http"
    assert (scope["path"], scope["raw_path"], scope["query_string"]) == ("/p q", b"/p%20q", b"x=1")
    headers = scope["headers"]
    assert not any(name.startswith(b":") for name, _ in headers)  # RFC 9113 §8.3: removed
    assert (b"host", AUTHORITY) in headers  # :authority becomes host
    assert dict(headers)[b"cookie"] == b"a=1; b=2"  # RFC 9113 §8.2.3: joined
    assert "http.response.trailers" in scope["extensions"]


def test_many_streams_on_one_connection(loop: FakeClockLoop) -> None:
    h = H2Harness(loop, Recorder())
    sids = [h.request(f"/{n}".encode()) for n in range(10)]
    h.pump()
    assert [h.response(sid)[0] for sid in sids] == [200] * 10
    assert not h.transport.closed


def test_request_body_streams_through_receive(loop: FakeClockLoop) -> None:
    app = Recorder()
    h = H2Harness(loop, app)
    sid = h.request(method=b"POST", body=b"a" * 1000, end=False)
    h.pump()
    h.client.send_data(sid, b"b" * 1000, end_stream=True)
    h.pump()
    received = b"".join(m.get("body", b"") for m in app.messages)
    assert received == b"a" * 1000 + b"b" * 1000 and len(app.messages) >= 2
    assert h.response(sid)[0] == 200


def test_bad_requests_get_their_status_on_their_stream(loop: FakeClockLoop) -> None:
    h = H2Harness(loop, Recorder(), max_headers=5)
    connect = h.client.get_next_available_stream_id()
    h.client.send_headers(connect, [(b":method", b"CONNECT"), (b":authority", b"a:443")])
    many = h.request(headers=[(b"x-%d" % n, b"v") for n in range(6)])
    fine = h.request()
    h.pump()
    assert [h.response(sid)[0] for sid in (connect, many, fine)] == [501, 431, 200]


def test_max_body_size_answers_413_on_the_stream(loop: FakeClockLoop) -> None:
    h = H2Harness(loop, Recorder(), max_body_size=100)
    sid = h.request(method=b"POST", body=b"x" * 200)
    h.pump()
    assert h.response(sid)[0] == 413 and not h.transport.closed


# --- flow control --------------------------------------------------------------------------------


def test_a_slow_app_holds_the_client_back(loop: FakeClockLoop) -> None:
    """Credit (WINDOW_UPDATE) goes back only as the app takes the body."""
    gate = asyncio.Event()
    app = Recorder()
    h = H2Harness(loop, gated(gate, app))
    sid = h.request(method=b"POST", end=False)
    window = h.client.local_flow_control_window(sid)
    for at in range(0, window, 16384):
        h.client.send_data(sid, b"x" * min(16384, window - at))
    h.pump()
    assert h.client.local_flow_control_window(sid) == 0  # no credit: the app read nothing
    assert not h.of(h2.events.WindowUpdated)
    h.call(gate.set)
    h.pump()
    assert h.client.local_flow_control_window(sid) > 0  # the app took it: credit came back
    assert h.of(h2.events.WindowUpdated, sid)
    h.client.send_data(sid, b"y" * 10, end_stream=True)
    h.pump()
    assert sum(len(m.get("body", b"")) for m in app.messages) == window + 10
    assert h.response(sid)[0] == 200


def test_send_waits_for_the_clients_window(loop: FakeClockLoop) -> None:
    """A client that grants 1000 bytes a stream gets 1000 bytes until it grants more."""
    h = H2Harness(loop, streamer(20000, 5000), client_settings={
        SettingCodes.INITIAL_WINDOW_SIZE: 1000})
    h.auto_ack = False
    sid = h.request()
    h.pump()
    assert len(h.response(sid)[2]) == 1000 and not h.of(h2.events.StreamEnded)
    while not h.of(h2.events.StreamEnded, sid):
        h.client.increment_flow_control_window(3000, stream_id=sid)
        h.client.increment_flow_control_window(3000)
        assert h.pump(), "no progress"
    assert h.response(sid)[2] == b"x" * 20000


def test_expect_100_continue_is_an_interim_headers_frame(loop: FakeClockLoop) -> None:
    h = H2Harness(loop, Recorder())
    sid = h.request(method=b"POST", headers=[(b"expect", b"100-continue")], end=False)
    h.pump()
    (interim,) = h.of(h2.events.InformationalResponseReceived, sid)
    assert dict(interim.headers or ())[b":status"] == b"100"
    h.client.send_data(sid, b"body", end_stream=True)
    h.pump()
    assert h.response(sid)[0] == 200


def test_data_frames_respect_max_frame_size(loop: FakeClockLoop) -> None:
    h = H2Harness(loop, Recorder(body=b"z" * 50000))
    sid = h.request()
    h.pump()
    sizes = [len(e.data or b"") for e in h.of(h2.events.DataReceived, sid)]
    assert sum(sizes) == 50000 and max(sizes) <= 16384


def test_zero_window_holds_one_message_and_writes_nothing(loop: FakeClockLoop) -> None:
    """CVE-2019-9517 (internal data buffering): with the client's window shut, send() waits
    holding the app's one message; nothing more is framed or buffered."""
    h = H2Harness(loop, streamer(1_000_000, 100_000), client_settings={
        SettingCodes.INITIAL_WINDOW_SIZE: 0})
    h.auto_ack = False
    sid = h.request()
    h.pump()
    assert h.response(sid)[0] == 200 and h.response(sid)[2] == b""
    assert len(h.transport.buffer) == 0 and len(h.protocol.conn.data_to_send()) == 0
    task = next(iter(h.state.tasks))
    assert not task.done()  # the app waits in send()


def test_a_client_that_reads_nothing_stops_our_reading(loop: FakeClockLoop) -> None:
    """CVE-2019-9512/9514/9515: while our write buffer is over its high-water mark, we read
    nothing, so frames we would answer cannot pile answers up."""
    h = H2Harness(loop, Recorder())
    h.call(h.protocol.pause_writing)
    assert h.transport.reading_paused
    h.call(h.protocol.resume_writing)
    assert not h.transport.reading_paused


# --- trailers, resets, GOAWAY ----------------------------------------------------------------


async def trailers_app(scope: Scope, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "trailers": True,
                "headers": [(b"trailer", b"x-checksum")]})
    await send({"type": "http.response.body", "body": b"data"})
    await send({"type": "http.response.trailers", "headers": [(b"x-checksum", b"abc")]})


def test_response_trailers(loop: FakeClockLoop) -> None:
    h = H2Harness(loop, trailers_app)
    sid = h.request()
    h.pump()
    assert h.response(sid)[2] == b"data"
    (trailers,) = h.of(h2.events.TrailersReceived, sid)
    assert dict(trailers.headers or ()) == {b"x-checksum": b"abc"}
    assert h.of(h2.events.StreamEnded, sid)


async def bad_trailers_app(scope: Scope, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "trailers": True})
    await send({"type": "http.response.body", "body": b"data"})
    await send({"type": "http.response.trailers", "headers": [(b"x-bad", b"a\r\nb")]})


def test_trailers_are_checked_as_fields(loop: FakeClockLoop) -> None:
    """A control byte in a trailer value (RFC 9110 §5.5) fails the app's send(); the body is
    out, so the stream is reset."""
    h = H2Harness(loop, bad_trailers_app)
    sid = h.request()
    h.pump()
    assert not h.of(h2.events.TrailersReceived, sid)
    assert [e.error_code for e in h.of(h2.events.StreamReset, sid)] == [ErrorCodes.INTERNAL_ERROR]


async def fails_before(scope: Scope, receive: Any, send: Any) -> None:
    raise RuntimeError("boom")


async def fails_after(scope: Scope, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"part", "more_body": True})
    raise RuntimeError("boom")


def test_app_failure_is_500_before_the_response_and_a_reset_after(loop: FakeClockLoop) -> None:
    h = H2Harness(loop, fails_before)
    sid = h.request()
    h.pump()
    assert h.response(sid)[0] == 500 and not h.transport.closed
    h = H2Harness(loop, fails_after)
    sid = h.request()
    h.pump()
    (reset,) = h.of(h2.events.StreamReset, sid)
    assert reset.error_code == ErrorCodes.INTERNAL_ERROR and not h.transport.closed


def test_client_reset_gives_the_app_http_disconnect(loop: FakeClockLoop) -> None:
    h = H2Harness(loop, disconnect_waiter)
    sid = h.request(b"/reset-me", method=b"POST", body=b"x", end=False)
    h.pump()
    assert h.state.tasks and "/reset-me" not in DISCONNECTED
    h.client.reset_stream(sid, ErrorCodes.CANCEL)
    h.pump()
    assert h.state.tasks == set() and "/reset-me" in DISCONNECTED
    sid2 = h.request()
    h.pump()
    assert not h.transport.closed and h.protocol.streams.keys() == {sid2}


def test_graceful_shutdown_sends_goaway_and_finishes_streams_in_flight(
        loop: FakeClockLoop) -> None:
    gate = asyncio.Event()
    h = H2Harness(loop, gated(gate, Recorder()))
    first = h.request()
    h.pump()
    h.call(h.protocol.shutdown)
    h.pump()
    assert h.goaways == [(ErrorCodes.NO_ERROR, first)]
    assert not h.transport.closed  # stream 1 is still in flight
    h.call(gate.set)
    h.pump()
    assert h.response(first)[0] == 200 and h.transport.closed


def test_after_goaway_new_streams_are_refused(loop: FakeClockLoop) -> None:
    gate = asyncio.Event()
    h = H2Harness(loop, gated(gate, Recorder()))
    first = h.request()
    h.pump()
    h.call(h.protocol.shutdown)
    # The client has not read the GOAWAY yet: its next stream crosses it.
    encoder = hpack.Encoder()
    h.send_frames([HeadersFrame(3, encoder.encode([
        (b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"),
        (b":authority", b"a")]), flags=["END_HEADERS", "END_STREAM"])])
    h.spin()
    frames = split_frames(h.transport.take())
    assert [(sid, int.from_bytes(payload, "big")) for kind, sid, payload, _ in frames
            if kind == RST_STREAM] == [(3, ErrorCodes.REFUSED_STREAM)]
    h.call(gate.set)
    h.pump()
    assert h.response(first)[0] == 200


def test_a_body_that_stops_coming_gets_408(loop: FakeClockLoop) -> None:
    h = H2Harness(loop, Recorder(), timeout_body=30, timeout_keep_alive=5)
    sid = h.request(method=b"POST", body=b"part", end=False)
    h.pump()
    h.advance(29)
    h.client.send_data(sid, b"more")  # each DATA moves the deadline on
    h.pump()
    h.advance(29)
    h.pump()
    assert h.response(sid)[0] == 0
    h.advance(1.5)
    h.pump()
    assert h.response(sid)[0] == 408 and not h.transport.closed
    h.advance(5.5)  # then idle: no stream left
    h.pump()
    assert h.transport.closed


def test_idle_connection_gets_goaway_after_keep_alive(loop: FakeClockLoop) -> None:
    h = H2Harness(loop, Recorder(), timeout_keep_alive=5)
    h.request()
    h.pump()
    h.advance(4.9)
    assert not h.transport.closed
    h.advance(0.2)
    h.pump()
    assert h.transport.closed and h.goaways == [(ErrorCodes.NO_ERROR, 1)]


def statuses(data: bytes, decoder: hpack.Decoder) -> dict[int, int]:
    """The ``:status`` of each response HEADERS frame in ``data`` (server bytes read raw, for
    streams the harness' h2 client did not open)."""
    found = {}
    for kind, sid, payload, _ in split_frames(data):
        if kind == 0x1:  # HEADERS, unpadded, no priority: toy-h2 sends them so
            found[sid] = int(dict(decoder.decode(payload, raw=True))[b":status"])
    return found


# --- attacks -----------------------------------------------------------------------------------


def calmed(h: H2Harness) -> bool:
    return h.transport.closed and [code for code, _ in h.goaways] == [
        ErrorCodes.ENHANCE_YOUR_CALM]


def test_rapid_reset_gets_goaway_enhance_your_calm(loop: FakeClockLoop) -> None:
    """CVE-2023-44487: open a stream, reset it, again and again: past MAX_RESETS per
    interval, the connection ends."""
    h = H2Harness(loop, disconnect_waiter)
    for _ in range(http2.MAX_RESETS):
        h.client.reset_stream(h.request(end=False), ErrorCodes.CANCEL)
    h.pump()
    assert not h.transport.closed  # within the budget
    h.client.reset_stream(h.request(end=False), ErrorCodes.CANCEL)
    h.pump()
    assert calmed(h)


def test_the_reset_budget_refills_each_interval(loop: FakeClockLoop) -> None:
    h = H2Harness(loop, disconnect_waiter, timeout_keep_alive=60)
    for _ in range(2):
        for _ in range(http2.MAX_RESETS):
            h.client.reset_stream(h.request(end=False), ErrorCodes.CANCEL)
        h.pump()
        h.advance(http2.FLOOD_INTERVAL)
    assert not h.transport.closed


@pytest.mark.parametrize("flood", ["ping", "settings", "empty-data", "priority",
                                   "priority-open", "unknown", "window-update", "ping-ack",
                                   "settings-ack"])
def test_control_frame_floods_get_goaway(loop: FakeClockLoop, flood: str) -> None:
    """The 2019 floods: PING (CVE-2019-9512), SETTINGS (9515), empty DATA frames (9518),
    PRIORITY frames reshuffling idle streams or the open one (the resource loop, 9513), and
    frames nobody answers but which cost parsing all the same: unknown types (RFC 9113 §5.5),
    WINDOW_UPDATE, PING and SETTINGS ACKs (RFC 9113 §10.5: "SETTINGS, PRIORITY, PING ...")."""
    h = H2Harness(loop, disconnect_waiter)
    sid = h.request(end=False)
    h.pump()
    n = http2.MAX_CONTROL_FRAMES + 1
    if flood == "ping":
        h.send_frames(PingFrame(0, opaque_data=b"%08d" % i) for i in range(n))
    elif flood == "priority-open":
        h.send_frames(PriorityFrame(sid, depends_on=0, stream_weight=15) for _ in range(n))
    elif flood == "unknown":
        h.send_bytes(b"\x00\x00\x01\xfa\x00\x00\x00\x00\x00x" * n)  # type 0xfa, 1 byte
    elif flood == "window-update":
        h.send_frames(WindowUpdateFrame(sid, window_increment=1) for _ in range(n))
    elif flood == "ping-ack":
        h.send_frames(PingFrame(0, opaque_data=b"%08d" % i, flags=["ACK"]) for i in range(n))
    elif flood == "settings-ack":
        h.send_frames(SettingsFrame(0, flags=["ACK"]) for _ in range(n))
    elif flood == "settings":
        h.send_frames(SettingsFrame(0, settings={SettingCodes.ENABLE_PUSH: 0})
                      for _ in range(n))
    elif flood == "priority":
        h.send_frames(PriorityFrame(1001 + 2 * i, depends_on=1001 + 2 * (i + 1) % 99,
                                    stream_weight=15) for i in range(n))
    else:
        for _ in range(n):
            h.client.send_data(sid, b"")
    h.pump()
    assert calmed(h)


def test_priority_sent_with_requests_is_not_a_flood(loop: FakeClockLoop,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Browsers send priority in every HEADERS frame: that is no control frame flood."""
    monkeypatch.setattr(http2, "MAX_CONTROL_FRAMES", 5)
    h = H2Harness(loop, Recorder())
    for _ in range(10):
        sid = h.client.get_next_available_stream_id()
        h.client.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"http"),
                                    (b":authority", b"a"), (b":path", b"/")],
                              end_stream=True, priority_weight=32, priority_depends_on=0)
        h.pump()
        assert h.response(sid)[0] == 200
    assert not h.transport.closed


def test_continuation_flood_is_bounded(loop: FakeClockLoop) -> None:
    """CVE-2024-27316 and kin: a header block that never ends, CONTINUATION after
    CONTINUATION, is cut once it outgrows max_header_size."""
    h = H2Harness(loop, Recorder(), max_header_size=8192)
    block = hpack.Encoder().encode([(b":method", b"GET"), (b":scheme", b"http"),
                                    (b":path", b"/"), (b":authority", b"a")])
    h.send_frames([HeadersFrame(1, block)])  # no END_HEADERS
    h.send_frames(ContinuationFrame(1, b"\x40\x01a\x01b" * 200) for _ in range(10))
    h.pump()
    assert calmed(h)


def test_hpack_bomb_is_bounded(loop: FakeClockLoop) -> None:
    """A small header block that decodes huge (one big indexed field, referred to again and
    again) is refused past max_header_size decoded (RFC 9113 §10.5.1)."""
    h = H2Harness(loop, Recorder(), max_header_size=16384)
    encoder = hpack.Encoder()
    fields = [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"),
              (b":authority", b"a")] + [(b"x-bomb", b"b" * 3000)] * 10
    block = encoder.encode(fields)
    assert len(block) < 4000  # the table entry is sent once, then 1 byte per reference
    h.send_frames([HeadersFrame(1, block, flags=["END_HEADERS", "END_STREAM"])])
    h.pump()
    assert calmed(h)


def test_a_download_is_no_window_update_flood(loop: FakeClockLoop,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """WINDOW_UPDATEs count as control frames, but each DATA frame we send earns the client
    its acknowledgements back: a long download is no flood."""
    monkeypatch.setattr(http2, "MAX_CONTROL_FRAMES", 20)
    h = H2Harness(loop, streamer(2_000_000, 100_000))
    sid = h.request()
    while not h.of(h2.events.StreamEnded, sid):
        assert h.pump(), "no progress"
    assert len(h.response(sid)[2]) == 2_000_000 and not h.transport.closed


def test_an_oversized_frame_is_refused_from_its_header(loop: FakeClockLoop) -> None:
    """RFC 9113 §4.2: a frame header announcing more than our SETTINGS_MAX_FRAME_SIZE gets
    GOAWAY FRAME_SIZE_ERROR at once; not one byte of its payload is waited for."""
    h = H2Harness(loop, disconnect_waiter)
    sid = h.request(method=b"POST", end=False)
    h.pump()
    h.send_bytes(b"\xff\xff\xff\x00\x00" + sid.to_bytes(4, "big"))  # DATA of 16 MiB - 1
    h.spin()
    h.take_goaways(h.transport.take())
    assert h.transport.closed and [code for code, _ in h.goaways] == [
        ErrorCodes.FRAME_SIZE_ERROR]


def test_the_header_block_bound_holds_across_reads(loop: FakeClockLoop) -> None:
    """The CONTINUATION bound counts frame headers as they arrive, however the reads split
    them, and a header block that ends within the bound is served."""
    h = H2Harness(loop, Recorder(), max_header_size=8192)
    block = hpack.Encoder().encode([(b":method", b"GET"), (b":scheme", b"http"),
                                    (b":path", b"/"), (b":authority", b"a")])
    data = HeadersFrame(1, block, flags=["END_STREAM"]).serialize() + ContinuationFrame(
        1, b"", flags=["END_HEADERS"]).serialize()
    for at in range(0, len(data), 5):
        h.send_bytes(data[at:at + 5])
    h.spin()
    assert statuses(h.transport.take(), hpack.Decoder()) == {1: 200}
    data = b"".join(ContinuationFrame(3, b"\x40\x01a\x01b" * 200).serialize()
                    for _ in range(10))
    h.send_frames([HeadersFrame(3, block[:2])])
    for at in range(0, len(data), 7):
        h.send_bytes(data[at:at + 7])
    h.take_goaways(h.transport.take())
    assert calmed(h)


def test_a_large_read_reaches_h2_a_slice_per_loop_turn(loop: FakeClockLoop,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """One read of many bytes is parsed MAX_FEED bytes per loop turn, reading paused between,
    so another connection's callbacks run in between; then reading resumes."""
    monkeypatch.setattr(h2_server, "MAX_FEED", 100)
    app = Recorder()
    h = H2Harness(loop, app)
    h.request(method=b"POST", body=b"q" * 5000)
    h.send_bytes(h.client.data_to_send())
    assert h.transport.reading_paused and not app.messages  # one slice parsed, not the body
    h.spin(100)
    h.pump()
    assert h.response(1)[0] == 200 and not h.transport.reading_paused
    assert b"".join(m.get("body", b"") for m in app.messages) == b"q" * 5000


BAD_PATHS = [b"/\xff", "/é".encode(), b"/a\x1bb", b"/a\x08b", b"/a\x0bb", b"/a\x0cb", b"/a b",
             b"/a\x7fb"]


def test_a_bad_path_is_400_on_its_stream_alone(loop: FakeClockLoop) -> None:
    """RFC 9113 §8.3.1 and RFC 3986: ``:path`` is visible ASCII; raw UTF-8, control bytes,
    a space or DEL get 400 on their stream, and the stream in flight beside them goes on."""
    gate = asyncio.Event()
    app = Recorder()
    h = H2Harness(loop, gated(gate, app))
    encoder = hpack.Encoder()

    def request(sid: int, path: bytes) -> HeadersFrame:
        return HeadersFrame(sid, encoder.encode([(b":method", b"GET"), (b":scheme", b"http"),
                                                 (b":path", path), (b":authority", b"a")]),
                            flags=["END_HEADERS", "END_STREAM"])
    h.send_frames([request(1, b"/fine")])
    h.send_frames(request(3 + 2 * n, path) for n, path in enumerate(BAD_PATHS))
    h.spin()
    decoder = hpack.Decoder()
    bad = statuses(h.transport.take(), decoder)
    h.call(gate.set)
    h.spin()
    assert bad == {3 + 2 * n: 400 for n in range(len(BAD_PATHS))}
    assert statuses(h.transport.take(), decoder) == {1: 200} and not h.transport.closed
    assert [scope["path"] for scope in app.scopes] == ["/fine"]


@pytest.mark.parametrize(("length", "body"), [
    (b"10", b"hello"), (b"3", b"hello"), (b"abc", b"hello"), (b"5", None), (b"-5", None),
    (b"+5", b"hello"), (b"5, 5", b"hello"), (b"", b"")])
def test_a_bad_content_length_resets_its_stream_alone(loop: FakeClockLoop, length: bytes,
                                                      body: bytes | None) -> None:
    """RFC 9113 §8.1.1: a Content-Length that is no number, or is not the sum of the DATA
    payloads (none when HEADERS ends the stream), makes the request malformed, a stream error
    (RST_STREAM PROTOCOL_ERROR); the request in flight beside it, in the same read, and one
    after it are answered, with the bodies their Content-Length announced."""
    bodies: dict[str, bytes] = {}

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        bodies[scope["path"]] = b""
        while (message := await receive())["type"] == "http.request":
            bodies[scope["path"]] += message["body"]
            if not message["more_body"]:
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
    h = H2Harness(loop, app)
    good = h.request(b"/good", method=b"POST", body=b"part", end=False,
                     headers=[(b"content-length", b"9")])
    bad = h.request(b"/bad", method=b"POST", body=body, headers=[(b"content-length", length)])
    h.client.send_data(good, b"-rest", end_stream=True)
    h.pump()
    after = h.request(b"/after", method=b"POST", body=b"", headers=[(b"content-length", b"0")])
    h.pump()
    assert [e.error_code for e in h.of(h2.events.StreamReset, bad)] == [ErrorCodes.PROTOCOL_ERROR]
    assert not h.goaways and not h.transport.closed
    assert [h.response(sid)[0] for sid in (good, after)] == [200, 200]
    assert (bodies["/good"], bodies["/after"]) == (b"part-rest", b"")
    assert h.response(bad)[0] == 0 and not h.protocol.streams and not h.state.tasks


def test_a_stream_at_a_shut_window_is_reset_after_timeout_body(loop: FakeClockLoop) -> None:
    """A client that grants no credit holds a stream, its app and its message: after
    timeout_body seconds without a WINDOW_UPDATE the stream is reset (CANCEL) and the app's
    send() raises, as for any disconnect."""
    seen: list[str] = []

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            await send({"type": "http.response.body", "body": b"x" * 1000})
        except OSError as exc:
            seen.append(type(exc).__name__)
    h = H2Harness(loop, app, timeout_body=30, timeout_keep_alive=60, client_settings={
        SettingCodes.INITIAL_WINDOW_SIZE: 0})
    h.auto_ack = False
    sid = h.request()
    h.pump()
    h.advance(29)
    h.pump()
    assert not h.of(h2.events.StreamReset, sid) and not seen
    h.advance(1.5)
    h.pump()
    assert [e.error_code for e in h.of(h2.events.StreamReset, sid)] == [ErrorCodes.CANCEL]
    assert seen == ["ClientDisconnected"] and not h.state.tasks and not h.protocol.streams
    assert not h.transport.closed


def test_max_concurrent_streams_is_advertised_and_enforced(loop: FakeClockLoop) -> None:
    """RFC 9113 §5.1.2: a stream past the limit is a stream error (REFUSED_STREAM); the
    streams in flight go on."""
    gate = asyncio.Event()
    h = H2Harness(loop, gated(gate, Recorder()))
    assert h.client.remote_settings.max_concurrent_streams == http2.MAX_CONCURRENT_STREAMS
    assert h.client.remote_settings.max_header_list_size == h.state.config.max_header_size
    encoder = hpack.Encoder()
    limit = http2.MAX_CONCURRENT_STREAMS
    h.send_frames(HeadersFrame(1 + 2 * n, encoder.encode([
        (b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b":authority", b"a")]),
        flags=["END_HEADERS", "END_STREAM"]) for n in range(limit + 1))
    h.spin()
    frames = split_frames(h.transport.take())
    assert [(sid, int.from_bytes(payload, "big")) for kind, sid, payload, _ in frames
            if kind == RST_STREAM] == [(1 + 2 * limit, ErrorCodes.REFUSED_STREAM)]
    h.call(gate.set)
    h.spin()
    frames = split_frames(h.transport.take())
    assert len({sid for kind, sid, _, _ in frames if kind == 0x1}) == limit  # HEADERS each
    assert not h.transport.closed and not h.goaways


class HalfClosingTransport(SwitchingTransport):
    """A TCP-like transport: it can send FIN (``write_eof``) and still read."""

    eof_written = False

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof_written = True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.eof_written:  # as asyncio's and uvloop's transports
            raise RuntimeError("Cannot call write() after write_eof()")
        super().write(data)


def test_a_connection_error_closes_in_stages(loop: FakeClockLoop) -> None:
    """RFC 9112 §9.6: GOAWAY, then FIN; what the client still sends is read and dropped, so
    the kernel sends no RST that could destroy the GOAWAY; the close comes LINGER seconds on."""
    h = H2Harness(loop, Recorder())
    transport = HalfClosingTransport()
    transport.set_protocol(h.protocol)
    h.transport = transport
    h.protocol.transport = transport  # the same connection, on a transport that half-closes
    h.send_bytes(b"\x00\x00\x08\x06\x00\x00\x00\x00\x01" + b"\x00" * 8)  # PING, stream 1
    assert h.take_goaways(transport.take()) == b"" and h.goaways[0][0] == ErrorCodes.PROTOCOL_ERROR
    assert transport.eof_written and not transport.closed
    server = h.state.connections.copy().pop()
    transport.get_protocol().data_received(b"more frames")  # dropped by the lingering protocol
    assert transport.take() == b""
    h.advance(protocol.LINGER)
    assert transport.closed
    transport.get_protocol().connection_lost(None)
    assert server not in h.state.connections


def test_a_graceful_shutdown_leaves_a_lingering_connection_alone(loop: FakeClockLoop) -> None:
    """A connection closing in stages (GOAWAY and FIN out, LINGER seconds of reading left) is
    still in ``state.connections``: a graceful shutdown then frames no second GOAWAY, which
    the transport would refuse after its FIN (RuntimeError, out of serve()'s shutdown)."""
    h = H2Harness(loop, Recorder())
    transport = HalfClosingTransport()
    transport.set_protocol(h.protocol)
    h.transport = transport
    h.protocol.transport = transport
    h.advance(5.0)  # timeout_keep_alive: the idle connection gets GOAWAY and FIN
    assert transport.eof_written and not transport.closed
    [server] = h.state.connections
    server.shutdown()
    assert h.take_goaways(transport.take()) == b"" and len(h.goaways) == 1


class ResetTransport(HalfClosingTransport):
    """The peer reset the connection and asyncio has not noticed: shutdown(SHUT_WR) fails."""

    def write_eof(self) -> None:
        raise OSError(107, "Transport endpoint is not connected")


def test_a_reset_peer_is_closed_at_once_on_shutdown(loop: FakeClockLoop) -> None:
    """Graceful shutdown, the client already gone (an RST not yet read): no half-close
    possible, the transport just closes, and serve()'s shutdown raises nothing."""
    h = H2Harness(loop, Recorder())
    transport = ResetTransport()
    transport.set_protocol(h.protocol)
    h.transport = transport
    h.protocol.transport = transport
    h.protocol.shutdown()
    assert transport.closed


# --- the hand-over from HTTP/1.1 -------------------------------------------------------------


def test_prior_knowledge_preface_split_over_reads(loop: FakeClockLoop) -> None:
    h = H2Harness(loop, Recorder(), http1=True)
    h.client.initiate_connection()
    sid = h.request()
    data = h.client.data_to_send()
    for piece in (data[:2], data[2:13], data[13:30], data[30:]):  # the preface is 24 bytes
        h.send_bytes(piece)
    h.pump()
    assert h.response(sid)[0] == 200
    assert type(h.protocol).__name__ == "H2Protocol"


def test_preface_request_and_body_in_one_large_read(loop: FakeClockLoop) -> None:
    """What follows the preface in the same read reaches HTTP/2 whole, past toy-httptools'
    4 KiB slices."""
    app = Recorder()
    h = H2Harness(loop, app, http1=True)
    h.client.initiate_connection()
    sid = h.request(method=b"POST", body=b"q" * 10000)
    h.send_bytes(h.client.data_to_send())
    h.pump()
    assert h.response(sid)[0] == 200
    assert b"".join(m.get("body", b"") for m in app.messages) == b"q" * 10000


def test_h2c_upgrade_answers_the_request_on_stream_1(loop: FakeClockLoop) -> None:
    app = Recorder()
    h = H2Harness(loop, app, http1=True)
    settings = h.client.initiate_upgrade_connection()
    h.client.data_to_send()  # the client's preface: sent after the 101
    h.send_bytes(b"GET /up HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                 b"Upgrade: h2c\r\nHTTP2-Settings: " + settings + b"\r\n\r\n")
    h.spin()
    head, _, rest = h.transport.take().partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101 ")
    h.events += h.client.receive_data(rest)
    h.client.initiate_connection()  # the client preface, now over HTTP/2
    h.pump()
    assert h.response(1)[:3:2] == (200, b"hello")
    scope = app.scopes[0]
    assert scope["http_version"] == "2" and scope["path"] == "/up"
    assert not {b"upgrade", b"connection", b"http2-settings"} & {n for n, _ in scope["headers"]}


@pytest.mark.parametrize("request_head", [
    b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n"
    b"HTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",  # HTTP2-Settings not named in Connection
    b"POST / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
    b"HTTP2-Settings: AAMAAABkAAQAAP__\r\nContent-Length: 2\r\n\r\nhi",  # a body
], ids=["connection-field", "body"])
def test_an_upgrade_h2c_that_may_not_be_taken_is_answered_as_http1(
        loop: FakeClockLoop, request_head: bytes) -> None:
    h = H2Harness(loop, Recorder(), http1=True)
    h.send_bytes(request_head)
    h.spin()
    assert h.transport.take().startswith(b"HTTP/1.1 200 ")


def test_an_invalid_preface_is_closed_unanswered(loop: FakeClockLoop) -> None:
    h = H2Harness(loop, Recorder(), http1=True)
    h.send_bytes(b"INVALID CONNECTION PREFACE\r\n\r\n")
    h.spin()
    assert h.transport.closed and h.transport.take() == b""


def test_the_scanner_marks_where_each_header_block_ends() -> None:
    """``block_ends``: the offsets just past each END_HEADERS frame, its payload included, in
    the read where that payload ends, so h2 can be fed one header block per call."""
    headers = HeadersFrame(1, b"abc", flags=["END_HEADERS"]).serialize()
    first = HeadersFrame(3, b"ab").serialize()
    last = ContinuationFrame(3, b"cd", flags=["END_HEADERS"]).serialize()
    data = PingFrame(0).serialize() + headers + first + last + headers
    scanner = http2.FrameScanner(1000, skip=0)
    assert scanner.scan(data) == 1
    ends = [len(PingFrame(0).serialize()) + len(headers)]
    ends += [ends[0] + len(first) + len(last), len(data)]
    assert scanner.block_ends == ends
    scanner = http2.FrameScanner(1000, skip=0)
    assert (scanner.scan(headers[:-1]), scanner.block_ends) == (0, [])
    assert (scanner.scan(headers[-1:]), scanner.block_ends) == (0, [1])


@pytest.mark.parametrize(("values", "ended", "length"), [
    ([], False, None), ([b"5"], False, 5), ([b"5", b"05"], False, 5), ([b"0"], True, 0),
    ([b"5"], True, ValueError), ([b"5", b"6"], False, ValueError), ([b"5, 5"], False, ValueError),
    ([b"-1"], False, ValueError), ([b""], False, ValueError), ([b"\xd9\xa5"], False, ValueError)])
def test_content_length_rule(values: list[bytes], ended: bool, length: Any) -> None:
    """RFC 9110 §8.6: 1*DIGIT, one value; RFC 9113 §8.1.1: 0 when HEADERS ends the stream."""
    if length is ValueError:
        with pytest.raises(ValueError):
            http2.content_length(values, ended)
    else:
        assert http2.content_length(values, ended) == length


def test_request_target_takes_the_pseudo_header_fields_out() -> None:
    base = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"a.example")]
    fields = [*base, (b":path", b"/x?y=1"), (b"accept", b"*/*")]
    assert http2.request_target(fields, 100) == (
        0, "GET", b"/x", b"y=1", [(b"host", b"a.example"), (b"accept", b"*/*")])
    with_host = http2.request_target([*fields, (b"host", b"a.example")], 100)[4]
    assert [name for name, _ in with_host].count(b"host") == 1
    assert http2.request_target([*base, (b":path", b"/x")], 0)[0] == 431  # host + 0 allowed
    assert http2.request_target([*base, (b":path", b"x")], 100)[0] == 400
    assert http2.request_target([(b":method", b"OPTIONS"), (b":path", b"*")], 100)[:3] == (
        0, "OPTIONS", b"*")
    assert http2.request_target([(b":method", b"CONNECT"), (b":authority", b"a:1")], 100)[0] \
        == 501


def test_h2c_settings_checks() -> None:
    settings = base64.urlsafe_b64encode(SettingsFrame(0, settings={
        SettingCodes.MAX_CONCURRENT_STREAMS: 100}).serialize_body()).rstrip(b"=")
    scope = {"headers": [(b"connection", b"Upgrade, HTTP2-Settings"), (b"upgrade", b"h2c"),
                         (b"http2-settings", settings)]}
    assert http2.h2c_settings(scope) == b"\x00\x03\x00\x00\x00\x64"
    for bad in ([(b"http2-settings", b"!!")], [(b"http2-settings", b"AAMA")],  # not base64,
                [(b"content-length", b"5")], [(b"connection", b"Upgrade")]):  # not 6-byte
        headers = [h for h in scope["headers"] if h[0] != bad[0][0]] + bad
        assert http2.h2c_settings({"headers": headers}) is None, bad


# --- over real sockets ---------------------------------------------------------------------------


async def echo(scope: Scope, receive: Any, send: Any) -> None:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    for at in range(0, len(body), 100_000):
        await send({"type": "http.response.body", "body": body[at:at + 100_000],
                    "more_body": True})
    await send({"type": "http.response.body", "body": b""})


def tls_files(tmp_path: Any) -> tuple[dict[str, str], ssl.SSLContext]:
    """A certificate for 127.0.0.1: the server's settings, and a client context trusting it."""
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    issued.private_key_and_cert_chain_pem.write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return {"ssl_certfile": str(cert), "ssl_keyfile": str(key)}, context


def test_alpn_picks_h2_or_http1_on_one_tls_port(tmp_path: Any) -> None:
    settings, context = tls_files(tmp_path)
    with serving("toy-h2", echo, **settings) as port:
        url = f"https://127.0.0.1:{port}/"
        with httpx.Client(http2=True, verify=context, timeout=10) as client:
            response = client.post(url, content=b"over h2")
            assert (response.http_version, response.content) == ("HTTP/2", b"over h2")
        with httpx.Client(verify=context, timeout=10) as client:
            response = client.post(url, content=b"over 1.1")
            assert (response.http_version, response.content) == ("HTTP/1.1", b"over 1.1")


def test_large_bodies_both_ways_over_prior_knowledge() -> None:
    """4 MB up and down: flow control both ways over a real socket, many windows' worth."""
    payload = bytes(range(256)) * 16384
    with serving("toy-h2", echo) as port, \
            httpx.Client(http1=False, http2=True, timeout=20) as client:
        response = client.post(f"http://127.0.0.1:{port}/", content=payload)
        assert response.http_version == "HTTP/2" and response.content == payload


def test_no_h2c_over_tls(tmp_path: Any) -> None:
    """RFC 9113 §3.3: over TLS only ALPN picks h2. A connection that negotiated http/1.1 has
    its ``Upgrade: h2c`` ignored (answered as HTTP/1.1, the h2c-smuggling pattern fails) and
    an HTTP/2 preface refused (505), never served as HTTP/2."""
    settings, context = tls_files(tmp_path)
    context.set_alpn_protocols(["http/1.1"])
    upgrade = (b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\n"
               b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n")
    with serving("toy-h2", echo, **settings) as port:
        for data, status in ((upgrade, b"HTTP/1.1 200 "), (http2.PREFACE, b"HTTP/1.1 505 ")):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                    context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
                sock.sendall(data)
                assert sock.recv(65536).startswith(status)
