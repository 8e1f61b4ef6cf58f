"""Streaming bodies both ways, flow control, and ``http.disconnect``.

A 10 MB upload and download must stream: the server tree's RSS, sampled every 10 ms during the
transfer, grows by well under the body size. Backpressure is observed from the outside: a
client whose peer stops reading stalls once the kernel buffers and the server's high-water
mark are full, long before the whole body has moved.

Spec: ASGI HTTP spec 2.4 (``http.request`` with ``more_body``, ``http.disconnect``; "servers
should apply backpressure"); RFC 9112 §6 (message body).
"""

from __future__ import annotations

import time

import pytest

from tests.conformance.conftest import ConformanceServer
from tests.conformance.support import Connection, get, poll, request
from tests.support.running import PeakRSS

feature = pytest.mark.feature

MB = 1024 * 1024
TRANSFER = 10 * MB
RSS_BOUND = TRANSFER // 2  # bytes the server tree may grow while moving TRANSFER bytes
FLOOD = 48 * MB  # bytes offered to a peer that does not read
FLOOD_BOUND = 24 * MB  # bytes that may move before the stall: kernel buffers + server buffers
STALL = 1.0  # seconds without progress that count as a stall


def _upload(port: int, size: int) -> dict[str, int]:
    with Connection(port) as conn:
        conn.send(request("POST", "/upload", headers=[("Content-Length", str(size))]))
        piece = b"u" * 65536
        left = size
        while left:
            part = piece[:left]
            conn.send(part)
            left -= len(part)
        response = conn.read_response()
        assert response is not None and response.status == 200
        value = response.json()
        assert isinstance(value, dict)
        return value


def _download(port: int, size: int) -> int:
    with Connection(port) as conn:
        conn.send(request("GET", f"/download?size={size}"))
        response = conn.read_response()
        assert response is not None and response.complete and response.status == 200
        return len(response.body)


@feature("large-upload")
def test_10mb_upload_is_streamed(server: ConformanceServer) -> None:
    # Streaming, seen from the app: its first http.request arrives while the client still
    # holds back most of the body. (RSS alone can miss a buffering server when memory freed
    # by an earlier test is reused.)
    key = f"first-{server.name}-{time.monotonic_ns()}"
    with Connection(server.port, timeout=10.0) as conn:
        conn.send(request("POST", f"/first-piece?key={key}",
                          headers=[("Content-Length", str(TRANSFER))]))
        conn.send(b"u" * MB)
        status = poll(server.port, f"/status?key={key}", lambda v: v["status"] == "got-first",
                      timeout=5.0)
        assert status == {"status": "got-first"}, "the app saw no body before all of it arrived"
        conn.send(b"u" * (TRANSFER - MB))
        response = conn.read_response()
    assert response is not None and response.status == 200
    assert response.json()["size"] == TRANSFER
    _upload(server.port, MB)  # warm up: buffers and code paths allocated once
    with PeakRSS(server) as rss:
        result = _upload(server.port, TRANSFER)
    assert result["size"] == TRANSFER
    assert result["messages"] > 1, "the whole body arrived in one http.request message"
    assert rss.growth < RSS_BOUND, f"server RSS grew {rss.growth / MB:.1f} MB for a 10 MB body"


def _progress_when_stalled(port: int, key: str, size: int) -> int:
    """Bytes the app's ``send()`` got through for ``/produce`` of ``size`` bytes while the
    client reads nothing: polled until they stop moving for STALL s (or reach ``size``)."""
    last, last_change = -1, time.monotonic()
    deadline = time.monotonic() + 15.0
    while time.monotonic() < deadline:
        sent = get(port, f"/progress?key={key}").json()
        assert isinstance(sent, dict)
        if sent["sent"] != last:
            last, last_change = sent["sent"], time.monotonic()
        elif time.monotonic() - last_change >= STALL or last >= size:
            break
        time.sleep(0.05)  # polling interval
    return last


