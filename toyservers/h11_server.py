"""toy-h11: a sans-IO HTTP/1.1 ASGI server: h11 parses and frames, this module moves bytes.

I/O model: one ``asyncio.Protocol`` per connection owns an ``h11.Connection``, a state machine
that never touches a socket. ``data_received`` hands the bytes to ``receive_data`` and pulls
events out with ``next_event`` (``Request``, ``Data``, ``EndOfMessage``; ``NEED_DATA`` when it
wants more bytes, ``PAUSED`` when the client is ahead of us); the ASGI side turns the app's
messages into ``Response``/``Data``/``EndOfMessage`` events and ``conn.send`` turns those into
bytes for ``transport.write``. Each request runs the app in its own Task
(``RequestResponseCycle.run_asgi``); when both sides are ``DONE``, ``start_next_cycle`` readies
the connection for the next request. h11 is strict about most of the grammar; what it lets
through (bare LF line ends, control bytes and obs-fold in fields, Transfer-Encoding beside
Content-Length or with unknown codings, repeated Content-Length, our size limits) is checked on
the raw header block before h11 sees it (``check_head``), and the chunk-size lines it reads
without validating are followed by ``ChunkScanner``.

Deliberately left out: WebSocket and other protocol upgrades (served as plain HTTP), CONNECT
(501), HTTP/1.0 keep-alive (h11 always closes HTTP/1.0 connections, which RFC 9112 §9.3
allows), request trailers (h11 parses and drops them), ``http.response.trailers``, zero-copy
file responses, TLS beyond what asyncio's ``ssl=`` gives.

Spec: RFC 9112 §2-§3 (message and request line), §5 (field syntax, obs-fold), §6-§7 (body
length, chunked coding), §9 (persistence, pipelining); RFC 9110 §7.2 (Host), §10.1.1 (Expect),
§15 (status codes). ASGI 3.0 HTTP connection scope, ``http.request``, ``http.disconnect``,
``http.response.start`` and ``http.response.body``
(https://asgi.readthedocs.io/en/latest/specs/www.html); lifespan via ``toyservers.lifespan``.

Compare with: uvicorn/protocols/http/h11_impl.py (and h11's examples/trio-server.py).
"""

from __future__ import annotations

import asyncio
import http
import logging
import re
import socket
from typing import Any
from urllib.parse import unquote

import h11

from toyservers._server import ServerState, run_server, serve_protocol, tls_extension
from toyservers._types import ASGIApp, Headers, Message
from toyservers.config import Config
from toyservers.flow_control import HIGH_WATER_LIMIT, FlowControl

# --- constants -------------------------------------------------------------------------------

logger = logging.getLogger("toyservers.error")
access_logger = logging.getLogger("toyservers.access")

MAX_CONTENT_LENGTH = 2**63 - 1
"""Largest Content-Length we accept; larger is an overflow (RFC 9112 §6.3 p5: invalid)."""

STATUS_PHRASES = {s.value: s.phrase.encode() for s in http.HTTPStatus}
METHODS = {m: m.decode() for m in (b"GET", b"POST", b"PUT", b"DELETE", b"HEAD", b"PATCH")}
NO_BODY_STATUSES = frozenset({204, 304})
DEFAULT_HEADER_NAMES = frozenset({b"date", b"server"})
CONTENT_LENGTH = b"\ncontent-length:"
TRANSFER_ENCODING = b"\ntransfer-encoding:"
END_OF_MESSAGE = h11.EndOfMessage()
# Control bytes other than HTAB, CR and LF: never valid in a head (RFC 9110 §5.5: field-vchar
# is VCHAR / obs-text). h11 rejects only NUL and whitespace controls.
CTL = bytes(range(0x00, 0x09)) + b"\x0b\x0c" + bytes(range(0x0e, 0x20)) + b"\x7f"
TOKEN = rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+"
QUOTED = rb'"(?:[\t \x21\x23-\x5b\x5d-\x7e\x80-\xff]|\\[\t \x21-\x7e\x80-\xff])*"'
# RFC 9112 §7.1 and §7.1.1: chunk-size [ chunk-ext ] CRLF, with at most 16 hex digits (64 bits).
CHUNK_EXT = rb"[ \t]*;[ \t]*%s(?:[ \t]*=[ \t]*(?:%s|%s))?" % (TOKEN, TOKEN, QUOTED)
CHUNK_LINE = re.compile(rb"(?P<size>[0-9A-Fa-f]{1,16})(?:%s)*[ \t]*\r\n" % CHUNK_EXT)
MAX_CHUNK_LINE = 4096


