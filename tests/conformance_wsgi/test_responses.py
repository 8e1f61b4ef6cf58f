"""What the server does with the app's answer, and with the connection around it.

Spec: PEP 3333 ("The start_response() Callable", "Buffering and Streaming", "The write()
Callable", "Optional Platform-Specific File Handling", "Other HTTP Features": hop-by-hop
headers, "HTTP 1.1 Expect/Continue"); RFC 9112 §6 (message body), §7.1 (chunked), §9
(connection management); RFC 9110 §9.3.2 (HEAD), §10.1.1 (Expect).
"""

from __future__ import annotations

import contextlib
import email.utils
import os
import time
from pathlib import Path

import pytest

from tests.conformance.conftest import IDLE_BOUND
from tests.conformance_wsgi import apps
from tests.conformance_wsgi.conftest import WSGIServer
from tests.conformance_wsgi.support import Connection, Response, get, request
from tests.support.running import PeakRSS, RunningServer

feature = pytest.mark.feature

CLOSE_WAIT = 3.0  # seconds a server gets to close a connection it must close
CONTINUE_WAIT = 2.0  # seconds a client waits for 100 Continue (curl waits 1)
MB = 1024 * 1024
TRANSFER = 10 * MB
RSS_BOUND = TRANSFER // 2  # bytes the server tree may grow while sending TRANSFER bytes
STALL = 1.0  # seconds without progress that count as a stall


def one(port: int, data: bytes, *, head: bool = False, timeout: float = 5.0) -> Response:
    """Send ``data`` on a fresh connection; the complete response to it."""
    with Connection(port, timeout=timeout) as conn:
        conn.send(data)
        response = conn.read_response(head=head)
    assert response is not None and response.complete, "no complete response"
    return response


@feature("write-callable")
def test_write_callable_then_the_iterable(server: RunningServer) -> None:
    response = get(server.port, "/write")
    assert response.status == 200
    assert response.body == b"written;returned"


@feature("lazy-headers")
def test_exception_after_start_response_before_any_body_gives_500(server: RunningServer
                                                                   ) -> None:
    # PEP 3333: the headers go out with the first non-empty body string, so until then the
    # server can still answer 500 instead of the app's status.
    response = get(server.port, "/raise-after-start")
    assert response.status == 500
    assert response.header("x-app") is None


@feature("exc-info")
def test_exc_info_replaces_headers_not_yet_sent(server: RunningServer) -> None:
    response = get(server.port, "/exc-info")
    assert response.status == 503
    assert response.header("x-new") == "1" and response.header("x-old") is None
    assert response.body == b"error page"


@feature("exc-info-after-headers")
def test_exc_info_after_the_headers_went_out_cuts_the_response(server: RunningServer) -> None:
    # PEP 3333: once the headers are sent, start_response with exc_info re-raises; the server
    # can only close the connection, leaving the response visibly unfinished where it can.
    with Connection(server.port) as conn:
        conn.send(request("GET", "/exc-info-late"))
        response = conn.read_response()
        assert response is not None and response.status == 200
        assert response.body == b"partial;"
        if response.chunked:
            assert not response.complete, "a cut response ended as if complete"
        assert conn.eof or conn.closed_within(CLOSE_WAIT), "the connection stayed open"


@feature("close-called")
@pytest.mark.parametrize("fail", [False, True], ids=["success", "error"])
def test_result_close_is_called(server: RunningServer, fail: bool) -> None:
    key = f"close-{server.name}-{fail}-{time.monotonic_ns()}"
    response = get(server.port, f"/close?key={key}&fail={int(fail)}")
    assert response.status == (500 if fail else 200)
    # close() runs before the connection is released (a one-thread server answers /status
    # only after it); a thread pool may answer /status first, so poll with a deadline.
    deadline = time.monotonic() + 5.0
    while (closed := get(server.port, f"/status?key={key}").json()) != {"closed": 1}:
        assert time.monotonic() < deadline, f"close() ran {closed} times"
        time.sleep(0.02)  # polling interval


@feature("file-wrapper")
def test_file_wrapper_serves_the_file(server: RunningServer) -> None:
    response = get(server.port, "/file")
    assert response.status == 200
    with open(apps.SELF_PATH, "rb") as file:
        expected = file.read()
    assert response.header("content-length") == str(len(expected))
    assert response.body == expected


@feature("hop-by-hop-refused")
def test_hop_by_hop_header_from_the_app_is_refused(server: RunningServer) -> None:
    # PEP 3333: "it is a fatal error for an application to generate" hop-by-hop headers;
    # the server must not forward this one (wsgiref and toy-wsgi answer 500).
    response = get(server.port, "/hop-by-hop")
    assert response.header("upgrade") is None, "the app's Upgrade header was sent"


@feature("content-length")
def test_app_content_length_is_kept(server: RunningServer) -> None:
    response = get(server.port, "/length")
    assert response.header("content-length") == "11"
    assert response.header("transfer-encoding") is None
    assert response.body == apps.HELLO


