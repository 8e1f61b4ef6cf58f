"""The pieces every toy server shares, tested without sockets.

``toyservers.http1`` (request checks, response checks and framing), ``toyservers.asgi`` (scope,
the run-the-app policy, the access-log line) and ``toyservers.protocol.Deadline`` (on a fake
clock).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from tests.support.mock import FakeClockLoop
from toyservers import http1
from toyservers.asgi import (
    ClientDisconnected,
    RequestResponseCycle,
    http_scope,
    log_access,
    scope_template,
)
from toyservers.config import Config
from toyservers.http1 import (
    CHUNK_LINE,
    STATUS_LINES,
    BadTarget,
    ResponseError,
    ResponseFramer,
    check_response,
    error_response,
    host_status,
    is_token,
    reason,
    split_target,
    transfer_coding_status,
)
from toyservers.protocol import Deadline
from toyservers.state import ServerState

DEFAULTS = [(b"date", b"Mon, 23 Nov 2026 10:00:00 GMT"), (b"server", b"toyservers")]


# --- grammar and request checks (RFC 9112 §3.2, §6.1, §6.3, §7.1) ---------------------------


def test_tokens_and_status_lines() -> None:
    assert is_token(b"GET") and is_token(b"x-custom_1") and not is_token(b"") \
        and not is_token(b"a b") and not is_token(b"a:b")
    assert STATUS_LINES[404] == b"HTTP/1.1 404 Not Found\r\n"
    assert STATUS_LINES[599] == b"HTTP/1.1 599 \r\n"  # unregistered: empty reason-phrase
    assert reason(431) == b"Request Header Fields Too Large" and reason(599) == b""


@pytest.mark.parametrize(("value", "version", "has_length", "status"), [
    (b"chunked", "1.1", False, 0),
    (b"Chunked ", "1.1", False, 0),
    (b"gzip, chunked", "1.1", False, 501),  # a coding we cannot undo (§6.1)
    (b"gzip,chunked", "1.1", False, 501),  # two field lines, joined by the caller
    (b"chunked, gzip", "1.1", False, 400),  # chunked not final (§6.3 rule 4)
    (b"chunked,chunked", "1.1", False, 400),  # chunked twice (§7)
    (b"", "1.1", False, 400),
    (b"chunked", "1.0", False, 400),  # faulty framing in HTTP/1.0 (§6.1)
    (b"chunked", "1.1", True, 400),  # beside Content-Length: smuggling (§6.1)
])
def test_transfer_coding_status(value: bytes, version: str, has_length: bool,
                                status: int) -> None:
    assert transfer_coding_status(value, version, has_length) == status


@pytest.mark.parametrize(("hosts", "version", "status"), [
    ([b"example.com"], "1.1", 0),
    ([b"example.com:8080"], "1.1", 0),
    ([b"[::1]:80"], "1.1", 0),
    ([], "1.1", 400),
    ([], "1.0", 0),
    ([b"a", b"a"], "1.0", 400),  # more than one Host line: any version
    ([b"exa mple"], "1.1", 400),
    ([b"a/b"], "1.1", 400),
    ([b"a:b"], "1.1", 400),  # the port is digits
    ([b"a\"b"], "1.1", 400),
])
def test_host_status(hosts: list[bytes], version: str, status: int) -> None:
    assert host_status(hosts, version) == status


@pytest.mark.parametrize(("method", "target", "expected"), [
    ("GET", b"/p?q=1", (b"/p", b"q=1")),
    ("GET", b"/p/q?a=1?b", (b"/p/q", b"a=1?b")),  # the query runs from the first "?"
    ("GET", b"/", (b"/", b"")),
    ("GET", b"http://example.com/p?q", (b"/p", b"q")),
    ("GET", b"HTTPS://example.com", (b"/", b"")),
    ("GET", b"http://example.com?x=/y", (b"/", b"x=/y")),  # a "/" in the query is no path
    ("GET", b"http://user@example.com:80/x", (b"/x", b"")),
    ("OPTIONS", b"*", (b"*", b"")),
    ("CONNECT", b"example.com:443", (b"example.com:443", b"")),
])
def test_split_target_forms(method: str, target: bytes, expected: tuple[bytes, bytes]) -> None:
    assert split_target(method, target) == expected


@pytest.mark.parametrize(("method", "target"), [
    ("GET", b"*"),  # asterisk-form: OPTIONS only (§3.2.4)
    ("GET", b"example.com:443"),  # authority-form: CONNECT only (§3.2.3)
    ("CONNECT", b"/path"),
    ("CONNECT", b"example.com"),  # no port
    ("GET", b"p"),
    ("GET", b"ftp://example.com/"),
    ("GET", b"http:///p"),  # no authority
    ("GET", b"http://exa mple.com/"),
    ("GET", b"/p#frag"),  # no fragment in a request-target (§3.2)
])
def test_split_target_refuses_other_shapes(method: str, target: bytes) -> None:
    with pytest.raises(BadTarget):
        split_target(method, target)


def test_chunk_line_grammar() -> None:
    assert CHUNK_LINE.fullmatch(b"1a;name=value;q=\"x y\"")
    assert CHUNK_LINE.fullmatch(b"ffffffffffffffff")
    for bad in (b"", b"g", b"1 2", b"1;", b"1;a=\"x", b"11111111111111111"):
        assert CHUNK_LINE.fullmatch(bad) is None, bad


def test_error_response_is_complete_and_closes() -> None:
    data = error_response(413, b"date: x\r\n")
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(STATUS_LINES[413] + b"date: x\r\n")
    assert b"\r\nconnection: close" in head and b"content-length: %d" % len(body) in head
    assert body == reason(413)
    head_only = error_response(413, b"", head=True)
    assert head_only.endswith(b"\r\n\r\n") and b"content-length: %d" % len(body) in head_only


# --- response checks: what the app sends (ASGI HTTP spec 2.4, RFC 9110 §5.5, §8.6, §15) ----------


@pytest.mark.parametrize("status", [100, 101, 199, 0, -1, 600, 1000, True, "200", 200.0, None])
def test_check_response_refuses_a_status_that_is_not_final(status: Any) -> None:
    with pytest.raises(ResponseError):
        check_response(status, [], DEFAULTS)


@pytest.mark.parametrize("headers", [
    [(b"bad name", b"x")],
    [(b"", b"x")],
    [(b"x", b"a\r\nset-cookie: forged")],
    [(b"x", b"a\nb")],
    [(b"x", b"a\x00b")],
    [(b"x", b"a\x01b")],
    [(b"x", b"a\x7fb")],
    [(b"x", bytearray(b"a\nb"))],
    [("x", b"y")],
    [(b"x", "y")],
    [(b"content-length", b"+5")],
    [(b"content-length", b"1_0")],
    [(b"content-length", b" 5")],
    [(b"content-length", b"5, 5")],
    [(b"content-length", b"5"), (b"content-length", b"6")],
    [(b"content-length", b"5"), (b"content-length", b"5")],
    [(b"transfer-encoding", b"gzip")],
    [(b"transfer-encoding", b"gzip, chunked")],
    [(b"upgrade", b"websocket")],
    [(b"keep-alive", b"timeout=5")],
    [(b"connection", b"upgrade")],
])
def test_check_response_refuses_bad_fields(headers: Any) -> None:
    with pytest.raises(ResponseError):
        check_response(200, headers, DEFAULTS)


def test_check_response_remembers_only_the_values_it_found_valid() -> None:
    """Values that passed are remembered (the next response skips their check); one refused
    is refused again, and a value that is not bytes is checked every time."""
    good = b"text/plain; id=%d" % id(object())
    check_response(200, [(b"content-type", good)], DEFAULTS)
    assert good in http1._known_values
    forged = b"a\r\nset-cookie: forged-%d" % id(object())
    for _ in range(2):
        with pytest.raises(ResponseError):
            check_response(200, [(b"x", forged)], DEFAULTS)
    assert forged not in http1._known_values
    fields = check_response(200, [(b"x", bytearray(good))], DEFAULTS)
    assert fields.lines[:4] == [b"x", b": ", bytearray(good), b"\r\n"]


def test_check_response_frames_fields_and_merges_defaults() -> None:
    fields = check_response(200, [(b"Content-Type", b"text/plain"), (b"X-A", b"1\t2 3\x80")],
                            DEFAULTS)
    assert b"".join(fields.lines) == (b"content-type: text/plain\r\nx-a: 1\t2 3\x80\r\n"
                                      b"date: Mon, 23 Nov 2026 10:00:00 GMT\r\n"
                                      b"server: toyservers\r\n")
    assert fields.content_length is None and not fields.close
    own = check_response(200, [(b"Server", b"mine"), (b"content-length", b"12"),
                               (b"connection", b"Close"), (b"transfer-encoding", b"chunked")],
                         DEFAULTS)
    assert b"".join(own.lines) == (b"server: mine\r\ncontent-length: 12\r\n"
                                   b"date: Mon, 23 Nov 2026 10:00:00 GMT\r\n")
    assert own.content_length == 12 and own.close


def framed(framer: ResponseFramer, *bodies: tuple[bytes, bool]) -> bytes:
    return b"".join(piece for body, more in bodies for piece in framer.body(body, more))


def test_framer_one_message_gets_a_content_length() -> None:
    framer = ResponseFramer(head_request=False, http10=False, keep_alive=True)
    framer.start(200, [], [])
    assert framed(framer, (b"hello", False)) == b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"
    assert framer.keep_alive and not framer.short


def test_framer_streams_chunked_on_http11_and_closes_on_http10() -> None:
    framer = ResponseFramer(head_request=False, http10=False, keep_alive=True)
    framer.start(200, [], [])
    assert framed(framer, (b"ab", True), (b"", True), (b"c", False)) == (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nab\r\n1\r\nc\r\n0\r\n\r\n")
    old = ResponseFramer(head_request=False, http10=True, keep_alive=True)
    old.start(200, [], [])
    assert framed(old, (b"ab", True), (b"c", False)) == (
        b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nabc")
    assert not old.keep_alive
    kept = ResponseFramer(head_request=False, http10=True, keep_alive=True)
    kept.start(200, [(b"content-length", b"1")], [])
    assert framed(kept, (b"x", False)).startswith(
        b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\nconnection: keep-alive\r\n\r\n")


def test_framer_keeps_the_apps_content_length() -> None:
    framer = ResponseFramer(head_request=False, http10=False, keep_alive=True)
    framer.start(200, [(b"content-length", b"3")], [])
    assert framed(framer, (b"ab", True)) == b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nab"
    with pytest.raises(ResponseError):
        framer.body(b"cd", False)  # one byte too many
    short = ResponseFramer(head_request=False, http10=False, keep_alive=True)
    short.start(200, [(b"content-length", b"3")], [])
    with pytest.raises(ResponseError):  # the whole body at once, short: nothing is out yet
        short.body(b"ab", False)
    short = ResponseFramer(head_request=False, http10=False, keep_alive=True)
    short.start(200, [(b"content-length", b"3")], [])
    framed(short, (b"a", True), (b"b", False))
    assert short.short  # the caller must close: the client waits for a third byte


def test_framer_sends_no_content_after_head_204_304() -> None:
    head = ResponseFramer(head_request=True, http10=False, keep_alive=True)
    head.start(200, [], [])
    assert framed(head, (b"hello", False)) == b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"
    for status in (204, 304):
        framer = ResponseFramer(head_request=False, http10=False, keep_alive=True)
        framer.start(status, [], [])
        assert framed(framer, (b"", False)) == STATUS_LINES[status] + b"\r\n"


def test_framer_checks_the_length_before_taking_the_head() -> None:
    framer = ResponseFramer(head_request=False, http10=False, keep_alive=True)
    framer.start(200, [(b"content-length", b"2")], [])
    with pytest.raises(ResponseError):
        framer.body(b"abc", False)
    assert not framer.head_sent  # nothing went out: the caller can still answer 500


def test_framer_refuses_a_body_that_is_not_bytes() -> None:
    framer = ResponseFramer(head_request=False, http10=False, keep_alive=True)
    framer.start(200, [], [])
    with pytest.raises(ResponseError):
        framer.body("text", False)  # type: ignore[arg-type]


def test_framer_says_close_when_the_app_or_server_asks() -> None:
    framer = ResponseFramer(head_request=False, http10=False, keep_alive=False)
    framer.start(200, [], [])
    assert b"connection: close\r\n" in framed(framer, (b"", False))
    app_close = ResponseFramer(head_request=False, http10=False, keep_alive=True)
    app_close.start(200, [(b"connection", b"close")], [])
    data = framed(app_close, (b"", False))
    assert data.count(b"connection: close") == 1 and not app_close.keep_alive


# --- Deadline (one lazily re-armed timer per connection) -----------------------------------------


def test_deadline_fires_once_at_the_latest_time_set_and_not_after_clear() -> None:
    loop = FakeClockLoop()
    fired: list[str] = []
    try:
        deadline = Deadline(loop, fired.append)
        deadline.set("idle", 5)
        handle = deadline.handle
        loop.advance(3)
        deadline.set("idle", 5)  # moved later: the armed timer is kept, and re-arms itself
        assert deadline.handle is handle
        loop.advance(2.5)
        loop.run_until_complete(asyncio.sleep(0))
        assert fired == []
        loop.advance(3)
        loop.run_until_complete(asyncio.sleep(0))
        loop.run_until_complete(asyncio.sleep(0))
        assert fired == ["idle"]
        deadline.set("head", 10)
        deadline.set("body", 1)  # earlier than the armed timer: re-armed
        loop.advance(1.5)
        loop.run_until_complete(asyncio.sleep(0))
        assert fired == ["idle", "body"]
        deadline.set("idle", 1)
        deadline.clear()
        loop.advance(2)
        loop.run_until_complete(asyncio.sleep(0))
        assert fired == ["idle", "body"]
        deadline.set("idle", 1)
        deadline.close()
        assert deadline.handle is None
    finally:
        loop.close()


# --- the ASGI glue: scope, access log, the one failure policy ------------------------------


class FakeConnection:
    """What RequestResponseCycle needs of a protocol; records ``send_error`` calls."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.client: tuple[str, int] | None = ("127.0.0.1", 50000)
        self.server: tuple[str, int] | None = ("127.0.0.1", 8000)
        self.scheme = "http"
        self.tls: dict[str, Any] | None = None
        self.errors: list[int] = []
        self.scope_template = scope_template(self)

    def send_error(self, status: int) -> None:
        self.errors.append(status)