# --- wire helpers ----------------------------------------------------------------------------


def h11_response(status: int, headers: Headers) -> h11.Response:
    """The ``h11.Response`` for ``status`` and the app's ``headers`` (RFC 9112 §4 status line).

    Raises h11.LocalProtocolError for an invalid status or header, as h11 does.
    """
    return h11.Response(status_code=status, headers=headers,
                        reason=STATUS_PHRASES.get(status, b""))


def _field_values(low: bytes, name: bytes) -> list[bytes]:
    """Every comma-separated element of the fields ``name`` in a lowercased header block."""
    values = []
    start = low.find(name)
    while start >= 0:
        stop = low.find(b"\r", start)
        values += [v.strip(b" \t") for v in low[start + len(name): stop].split(b",")]
        start = low.find(name, stop)
    return [v for v in values if v]


def check_head(buf: bytes | bytearray, end: int, config: Config) -> tuple[int, bool]:
    """Check a complete request head for what h11 accepts but the contract rejects.

    ``buf[:end + 4]`` is the head, ``end`` the offset of its final ``\\r\\n\\r\\n``. Returns
    ``(status, chunked)``: status 0 when h11 may parse it, else the one to answer with (then
    close), and whether the body is chunked. Statuses:

    - 414: request line over ``config.max_request_line`` bytes;
    - 431: header block over ``config.max_header_size`` bytes, or over ``config.max_headers``
      fields;
    - 400: a bare LF (RFC 9112 §2.2); a control byte (RFC 9110 §5.5); obs-fold or whitespace
      before the first field (§5.2, §2.2); duplicate, differing or overflowing Content-Length
      (§6.3 p5); Transfer-Encoding with Content-Length or in HTTP/1.0 (§6.1); a final coding
      other than chunked, or chunked twice (§6.3 p4, §7);
    - 413: Content-Length over ``config.max_body_size``;
    - 501: a transfer coding we do not implement (§6.1).

    Request line syntax, field syntax and Host are left to h11.
    """
    line_end = buf.find(b"\r\n", 0, end + 2)
    if line_end > config.max_request_line:
        return 414, False
    if end - line_end > config.max_header_size:
        return 431, False
    fields = buf.count(b"\r\n", 0, end)
    if fields > config.max_headers:
        return 431, False
    # h11 splits lines on a lone LF too; "A recipient ... MUST NOT" treat it as CRLF here.
    if buf.count(b"\n", 0, end + 4) != fields + 2 or len(buf[:end].translate(None, CTL)) != end:
        return 400, False
    if buf.find(b"\n ", 0, end) >= 0 or buf.find(b"\n\t", 0, end) >= 0:
        return 400, False  # h11 unfolds obs-fold; we reject it, as RFC 9112 §5.2 allows
    if not fields:
        return 0, False
    low = bytes(buf[line_end:end + 2]).lower()
    lengths = low.count(CONTENT_LENGTH)
    if TRANSFER_ENCODING in low:
        if lengths or buf[line_end - 3:line_end] == b"1.0":
            return 400, False
        codings = _field_values(low, TRANSFER_ENCODING)
        if not codings or codings[-1] != b"chunked" or codings.count(b"chunked") > 1:
            return 400, False
        return (501 if len(codings) > 1 else 0), True
    if lengths > 1:
        return 400, False
    start = low.find(CONTENT_LENGTH)
    # Fast path: h11 checks the digits; only a long value can overflow (or be a list).
    if lengths and (config.max_body_size is not None or low.find(b"\r", start) - start > 32):
        values = set(_field_values(low, CONTENT_LENGTH))
        value = values.pop() if len(values) == 1 else b"x"
        if not value.isdigit() or len(value) > 19 or int(value) > MAX_CONTENT_LENGTH:
            return 400, False
        if config.max_body_size is not None and int(value) > config.max_body_size:
            return 413, False
    return 0, False


