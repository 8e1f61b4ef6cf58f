"""HTTP/2: the three ways in (ALPN, the h2c Upgrade, and prior knowledge in test_protocols.py)
and the behaviours of the HTTP/1.1 suite that apply to streams: the scope, concurrency on one
connection, flow control both ways, resets and GOAWAY on graceful shutdown (trailers and early
hints over HTTP/2: ``test_extensions.py``).

A server that does not speak a protocol (its registry ``protocols``) has these features
declared unsupported by ``support.H2_FEATURES``; its tests still run and must fail, fast (an
HTTP/1.1 server answers the preface with an error and h2 raises at once).

Spec: RFC 9113 §3.2 (ALPN), §3.3 (prior knowledge), §5.1 (stream states, RST_STREAM),
§5.4.1 (GOAWAY), §6.9 (flow control), §8.2.3 (cookies), §8.3 (pseudo-headers); RFC 7540
§3.2 (HTTP/1.1 Upgrade to h2c); ASGI HTTP spec 2.4 (``http_version`` ``"2"``,
``http.disconnect``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

import h2.config
import h2.connection
import h2.errors
import pytest

from tests.conformance import apps
from tests.conformance.conftest import ConformanceServer, TLSServer, conformance_server
from tests.conformance.h2client import H2Client, read_until_closed, tls_context
from tests.conformance.support import HOST, connect, get, poll

feature = pytest.mark.feature

MB = 1024 * 1024
# Bytes offered to an app that reads nothing, or asked of a client that reads none; and the
# bytes that may move before flow control stops them. Measured stalls: hypercorn 0.2 MB,
# granian 1 MB of credit for a request body nobody reads (h2 windows, not kernel buffers).
FLOOD = 4 * MB
FLOOD_BOUND = 2 * MB
STALL = 1.0  # seconds without progress that count as a stall
SLOW_MS = 1500
EXIT_WAIT = 15.0  # seconds the server gets to exit after SIGTERM


def _scope(client: H2Client, path: str = "/scope",
           headers: tuple[tuple[str, str], ...] = ()) -> dict[str, object]:
    stream = client.response(client.request("GET", path, headers=headers))
    assert stream.status == 200, stream
    value: dict[str, object] = json.loads(bytes(stream.data))
    return value


@feature("h2-alpn")
def test_alpn_chooses_h2_over_tls(tls_server: TLSServer) -> None:
    with H2Client(tls_server.port, context=tls_context(tls_server.client_context)) as client:
        assert client.alpn == "h2"
        scope = _scope(client)
    assert scope["http_version"] == "2" and scope["scheme"] == "https", scope


@feature("h2c-upgrade")
def test_h2c_upgrade_answers_the_request_on_stream_1(server: ConformanceServer) -> None:
    # RFC 7540 §3.2: the HTTP/1.1 request carries Upgrade: h2c and HTTP2-Settings; the server
    # answers 101, sends its preface, and the response to that request comes as stream 1.
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    settings = conn.initiate_upgrade_connection()  # the SETTINGS payload, base64url
    with connect(server.port) as sock:
        sock.sendall(b"GET /scope HTTP/1.1\r\nHost: " + HOST.encode() + b"\r\n"
                     b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
                     b"HTTP2-Settings: " + settings + b"\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(65536)
            assert chunk, f"closed before answering the upgrade: {head!r}"
            head += chunk
        head, _, rest = head.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head
        with H2Client(server.port, sock=sock, upgraded=rest) as client:
            stream = client.response(1)
    assert stream.status == 200
    scope = json.loads(bytes(stream.data))
    assert scope["http_version"] == "2" and scope["path"] == "/scope", scope


@feature("h2-scope")
def test_h2_scope_has_no_pseudo_headers(server: ConformanceServer) -> None:
    with H2Client(server.port) as client:
        scope = _scope(client, "/scope/a%20b?x=1&y=2",
                       (("x-custom", "one"), ("cookie", "a=1"), ("cookie", "b=2")))
    assert scope["method"] == "GET" and scope["http_version"] == "2"
    assert scope["path"] == "/scope/a b" and scope["query_string"] == "x=1&y=2", scope
    assert scope["raw_path"] in (None, "/scope/a%20b")
    headers = scope["headers"]
    assert isinstance(headers, list)
    names = [name for name, _ in headers]
    assert not [n for n in names if n.startswith(":")], f"pseudo-headers in scope: {names}"
    assert ["x-custom", "one"] in headers
    cookies = [value for name, value in headers if name == "cookie"]
    # RFC 9113 §8.2.3: split cookie fields may be joined with "; " before the app sees them
    assert cookies in (["a=1; b=2"], ["a=1", "b=2"]), cookies


@feature("h2-multiplexing")
def test_a_held_stream_does_not_block_the_others(server: ConformanceServer) -> None:
    key = f"h2-hold-{server.name}-{time.monotonic_ns()}"
    with H2Client(server.port) as client:
        held = client.request("GET", f"/hold?key={key}")
        quick = client.response(client.request("GET", "/length"))
        assert quick.status == 200 and bytes(quick.data) == apps.HELLO
        assert not client.streams[held].done
        released = client.response(client.request("GET", f"/release?key={key}"))
        assert released.status == 200
        answer = client.response(held)
    assert answer.status == 200 and json.loads(bytes(answer.data))["size"] == 0


def _send_until_stalled(client: H2Client, stream_id: int, total: int,
                        stall: float = STALL) -> int:
    """Send up to ``total`` bytes of body on ``stream_id`` as flow control allows; return how
    many went out before the window stayed shut for ``stall`` seconds (or ``total``)."""
    piece = b"b" * client.conn.max_outbound_frame_size
    sent = 0
    while sent < total:
        window = client.conn.local_flow_control_window(stream_id)
        if window == 0:
            if not client.pump(lambda: client.conn.local_flow_control_window(stream_id) > 0,
                               stall):
                return sent
            continue
        size = min(window, len(piece), total - sent)
        client.conn.send_data(stream_id, piece[:size], end_stream=sent + size == total)
        client.flush()
        sent += size
    return sent


@feature("h2-read-flow-control")
def test_window_updates_follow_what_the_app_reads(server: ConformanceServer) -> None:
    key = f"h2-read-{server.name}-{time.monotonic_ns()}"
    with H2Client(server.port, timeout=10.0) as client:
        stream_id = client.request("POST", f"/hold?key={key}", end_stream=False,
                                   headers=[("content-length", str(FLOOD))])
        stalled_at = _send_until_stalled(client, stream_id, FLOOD)
        assert get(server.port, f"/release?key={key}").status == 200
        sent = stalled_at + _send_until_stalled(client, stream_id, FLOOD - stalled_at,
                                                stall=10.0)  # a busy server's updates too
        assert sent == FLOOD, f"the window stayed shut after the app read: {sent} bytes"
        stream = client.response(stream_id, timeout=30.0)
    assert stalled_at < FLOOD_BOUND, (
        f"{stalled_at / MB:.1f} MB of credit while the app read nothing: no read flow control")
    assert stream.status == 200 and json.loads(bytes(stream.data))["size"] == FLOOD


def _progress_when_stalled(port: int, key: str, size: int) -> int:
    """Bytes ``/produce`` got through ``send()``, polled over HTTP/1.1 until they stop moving
    for STALL s (or reach ``size``)."""
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


@feature("h2-write-flow-control")
def test_send_waits_for_the_clients_window(server: ConformanceServer) -> None:
    key = f"h2-write-{server.name}-{time.monotonic_ns()}"
    with H2Client(server.port, auto_window=False, timeout=10.0) as client:
        stream_id = client.request("GET", f"/produce?key={key}&size={FLOOD}")
        client.pump(lambda: len(client.streams[stream_id].data) > 0)
        stalled = _progress_when_stalled(server.port, key, FLOOD)
        held = len(client.streams[stream_id].data)
        client.open_window(stream_id)
        stream = client.response(stream_id, timeout=30.0)
    assert held <= 65535, f"{held} bytes arrived past the client's 65,535-byte window"
    assert stalled < FLOOD_BOUND, (
        f"send() accepted {stalled / MB:.1f} MB while the client's window was shut")
    assert stream.status == 200 and len(stream.data) == FLOOD


@feature("h2-reset")
def test_client_reset_gives_the_app_http_disconnect(server: ConformanceServer) -> None:
    key = f"h2-reset-{server.name}-{time.monotonic_ns()}"
    with H2Client(server.port) as client:
        stream_id = client.request("GET", f"/wait-disconnect?key={key}", end_stream=False)
        status = poll(server.port, f"/status?key={key}", lambda v: v["status"] == "waiting")
        assert status == {"status": "waiting"}
        client.conn.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        client.flush()
        status = poll(server.port, f"/status?key={key}",
                      lambda v: v["status"] == "disconnected")
        assert status == {"status": "disconnected"}
        after = client.response(client.request("GET", "/length"))  # the connection lives on
    assert after.status == 200 and bytes(after.data) == apps.HELLO


@feature("h2-app-error")
def test_app_failing_after_start_resets_only_its_stream(server: ConformanceServer) -> None:
    # One stream's failure must not cut the others: RST_STREAM (RFC 9113 §5.4.2, §8.1) ends
    # the cut response as incomplete and leaves the connection serving.
    with H2Client(server.port) as client:
        failed = client.response(client.request("GET", "/raise-after-start"), timeout=2.0)
        after = client.response(client.request("GET", "/length"))
    assert failed.status == 200 and failed.reset_code is not None and not failed.ended, (
        "a response cut short by the app must end with RST_STREAM, not END_STREAM")
    assert after.status == 200 and bytes(after.data) == apps.HELLO


@feature("h2-goaway")
def test_sigterm_sends_goaway_and_finishes_the_stream(
        server_name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    # RFC 9113 §6.8: GOAWAY (NO_ERROR) names the last stream the server will process; the
    # streams up to it finish, so the slow response still arrives whole.
    workdir = tmp_path_factory.mktemp(f"h2-goaway-{server_name}")
    key = f"h2-goaway-{time.monotonic_ns()}"
    with conformance_server(server_name, workdir) as running:
        process = running.process
        assert process.proc is not None
        with H2Client(process.port, timeout=10.0) as client:
            stream_id = client.request("GET", f"/slow?ms={SLOW_MS}&key={key}")
            started = poll(process.port, f"/status?key={key}", lambda v: v["status"] != "")
            assert started == {"status": "started"}, f"slow request never started: {started}"
            process.proc.send_signal(signal.SIGTERM)
            log = read_until_closed(client.sock, stream_id, timeout=EXIT_WAIT)
        try:
            process.proc.wait(timeout=EXIT_WAIT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {EXIT_WAIT:g} s after SIGTERM")
    assert log.goaways, f"no GOAWAY before the connection ended ({running.log_tail()})"
    error_code, last_stream_id = log.goaways[-1]
    assert error_code == h2.errors.ErrorCodes.NO_ERROR, log.goaways
    assert last_stream_id >= stream_id, log.goaways
    stream = log.stream
    assert stream.ended and stream.status == 200 and bytes(stream.data) == b"slow done", stream