async def _noop_app(scope: Any, receive: Any, send: Any) -> None:
    return None


def _state(**config: Any) -> ServerState:
    return ServerState(_noop_app, Config(**config), {"db": "x"})


def test_http_scope() -> None:
    conn = FakeConnection(_state(root_path="/api"))
    scope = http_scope(conn, "GET", "1.1", b"/a%20b/%E2%82%AC", b"q=1", [(b"host", b"h")])
    assert scope["path"] == "/api/a b/\u20ac" and scope["raw_path"] == b"/api/a%20b/%E2%82%AC"
    assert scope["root_path"] == "/api" and scope["query_string"] == b"q=1"
    assert scope["asgi"] == {"version": "3.0", "spec_version": "2.4"}
    assert scope["state"] == {"db": "x"} and scope["state"] is not conn.state.lifespan_state
    # pathsend and zerocopysend on every connection; HTTP/1.1: early hints always, trailers
    # only when TE lists them (asgi_extensions.offered); HTTP/1.0: neither (no 1xx to it, no
    # chunked coding)
    files = {"http.response.pathsend": {}, "http.response.zerocopysend": {}}
    assert scope["extensions"] == {**files, "http.response.early_hint": {}}
    assert http_scope(conn, "GET", "1.1", b"/", b"", [], True)["extensions"] == {
        **files, "http.response.early_hint": {}, "http.response.trailers": {}}
    assert http_scope(conn, "GET", "1.0", b"/", b"", [], True)["extensions"] == files
    conn.tls = {"tls_version": 0x0304}
    conn.scope_template = scope_template(conn)  # the tls extension is the connection's
    assert http_scope(conn, "GET", "1.1", b"/", b"", [])["extensions"] == {
        **files, "tls": {"tls_version": 0x0304}, "http.response.early_hint": {}}
    assert http_scope(conn, "GET", "1.0", b"/", b"", [])["extensions"] == {
        **files, "tls": {"tls_version": 0x0304}}