def check_partial_head(buf: bytes | bytearray, config: Config) -> int:
    """Like ``check_head`` for a head still arriving: 0 to keep reading, else the status."""
    line_end = buf.find(b"\n")
    if line_end < 0:
        return 414 if len(buf) > config.max_request_line else 0
    if line_end > config.max_request_line + 1:
        return 414
    if len(buf) - line_end > config.max_header_size:
        return 431
    crlf = buf.count(b"\r\n")
    if buf.count(b"\n") != crlf:
        return 400  # a bare LF: h11 would take "\n\n" as the end of the head
    return 431 if crlf > config.max_headers + 1 else 0


class ChunkScanner:
    """Follows a chunked body beside h11 to check the lines h11 reads without validating.

    h11 frames the body; it takes anything after ``;`` on a chunk-size line as an extension
    and discards it. ``feed(data)`` walks the same bytes and returns False at a chunk-size
    line that is not ``1*16HEXDIG *(BWS ";" BWS token [BWS "=" BWS (token / quoted-string)])
    CRLF`` (RFC 9112 §7.1, §7.1.1) or a trailer line not ending in CRLF (§7.1.2, §2.2).
    ``done`` turns True after the trailer section's empty line.
    """

    __slots__ = ("line", "remaining", "trailers", "done")

    def __init__(self) -> None:
        self.line = b""  # a line split across reads
        self.remaining = 0  # chunk data bytes still to skip, plus their CRLF
        self.trailers = False
        self.done = False

    def feed(self, data: bytes) -> bool:
        start, size = 0, len(data)
        while start < size and not self.done:
            if self.remaining:
                skip = min(self.remaining, size - start)
                start += skip
                self.remaining -= skip
                continue
            stop = data.find(b"\n", start)
            if stop < 0:
                self.line += data[start:]
                return len(self.line) <= MAX_CHUNK_LINE
            line = self.line + data[start:stop + 1]
            self.line = b""
            start = stop + 1
            if line[-2:-1] != b"\r":
                return False
            if self.trailers:
                self.done = line == b"\r\n"  # h11 checks the trailer fields themselves
                continue
            match = CHUNK_LINE.fullmatch(line)
            if match is None:
                return False
            chunk = int(match["size"], 16)
            if chunk:
                self.remaining = chunk + 2  # h11 checks the CRLF after the data
            else:
                self.trailers = True
        return True


def _addr(transport: asyncio.BaseTransport, name: str) -> tuple[str, int] | None:
    info = transport.get_extra_info(name)
    if isinstance(info, tuple) and len(info) >= 2:
        return (str(info[0]), int(info[1]))
    return None


# --- the protocol class ----------------------------------------------------------------------