@feature("short-body-closes")
def test_body_shorter_than_its_content_length_closes(server: RunningServer) -> None:
    # RFC 9112 §6.3: a body that ends before its Content-Length is incomplete, and the bytes
    # after it would be read as the rest of the body: the server must close, not take and
    # answer another request on this connection.
    with Connection(server.port) as conn:
        conn.send(request("GET", "/short"))
        head = conn.read_head()
        assert head is not None and head.header("content-length") == "20"
        while len(conn.buffer) < len(apps.HELLO) and conn._fill():
            pass
        assert conn.buffer == apps.HELLO
        with contextlib.suppress(OSError):  # closed already: the send may fail
            conn.send(request("GET", "/length"))
        assert conn.closed_within(CLOSE_WAIT), "the connection stayed open"
        assert b" 200 " not in conn.buffer, "a request after the short body was answered"


@feature("header-injection-refused")
def test_crlf_in_an_app_header_value_is_refused(server: RunningServer) -> None:
    # PEP 3333: a header value "must not include any control characters, including carriage
    # returns or linefeeds"; sent as is, the app's value would add a field (response splitting).
    response = get(server.port, "/inject")
    assert response.header("x-injected") is None, "the app's CRLF split the header"


@feature("date-header")
def test_date_header_is_sent(server: RunningServer) -> None:
    # RFC 9110 §6.6.1: an origin server with a clock MUST send Date on 2xx responses.
    response = get(server.port, "/length")
    value = response.header("date")
    assert value is not None and email.utils.parsedate_to_datetime(value) is not None


@feature("chunked-response")
def test_response_without_length_is_chunked_on_http11(server: RunningServer) -> None:
    response = get(server.port, "/stream")
    assert response.chunked and response.header("content-length") is None
    assert response.body == b"first;second;third"


@feature("http10")
def test_http10_response_is_close_delimited(server: RunningServer) -> None:
    # RFC 9112 §6.1: no chunked coding to an HTTP/1.0 client; without a length the body ends
    # when the connection closes.
    response = one(server.port, request("GET", "/stream", version="HTTP/1.0"))
    assert response.header("transfer-encoding") is None
    assert response.body == b"first;second;third"


@feature("head")
def test_head_has_the_headers_and_no_body(server: RunningServer) -> None:
    with Connection(server.port) as conn:
        conn.send(request("HEAD", "/length", headers=[("Connection", "close")]))
        response = conn.read_response(head=True)
        assert response is not None and response.status == 200
        assert response.header("content-length") == "11"
        assert conn.closed_within(CLOSE_WAIT)
        assert conn.buffer == b"", f"a body after HEAD: {conn.buffer[:40]!r}"


@feature("head")
def test_head_of_a_streamed_response_has_no_body(server: RunningServer) -> None:
    with Connection(server.port) as conn:
        conn.send(request("HEAD", "/stream", headers=[("Connection", "close")]))
        response = conn.read_response(head=True)
        assert response is not None and response.status == 200
        assert conn.closed_within(CLOSE_WAIT)
        assert conn.buffer == b"", f"a body after HEAD: {conn.buffer[:40]!r}"


@feature("keep-alive")
def test_two_requests_share_one_connection(server: RunningServer) -> None:
    with Connection(server.port) as conn:
        for _ in range(2):
            conn.send(request("GET", "/length"))
            response = conn.read_response()
            assert response is not None and response.status == 200
            assert response.body == apps.HELLO


@feature("idle-timeout")
def test_idle_keep_alive_connection_is_closed(server: WSGIServer) -> None:
    # An idle keep-alive connection must not hold a slot forever: closed within IDLE_BOUND s
    # (a one-request-per-connection server closes it at once).
    result = server.probes["idle"].result(IDLE_BOUND + 5.0)
    assert result.first_status == 200
    assert result.closed, f"still open after {result.seconds:.1f} s idle"


@feature("pipelining")
def test_pipelined_responses_come_in_order(server: RunningServer) -> None:
    # RFC 9112 §9.3.2: responses go out in the order the requests came.
    batch = b"".join(request("GET", f"/environ?id={i}") for i in range(3))
    with Connection(server.port) as conn:
        conn.send(batch)
        ids = []
        for _ in range(3):
            response = conn.read_response()
            assert response is not None and response.complete
            ids.append(response.json()["QUERY_STRING"])
    assert ids == ["id=0", "id=1", "id=2"]


@feature("connection-close")
def test_request_connection_close_is_honoured(server: RunningServer) -> None:
    with Connection(server.port) as conn:
        conn.send(request("GET", "/length", headers=[("Connection", "close")]))
        response = conn.read_response()
        assert response is not None and response.status == 200
        assert conn.closed_within(CLOSE_WAIT), "the connection stayed open"