def test_access_log_writes_the_raw_target(caplog: pytest.LogCaptureFixture) -> None:
    conn = FakeConnection(_state())
    scope = http_scope(conn, "GET", "1.1", b"/x%0d%0aforged%1b[31m", b"a=%0a", [])
    with caplog.at_level(logging.INFO, logger="toyservers.access"):
        log_access(conn.client, scope, 200)
    line = caplog.records[-1].getMessage()
    assert line == '127.0.0.1:50000 - "GET /x%0d%0aforged%1b[31m?a=%0a HTTP/1.1" 200'
    assert not any(c in line for c in "\r\n\x1b")


class Cycle(RequestResponseCycle):
    """A cycle whose send only records what the app sent; its errors go to the connection."""

    __slots__ = ("sent", "conn")

    def __init__(self, conn: FakeConnection) -> None:
        super().__init__(conn, {"type": "http"})
        self.sent: list[Any] = []
        self.conn = conn

    def send_error(self, status: int) -> None:
        self.conn.send_error(status)

    async def receive(self) -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(self, message: Any) -> None:
        if self.disconnected:
            raise ClientDisconnected
        self.sent.append(message)
        if message["type"] == "http.response.start":
            self.response_started = True
        elif not message.get("more_body"):
            self.response_complete = True


def _raiser(exc: BaseException) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise exc
    return app