@feature("large-download")
def test_10mb_download_is_streamed(server: ConformanceServer) -> None:
    # Streaming, seen from the app: while the client reads nothing, send() stops well before
    # the whole body (kernel buffers hold about 4 MB here). RSS alone can miss a buffering
    # server when memory freed by an earlier test is reused.
    key = f"download-{server.name}-{time.monotonic_ns()}"
    with Connection(server.port, rcvbuf=65536, timeout=10.0) as conn:
        conn.send(request("GET", f"/produce?key={key}&size={TRANSFER}"))
        stalled = _progress_when_stalled(server.port, key, TRANSFER)
        assert stalled < TRANSFER, "the app sent all 10 MB to a client that read none of it"
        response = conn.read_response()
    assert response is not None and response.status == 200 and len(response.body) == TRANSFER
    _download(server.port, MB)
    with PeakRSS(server) as rss:
        received = _download(server.port, TRANSFER)
    assert received == TRANSFER
    assert rss.growth < RSS_BOUND, f"server RSS grew {rss.growth / MB:.1f} MB for a 10 MB body"


@feature("read-backpressure")
def test_server_stops_reading_when_the_app_does_not(server: ConformanceServer) -> None:
    key = f"hold-{server.name}-{time.monotonic_ns()}"
    piece = memoryview(b"b" * 65536)
    with Connection(server.port, timeout=STALL) as conn:
        conn.send(request("POST", f"/hold?key={key}", headers=[("Content-Length", str(FLOOD))]))
        sent = 0
        try:
            while sent < FLOOD:
                sent += conn.sock.send(piece[: min(len(piece), FLOOD - sent)])
        except TimeoutError:
            pass
        stalled_at = sent
        assert get(server.port, f"/release?key={key}").status == 200
        conn.sock.settimeout(10.0)
        while sent < FLOOD:
            sent += conn.sock.send(piece[: min(len(piece), FLOOD - sent)])
        response = conn.read_response()
    assert stalled_at < FLOOD_BOUND, (
        f"{stalled_at / MB:.1f} MB accepted while the app read nothing: no backpressure")
    assert response is not None and response.status == 200
    body = response.json()
    assert isinstance(body, dict) and body["size"] == FLOOD


@feature("write-flow-control")
def test_app_send_waits_for_a_slow_client(server: ConformanceServer) -> None:
    key = f"produce-{server.name}-{time.monotonic_ns()}"
    with Connection(server.port, rcvbuf=65536) as conn:
        conn.send(request("GET", f"/produce?key={key}&size={FLOOD}"))
        last = _progress_when_stalled(server.port, key, FLOOD)  # the client reads nothing
    assert last < FLOOD_BOUND, (
        f"send() accepted {last / MB:.1f} MB the client never read: no write flow control")


@feature("disconnect")
def test_app_receives_http_disconnect(server: ConformanceServer) -> None:
    key = f"disc-{server.name}-{time.monotonic_ns()}"
    with Connection(server.port) as conn:
        conn.send(request("GET", f"/wait-disconnect?key={key}"))
        status = poll(server.port, f"/status?key={key}", lambda v: v["status"] == "waiting")
        assert status == {"status": "waiting"}
    status = poll(server.port, f"/status?key={key}", lambda v: v["status"] == "disconnected")
    assert status == {"status": "disconnected"}


@feature("send-after-disconnect")
def test_send_after_disconnect_raises_oserror(server: ConformanceServer) -> None:
    """ASGI HTTP spec 2.4: "If send() is called on a closed connection the server should
    raise a server-specific subclass of OSError", so an app streaming to nobody stops."""
    key = f"gone-{server.name}-{time.monotonic_ns()}"
    with Connection(server.port) as conn:
        conn.send(request("GET", f"/send-after-disconnect?key={key}"))
        status = poll(server.port, f"/status?key={key}", lambda v: v["status"] == "streaming")
        assert status == {"status": "streaming"}
    status = poll(server.port, f"/status?key={key}",
                  lambda v: v["status"] not in ("", "streaming"))
    assert status == {"status": "raised OSError"}