@feature("expect-100-continue")
def test_100_continue_comes_when_the_app_reads(server: RunningServer) -> None:
    # PEP 3333: the server sends 100 Continue when "the application first attempts to read
    # from the input stream"; an app that answers without reading gets no 100 before it.
    with Connection(server.port) as conn:
        conn.send(request("POST", "/no-read", headers=[("Expect", "100-continue"),
                                                        ("Content-Length", "5"),
                                                        ("Connection", "close")]))
        first = conn.read_response(informational=True)
        assert first is not None and first.status == 200, "100 Continue before the app read"
    with Connection(server.port, timeout=CONTINUE_WAIT) as conn:
        conn.send(request("POST", "/echo", headers=[("Expect", "100-continue"),
                                                     ("Content-Length", "5")]))
        interim = conn.read_response(informational=True)
        assert interim is not None and interim.status == 100
        conn.send(b"hello")
        final = conn.read_response()
    assert final is not None and final.status == 200 and final.json() == {"body": "hello"}


@feature("no-100-to-http10")
def test_no_100_continue_to_http10(server: RunningServer) -> None:
    # RFC 9110 §10.1.1: "A server that receives a 100-continue expectation in an HTTP/1.0
    # request MUST ignore that expectation."
    with Connection(server.port) as conn:
        conn.send(request("POST", "/echo", version="HTTP/1.0",
                          headers=[("Expect", "100-continue")], body=b"hello"))
        first = conn.read_response(informational=True)
    assert first is not None and first.status == 200, "100 Continue to an HTTP/1.0 client"


@feature("malformed-400")
@pytest.mark.parametrize("data", [
    b"GET /environ HTTP/1.1 extra\r\nHost: a\r\n\r\n",
    b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 1x\r\n\r\nx",
    b"GET /environ HTTP/1.1\r\nHost: a\r\nno colon here\r\n\r\n",
], ids=["request-line", "content-length", "field-without-colon"])
def test_malformed_request_gets_400_and_close(server: RunningServer, data: bytes) -> None:
    with Connection(server.port) as conn:
        conn.send(data + request("GET", "/length"))
        response = conn.read_response()
        assert response is not None, "closed without a response"
        assert response.status == 400
        assert conn.closed_within(CLOSE_WAIT), "connection kept open after a 400"
        assert b" 200 " not in conn.buffer, "the request after the bad one was served"


@feature("te-and-cl-closes")
def test_content_length_with_transfer_encoding_closes(server: RunningServer) -> None:
    # RFC 9112 §6.3: the server MAY reject or use Transfer-Encoding alone, but it MUST close
    # the connection after responding (the ASGI suite's test).
    smuggle = (b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    with Connection(server.port) as conn:
        conn.send(smuggle + request("GET", "/length"))
        response = conn.read_response()
        assert response is not None, "closed without a response"
        assert conn.closed_within(CLOSE_WAIT), "connection kept open after TE + CL"
        assert b" 200 " not in conn.buffer, "the request after TE + CL was served"


@feature("app-exception-500")
def test_app_exception_gives_500_and_the_server_keeps_serving(server: RunningServer) -> None:
    for _ in range(2):
        assert get(server.port, "/raise").status == 500
    assert get(server.port, "/length").body == apps.HELLO


@feature("no-response-500")
def test_app_returning_without_start_response_gives_500(server: RunningServer) -> None:
    assert get(server.port, "/no-response").status == 500


def _taken_when_stalled(progress: Path, size: int) -> int:
    """Bytes the server took from ``/produce`` while the client reads nothing: polled until
    they stop moving for STALL s (or reach ``size``)."""
    last, last_change = -1, time.monotonic()
    deadline = time.monotonic() + 15.0
    while time.monotonic() < deadline:
        text = progress.read_text() if progress.exists() else ""
        taken = int(text) if text.isdigit() else last
        if taken != last:
            last, last_change = taken, time.monotonic()
        elif time.monotonic() - last_change >= STALL or last >= size:
            break
        time.sleep(0.05)  # polling interval
    return last


@feature("large-download")
def test_10mb_download_is_streamed(server: RunningServer, tmp_path: Path) -> None:
    # Streaming, seen from the app: while the client reads nothing, the server stops taking
    # pieces well before the whole body (kernel buffers hold about 4 MB here). RSS alone can
    # miss a server that buffers in a temporary file, or reuses memory freed earlier.
    progress = tmp_path / "progress"
    with Connection(server.port, rcvbuf=65536, timeout=10.0) as conn:
        conn.send(request("GET", f"/produce?size={TRANSFER}&progress={progress}"))
        taken = _taken_when_stalled(progress, TRANSFER)
        assert taken < TRANSFER, "the server took all 10 MB for a client that read none of it"
        response = conn.read_response()
    assert response is not None and response.complete and len(response.body) == TRANSFER
    # The app yields 64 KB pieces of a 10 MB body: a streaming server holds a few of them at a
    # time, a buffering one the whole body. The client reads slowly at first (a small receive
    # window) so a server that buffers what the socket cannot take yet is seen too.
    get(server.port, f"/download?size={MB}")  # warm up: buffers and code paths allocated once
    with PeakRSS(server) as rss, Connection(server.port, rcvbuf=65536, timeout=10.0) as conn:
        conn.send(request("GET", f"/download?size={TRANSFER}"))
        response = conn.read_response()
    assert response is not None and response.complete and len(response.body) == TRANSFER
    assert rss.growth < RSS_BOUND, f"server RSS grew {rss.growth / MB:.1f} MB for 10 MB"
    assert os.path.exists(apps.SELF_PATH)