class H11Protocol(asyncio.Protocol):
    """One HTTP/1.1 connection: feeds h11, starts a ``RequestResponseCycle`` per request.

    Adds itself to ``state.connections`` while the connection lives; ``shutdown()`` closes it
    now when idle, or after the response in flight.
    """

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.config = config = state.config
        self.app = state.app
        self.loop = asyncio.get_running_loop()
        self.conn = h11.Connection(
            h11.SERVER, max_incomplete_event_size=config.max_request_line + config.max_header_size
        )
        self.access_log = config.access_log and access_logger.isEnabledFor(logging.INFO)
        self.root_path = config.root_path
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.flow: FlowControl = None  # type: ignore[assignment]
        self.client: tuple[str, int] | None = None
        self.server: tuple[str, int] | None = None
        self.scheme = "http"
        self.tls: dict[str, Any] | None = None  # the ASGI tls extension, over TLS
        self.cycle: RequestResponseCycle | None = None
        # Head scanning: True while the next bytes belong to a request head not yet checked
        # complete; a head that spans several reads is kept in ``head`` until it is.
        self.expect_head = True
        self.head = bytearray()
        self.chunks: ChunkScanner | None = None  # checks chunk-size lines of a chunked body
        # Deadlines. Keep-alive is checked lazily: ``idle_since`` (loop time, seconds) is set
        # when the connection goes idle and cleared when bytes arrive, and one timer re-arms
        # itself for what is left, so a busy connection does not pay a call_later per request.
        self.idle_since: float | None = None
        self.keep_alive_timer: asyncio.TimerHandle | None = None
        self.head_timer: asyncio.TimerHandle | None = None  # whole head, from its first byte
        self.body_timer: asyncio.TimerHandle | None = None  # silence while a body arrives

    # Protocol interface

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.state.connections.add(self)
        self.transport = transport
        self.flow = FlowControl(transport)
        self.client = _addr(transport, "peername")
        self.server = _addr(transport, "sockname")
        self.scheme = "https" if transport.get_extra_info("sslcontext") else "http"
        self.tls = tls_extension(transport, self.state)

    # --8<-- [start:data_received]
    def data_received(self, data: bytes) -> None:
        if self.expect_head:
            checked = self.scan_head(data)
            if not checked:
                return  # refused, or only empty lines (the keep-alive timer keeps running)
            data = checked
        elif self.chunks is not None and not self.chunks.done and not self.chunks.feed(data):
            self.send_error(400)
            return
        self.idle_since = None
        if self.body_timer is not None:
            self.body_timer.cancel()
            self.body_timer = None
        self.conn.receive_data(data)
        try:
            self.handle_events()
        except Exception:  # never let one connection's bytes reach the event loop
            logger.exception("unexpected error while handling a request")
            self.transport.close()
    # --8<-- [end:data_received]

    def connection_lost(self, exc: Exception | None) -> None:
        self.state.connections.discard(self)
        for timer in (self.keep_alive_timer, self.head_timer, self.body_timer):
            if timer is not None:
                timer.cancel()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.wake()
        if self.flow is not None:
            self.flow.resume_writing()  # wake a send() waiting on drain; it sees disconnected

    def eof_received(self) -> bool | None:
        # The client closed its side. A FIN looks the same whether it half-closed or went
        # away; like uvicorn we take it as gone: the transport closes and the app sees
        # http.disconnect.
        return None

    def pause_writing(self) -> None:
        self.flow.pause_writing()

    def resume_writing(self) -> None:
        self.flow.resume_writing()

    def shutdown(self) -> None:
        """Graceful shutdown: close now if no response is in flight, else after it."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            self.transport.close()
        else:
            cycle.keep_alive = False

    # Reading requests

    def scan_head(self, data: bytes, fed: bool = False) -> bytes | None:
        """Check head bytes before h11 parses them (``fed``: h11 already holds them).

        Returns the bytes to hand to h11 (leading empty lines dropped: "a server ... SHOULD
        ignore at least one empty line (CRLF) received prior to the request-line", RFC 9112
        §2.2), or None when the request was refused.
        """
        if self.head:
            self.head += data
            buf: bytes | bytearray = self.head
        else:
            while not fed and data[:2] == b"\r\n":
                data = data[2:]
            buf = data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            status = check_partial_head(buf, self.config)
            if status:
                self.send_error(status)
                return None
            if buf is data:
                self.head += data
            return data
        status, chunked = check_head(buf, end, self.config)
        if status:
            self.send_error(status)
            return None
        self.expect_head = False
        if chunked:
            self.chunks = ChunkScanner()
            if not self.chunks.feed(bytes(buf[end + 4:])):
                self.send_error(400)
                return None
        self.head.clear()
        return data

    # --8<-- [start:handle_events]
    def handle_events(self) -> None:
        """Pull events out of h11 until it needs more bytes or we must wait for the app."""
        conn = self.conn
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                self.send_error(exc.error_status_hint)
                return
            kind = type(event)
            if kind is h11.Data:
                cycle = self.cycle
                if cycle is None or cycle.response_complete:
                    continue  # the app answered without reading the body: discard it
                cycle.body += event.data  # type: ignore[union-attr]
                cycle.body_size += len(event.data)  # type: ignore[union-attr]
                max_body = self.config.max_body_size
                if max_body is not None and cycle.body_size > max_body:
                    self.send_error(413)  # chunked bodies; Content-Length is checked earlier
                    return
                if len(cycle.body) > HIGH_WATER_LIMIT:
                    self.flow.pause_reading()
                cycle.wake()
            elif kind is h11.EndOfMessage:
                if conn.our_state is h11.DONE:  # we answered before the body ended
                    if not self.start_next_cycle():
                        return
                    continue
                cycle = self.cycle
                if cycle is not None:
                    cycle.more_body = False
                    cycle.wake()
                # Whatever follows stays in h11's buffer until our response is DONE (RFC 9112
                # §9.3.2: answer pipelined requests in order); nothing is read after a
                # "Connection: close" or HTTP/1.0 request.
                return
            elif kind is h11.Request:
                if not self.on_request(event):  # type: ignore[arg-type]
                    return
            elif event is h11.NEED_DATA:
                if self.expect_head:
                    if self.head and self.head_timer is None:
                        self.head_timer = self.loop.call_later(
                            self.config.timeout_headers, self.on_deadline)
                elif conn.their_state is h11.SEND_BODY and not self.flow.read_paused:
                    self.arm_body_timer()
                return
            elif event is h11.PAUSED:
                # The client sent the next request before we answered this one: stop reading
                # until our response is DONE (RFC 9112 §9.3.2: answer pipelined requests in order).
                self.flow.pause_reading()
                return
            else:  # ConnectionClosed
                return
    # --8<-- [end:handle_events]

    def on_request(self, event: h11.Request) -> bool:
        """Build the ASGI scope and start the app's Task; False when we answered instead."""
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None
        version = event.http_version
        if version[:1] != b"1":
            self.send_error(505)  # RFC 9110 §15.6.6: major version not supported
            return False
        if event.method == b"CONNECT":
            self.send_error(501)
            return False
        state = self.state
        limit = self.config.limit_concurrency
        if limit is not None and (len(state.connections) > limit or len(state.tasks) >= limit):
            logger.warning("exceeded concurrency limit; answering 503")
            self.send_error(503)
            return False
        raw_path, _, query_string = event.target.partition(b"?")
        if raw_path[:1] != b"/" and b"://" in raw_path:
            # absolute-form (RFC 9112 §3.2.2): the path is what follows the authority
            slash = raw_path.find(b"/", raw_path.index(b"://") + 3)
            raw_path = raw_path[slash:] if slash >= 0 else b"/"
        path = raw_path.decode("ascii")
        if "%" in path:
            path = unquote(path)
        root_path = self.root_path
        if root_path:
            path = root_path + path
            raw_path = root_path.encode() + raw_path
        method = event.method
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": "1.0" if version == b"1.0" else "1.1",
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "method": METHODS.get(method) or method.decode("ascii"),
            "root_path": root_path,
            "path": path,
            "raw_path": raw_path,
            "query_string": query_string,
            "headers": [(name.lower(), value) for name, value in event.headers.raw_items()],
            "state": state.lifespan_state.copy(),
        }
        if self.tls is not None:
            scope["extensions"] = {"tls": self.tls}
        self.cycle = cycle = RequestResponseCycle(self, scope)
        task = self.loop.create_task(cycle.run_asgi(self.app))
        cycle.task = task
        if not task.done():  # an eager task factory (Python 3.12+) may have run it to its end
            state.tasks.add(task)  # run_asgi discards it as it ends
        return True

    # --8<-- [start:start_next_cycle]
    def start_next_cycle(self) -> bool:
        """Both sides are DONE: reset h11 for the next request.

        Returns True when h11 already holds bytes of the next request (pipelined) that passed
        ``scan_head``: the caller goes on with ``handle_events``. Otherwise the connection is
        idle and the keep-alive timer runs (or the request was refused).
        """
        self.conn.start_next_cycle()
        self.expect_head = True
        self.chunks = None
        self.flow.resume_reading()
        pending = self.conn.trailing_data[0]
        if pending:
            return self.scan_head(pending, fed=True) is not None
        self.idle_since = self.loop.time()
        if self.keep_alive_timer is None:
            self.keep_alive_timer = self.loop.call_later(
                self.config.timeout_keep_alive, self.on_keep_alive)
        return False
    # --8<-- [end:start_next_cycle]

    def on_response_complete(self) -> None:
        """The response is sent: arm keep-alive and go on with any pipelined request."""
        if self.transport.is_closing():
            return
        if self.conn.their_state is h11.DONE:
            if self.start_next_cycle():
                self.handle_events()
        else:
            # The app answered before reading the whole body: read and discard the rest.
            self.flow.resume_reading()
            self.arm_body_timer()

    # Errors and timeouts

    def on_keep_alive(self) -> None:
        """Close a connection idle for ``timeout_keep_alive`` seconds, silently (RFC 9112 §9.5:
        a server may close an idle connection at any time); if bytes came, wait again."""
        self.keep_alive_timer = None
        if self.idle_since is None:
            return  # busy: re-armed when it next goes idle
        left = self.idle_since + self.config.timeout_keep_alive - self.loop.time()
        if left > 0:
            self.keep_alive_timer = self.loop.call_later(left, self.on_keep_alive)
        else:
            self.transport.close()

    def arm_body_timer(self) -> None:
        """(Re)start the ``timeout_body`` inactivity deadline while a body arrives."""
        if self.body_timer is not None:
            self.body_timer.cancel()
        self.body_timer = self.loop.call_later(self.config.timeout_body, self.on_deadline)

    def on_deadline(self) -> None:
        """The head or the body came too slowly: 408 when no response has started (RFC 9110
        §15.5.9: "the server did not receive a complete request message within the time
        that it was prepared to wait"), then close."""
        self.head_timer = self.body_timer = None
        if self.conn.their_state is h11.DONE:
            self.transport.close()  # the body ended after all (an answered, discarded body)
        else:
            self.send_error(408)

    def send_error(self, status: int) -> None:
        """Answer a request we refuse with ``status`` and ``Connection: close``, then close.

        Sent through h11 while no response has started (our state IDLE or SEND_RESPONSE);
        otherwise there is no valid response left to give, and we only close.
        """
        conn = self.conn
        cycle = self.cycle
        if cycle is not None and cycle.response_complete:
            cycle = None  # a finished request; the refused one is the next on the connection
        if cycle is not None:
            cycle.keep_alive = False
            if cycle.response_started:
                self.transport.close()
                return
        if conn.our_state is h11.IDLE or conn.our_state is h11.SEND_RESPONSE:
            body = b"" if cycle is not None and cycle.head_request else STATUS_PHRASES[status]
            headers = [
                *self.state.default_headers,
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", b"%d" % len(STATUS_PHRASES[status])),
                (b"connection", b"close"),
            ]
            try:
                data = conn.send(h11.Response(
                    status_code=status, headers=headers, reason=STATUS_PHRASES[status]))
                if body:
                    data += conn.send(h11.Data(data=body))
                data += conn.send(END_OF_MESSAGE)
            except h11.LocalProtocolError:
                logger.exception("could not frame a %d response", status)
            else:
                if cycle is not None:
                    cycle.response_started = cycle.response_complete = True
                self.transport.write(data)
        self.transport.close()