@pytest.mark.parametrize("exc", [ValueError("x"), SystemExit(1), KeyboardInterrupt(),
                                 asyncio.CancelledError(), GeneratorExit()],
                         ids=lambda e: type(e).__name__)
def test_run_asgi_keeps_whatever_the_app_raises_and_answers_500(
        exc: BaseException, caplog: pytest.LogCaptureFixture) -> None:
    conn = FakeConnection(_state())

    async def main() -> None:
        cycle = Cycle(conn)
        cycle.start_task(_raiser(exc))
        assert cycle.task is not None and cycle.task in conn.state.tasks
        await cycle.task  # ends normally: nothing escapes the Task
        assert cycle.task not in conn.state.tasks

    with caplog.at_level(logging.ERROR, logger="toyservers.error"):
        asyncio.run(main())
    assert conn.errors == [500]
    assert "Exception in ASGI application" in caplog.text


def test_run_asgi_answers_500_when_the_app_never_finishes_its_response() -> None:
    conn = FakeConnection(_state())

    async def half(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def main() -> None:
        await Cycle(conn).run_asgi(_noop_app)
        await Cycle(conn).run_asgi(half)

    asyncio.run(main())
    assert conn.errors == [500, 500]  # send_error decides: 500, or close if bytes went out


def test_run_asgi_leaves_a_gone_client_alone() -> None:
    conn = FakeConnection(_state())

    async def streams(scope: Any, receive: Any, send: Any) -> None:
        cycle.disconnected = True
        await send({"type": "http.response.start", "status": 200, "headers": []})

    cycle = Cycle(conn)
    asyncio.run(cycle.run_asgi(streams))
    assert conn.errors == [] and cycle.sent == []