# --- the per-request cycle -------------------------------------------------------------------


class RequestResponseCycle:
    """One request: the app's ``receive`` and ``send``, and the task that runs it.

    ``body`` holds request bytes the app has not received yet; ``more_body`` turns False at
    h11's ``EndOfMessage``. The response head is framed when the first body message arrives
    ("the protocol server must not start sending the response to the client until it has
    received at least one Response Body event", ASGI HTTP spec), so a small response leaves in
    one ``transport.write``.
    """

    __slots__ = (
        "protocol", "scope", "conn", "transport", "flow", "body", "body_size", "more_body",
        "body_sent", "waiter", "disconnected", "keep_alive", "head_request", "response",
        "response_started", "response_complete", "send_body", "default_lines", "expect_100",
        "task",
    )

    def __init__(self, protocol: H11Protocol, scope: dict[str, Any]) -> None:
        self.protocol = protocol
        self.scope = scope
        self.conn = protocol.conn
        self.transport = protocol.transport
        self.flow = protocol.flow
        self.body = b""
        self.body_size = 0
        self.more_body = True
        self.body_sent = False  # the app received the message with more_body False
        self.waiter: asyncio.Future[None] | None = None
        self.disconnected = False
        self.keep_alive = True
        self.head_request = scope["method"] == "HEAD"
        self.response: h11.Response | None = None
        self.response_started = False
        self.response_complete = False
        self.send_body = False  # the response may carry a body (not HEAD, 204 or 304)
        self.default_lines = b""  # Date and Server lines the app did not set itself
        self.task: asyncio.Task[None] | None = None
        self.expect_100 = self.conn.they_are_waiting_for_100_continue

    def wake(self) -> None:
        """Wake ``receive()`` if it waits (new body bytes, end of body, disconnect, done)."""
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ASGI interface

    async def run_asgi(self, app: ASGIApp) -> None:
        """Run the app for this request; errors are logged, answered 500 or closed, never raised."""
        try:
            await app(self.scope, self.receive, self.send)
        except BaseException:
            logger.exception("exception in ASGI application")
            if not self.response_started:
                self.protocol.send_error(500)
            elif not self.response_complete:
                self.transport.close()  # a response half sent cannot be finished validly
        else:
            if not self.response_started and not self.disconnected:
                logger.error("ASGI callable returned without starting a response")
                self.protocol.send_error(500)
            elif not self.response_complete and not self.disconnected:
                logger.error("ASGI callable returned without completing the response")
                self.transport.close()
        finally:
            if self.task is not None:
                self.protocol.state.tasks.discard(self.task)

    async def receive(self) -> Message:
        """``http.request`` with the body bytes read so far, or ``http.disconnect``."""
        if self.expect_100 and not self.body and not self.transport.is_closing():
            # RFC 9110 §10.1.1: send 100 only when the app wants the body; h11 cleared the flag
            # if the body already arrived, and never sets it for HTTP/1.0 clients.
            self.expect_100 = False
            if self.conn.they_are_waiting_for_100_continue:
                self.transport.write(self.conn.send(h11.InformationalResponse(
                    status_code=100, headers=[], reason=b"Continue")))
        while not self.disconnected and not self.response_complete and not self.body and (
            self.more_body or self.body_sent
        ):
            if self.flow.read_paused and self.conn.their_state is h11.SEND_BODY:
                self.flow.resume_reading()
                self.protocol.arm_body_timer()
            self.waiter = self.protocol.loop.create_future()
            await self.waiter
            self.waiter = None
        if self.disconnected or self.response_complete or self.body_sent:
            return {"type": "http.disconnect"}
        body = self.body
        self.body = b""
        if not self.more_body:
            self.body_sent = True
        elif self.flow.read_paused and self.conn.their_state is h11.SEND_BODY:
            self.flow.resume_reading()
            self.protocol.arm_body_timer()
        return {"type": "http.request", "body": body, "more_body": self.more_body}

    # --8<-- [start:send]
    async def send(self, message: Message) -> None:
        """Frame ``http.response.start`` / ``http.response.body`` through h11 and write them.

        Raises:
            RuntimeError: a message out of order or of an unknown type.
            h11.LocalProtocolError: invalid status or headers (before anything is written),
                or a body longer or shorter than the app's Content-Length.
        """
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            return
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected 'http.response.start', got {kind!r}")
            status = message["status"]
            headers: Headers = message.get("headers", [])
            state = self.protocol.state
            defaults = state.default_headers_bytes
            for name, _ in headers:
                if name.lower() in DEFAULT_HEADER_NAMES:  # the app's own Date or Server wins
                    taken = {n.lower() for n, _ in headers}
                    defaults = b"".join(b"%s: %s\r\n" % pair for pair in state.default_headers
                                        if pair[0] not in taken)
                    break
            # Built (and validated by h11) now, so a bad header raises before anything is sent.
            self.response = h11_response(status, headers)
            self.default_lines = defaults
            self.response_started = True
            self.send_body = not self.head_request and status not in NO_BODY_STATUSES
            if self.protocol.access_log:
                scope = self.scope
                query = scope["query_string"]
                access_logger.info(
                    '%s:%d - "%s %s%s HTTP/%s" %d', *(self.protocol.client or ("-", 0)),
                    scope["method"], scope["path"], "?" + query.decode("latin-1") if query else "",
                    scope["http_version"], status)
            return
        if kind != "http.response.body" or self.response_complete:
            raise RuntimeError(f"unexpected ASGI message {kind!r} after the response started")
        conn = self.conn
        body = message.get("body", b"")
        more_body = message.get("more_body", False)
        response = self.response
        parts: list[bytes] = []
        if response is not None:  # first body message: the head goes out with it
            self.response = None
            # h11 frames the status line and the app's headers, one piece each; Date and
            # Server are ours, framed once a second (ServerState.default_headers_bytes).
            parts += conn.send_with_data_passthrough(response) or ()
            parts.insert(1, self.default_lines)
        if body and self.send_body:
            parts += conn.send_with_data_passthrough(h11.Data(data=body)) or ()
        if not more_body:
            parts += conn.send_with_data_passthrough(END_OF_MESSAGE) or ()
            self.response_complete = True
        if parts:
            self.transport.write(b"".join(parts))  # one write: head and body leave together
        if self.response_complete:
            self.wake()
            if conn.our_state is h11.MUST_CLOSE or not self.keep_alive:
                self.transport.close()
            else:
                self.protocol.on_response_complete()
    # --8<-- [end:send]


# --- serve() and run() -----------------------------------------------------------------------


async def serve(
    app: ASGIApp,
    config: Config,
    *,
    sock: socket.socket | None = None,
    ready: Any = None,
    shutdown: asyncio.Event | None = None,
) -> None:
    """Serve ``app`` over HTTP/1.1 with h11 until ``shutdown`` is set (or SIGINT/SIGTERM).

    ``sock``: an already bound socket (tests bind port 0); ``ready``: called with the bound
    ``(host, port)``. Raises what ``serve_protocol`` raises (LifespanFailure, OSError).
    """
    await serve_protocol(H11Protocol, app, config, sock=sock, ready=ready, shutdown=shutdown,
                         name="toy-h11")


def run(app: ASGIApp, config: Config) -> None:
    """Block serving ``app`` on the configured event loop (``toyserve --server toy-h11``)."""
    run_server(serve, app, config)
