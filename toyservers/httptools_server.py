"""toy-httptools: an HTTP/1.1 ASGI server on asyncio, parsed by llhttp through httptools.

I/O model: one ``asyncio.Protocol`` per connection feeds each chunk it receives to an
``httptools.HttpRequestParser``, which calls back as it meets the request line, each header
field, the end of the head, pieces of body and the end of the message. The server checks what
llhttp lets through, then writes the response framing itself (status line, fields,
Content-Length or chunked). Each request gets a ``RequestResponseCycle`` whose ``run_asgi``
calls the app; requests pipelined on one connection queue up and are answered in order.

Built to be fast: the app starts once the chunk holding its head has been parsed, so a small
body is already there when it calls ``receive()``; the response head waits for the first body
message so both leave in one ``transport.write``; one keep-alive timer stays armed instead
of a new one per request; and the protocol and the cycle use ``__slots__``. Each request still
runs in its own ``asyncio.Task``, as in uvicorn: stepping the app inline to save the Task's few
µs would leave ``asyncio.current_task()`` empty in its first step, and break
``asyncio.timeout()`` and anyio's cancel scopes there.

Deliberately left out: protocol upgrades (an ``Upgrade`` request is answered as plain HTTP,
without its body, and the connection then closes; ``CONNECT`` gets 501), transfer codings
other than chunked (501), request trailers (read and dropped), and what uvicorn adds for
production (proxy headers, WebSockets, reload, ...).

Spec: RFC 9112 §2-§7 (message syntax, request line, fields, message body length, chunked
coding) and §9 (persistence, pipelining); RFC 9110 §5.5 (field values), §8.6
(Content-Length), §10.1.1 (Expect), §15 (status codes); RFC 6585 §5 (431); ASGI HTTP spec 2.4
and Lifespan spec 2.0 (https://asgi.readthedocs.io/en/latest/specs/).

Compare with: uvicorn/protocols/http/httptools_impl.py and flow_control.py.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from collections import deque
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

import httptools

from toyservers._server import ServerState, run_server, serve_protocol, tls_extension
from toyservers._types import ASGIApp, Message, Receive, Scope, Send
from toyservers.config import Config
from toyservers.flow_control import HIGH_WATER_LIMIT, FlowControl

# --- constants --------------------------------------------------------------------------------

logger = logging.getLogger("toyservers.error")
access_logger = logging.getLogger("toyservers.access")

IDLE, HEAD, BODY = 0, 1, 2  # where the parser is in the current request


def _status_line(code: int) -> bytes:
    try:
        return b"HTTP/1.1 %d %s\r\n" % (code, HTTPStatus(code).phrase.encode())
    except ValueError:
        return b"HTTP/1.1 %d \r\n" % code


STATUS_LINE = {code: _status_line(code) for code in range(100, 600)}
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
CLOSE = b"connection: close\r\n"
KEEP_ALIVE = b"connection: keep-alive\r\n"
CHUNKED = b"transfer-encoding: chunked\r\n"
LAST_CHUNK = b"0\r\n\r\n"
# Request fields the server reads itself; the app gets all of them anyway.
FRAMING = frozenset({b"host", b"content-length", b"transfer-encoding", b"expect"})
RESPONSE_SPECIAL = frozenset(
    {b"content-length", b"transfer-encoding", b"connection", b"date", b"server"})
# RFC 9110 §5.6.2: token = 1*tchar (methods, field names).
TCHAR = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
# RFC 9110 §5.5: field values hold VCHAR, obs-text, SP and HTAB; no other control.
bad_value = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]").search
# llhttp's reason for "PRI * HTTP/2.0", the HTTP/2 preface, sent to an HTTP/1 parser.
H2_PREFACE = "Pause on PRI/Upgrade"

# --- wire helpers -----------------------------------------------------------------------------


def is_token(data: bytes) -> bool:
    """True when ``data`` is a non-empty RFC 9110 §5.6.2 token."""
    return bool(data) and not data.translate(None, TCHAR)


_checked_names: set[bytes] = set()  # response field names already found to be tokens


def error_response(status: int, default_headers: bytes) -> bytes:
    """A whole plain-text error response that ends the connection (RFC 9112 §9.6)."""
    reason = HTTPStatus(status).phrase.encode()
    return b"%s%scontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n%s\r\n%s" % (
        STATUS_LINE[status], default_headers, len(reason), CLOSE, reason)


def split_target(url: bytes) -> tuple[bytes, bytes]:
    """``(raw_path, query_string)`` of a request-target in origin-, absolute- or asterisk-form
    (RFC 9112 §3.2). Raises httptools.HttpParserInvalidURLError when it is malformed."""
    if url[:1] == b"/" and b"#" not in url:
        raw_path, _, query = url.partition(b"?")
        return raw_path, query
    if url == b"*":
        return url, b""
    parsed = httptools.parse_url(url)
    return parsed.path or b"/", parsed.query or b""


class _Rejected(Exception):
    """Raised in a parser callback to stop llhttp; the status is in ``error_status``."""


# --- the protocol -----------------------------------------------------------------------------


class HttpToolsProtocol(asyncio.Protocol):
    """One connection: llhttp callbacks in, RequestResponseCycles answered in order out."""

    # Slots: CPython 3.11 keeps its fast attribute paths only for instances with at most 30
    # attributes in their __dict__; this class has more, and slots keep every access fast.
    __slots__ = (
        "state", "app", "config", "loop", "parser", "access_log", "max_headers",
        "max_header_size", "max_body", "transport", "flow", "client", "server", "scheme", "tls",
        "pipeline", "running", "driving", "reading_stopped", "pending_error", "error_status",
        "idle_handle", "idle_since", "deadline_handle", "head_started", "body_active",
        "phase", "messages", "chunk_size", "trailer_size", "url", "headers", "head_seen",
        "head_bound", "body_size", "hosts", "te", "content_length", "expect", "cycle",
    )

    def __init__(self, state: ServerState) -> None:
        config: Config = state.config
        self.state, self.app, self.config = state, state.app, config
        self.loop = asyncio.get_running_loop()
        self.parser = httptools.HttpRequestParser(self)
        # llhttp refuses any version but 0.9/1.0/1.1/2.0 with one generic error; letting every
        # DIGIT.DIGIT through lets on_headers_complete tell 505 from 400 and serve 1.2 as 1.1.
        self.parser.set_dangerous_leniencies(lenient_version=True)
        self.access_log = config.access_log and access_logger.isEnabledFor(logging.INFO)
        self.max_headers, self.max_header_size = config.max_headers, config.max_header_size
        self.max_body = config.max_body_size
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.flow: FlowControl = None  # type: ignore[assignment]
        self.client: tuple[str, int] | None = None
        self.server: tuple[str, int] | None = None
        self.scheme = "http"
        self.tls: dict[str, Any] | None = None  # the ASGI tls extension, over TLS
        self.pipeline: deque[RequestResponseCycle] = deque()  # parsed, waiting their turn
        self.running: RequestResponseCycle | None = None  # the one whose response goes out
        self.driving = False
        self.reading_stopped = False  # after Connection: close, an upgrade, EOF or an error
        self.pending_error = 0  # status to answer once the responses queued before it are out
        self.error_status = 0
        self.idle_handle: asyncio.TimerHandle | None = None
        self.idle_since = 0.0
        self.deadline_handle: asyncio.TimerHandle | None = None
        self.head_started = self.body_active = 0.0
        # the request being parsed
        self.phase = IDLE
        self.messages = 0
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunk_size = self.head_seen = self.head_bound = self.body_size = self.hosts = 0
        self.trailer_size = 0
        self.te: bytes | None = None
        self.content_length: bytes | None = None
        self.expect = False
        self.cycle: RequestResponseCycle | None = None

    # Protocol interface

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.state.connections.add(self)
        self.transport = transport
        self.flow = FlowControl(transport)
        peer, here = transport.get_extra_info("peername"), transport.get_extra_info("sockname")
        self.client = (peer[0], peer[1]) if isinstance(peer, tuple) else None
        self.server = (here[0], here[1]) if isinstance(here, tuple) else None
        self.scheme = "https" if transport.get_extra_info("sslcontext") else "http"
        self.tls = tls_extension(transport, self.state)

    # --8<-- [start:data_received]
    def data_received(self, data: bytes) -> None:
        if self.reading_stopped:
            return  # RFC 9112 §9.6: nothing after the last request (or a bad one) is read
        phase, messages = self.phase, self.messages
        self.chunk_size = len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # the upgrade request was parsed; what follows is another protocol: dropped
        except httptools.HttpParserError as exc:
            if not self.reading_stopped:  # else llhttp refused bytes after Connection: close
                self.reject(self.status_for(exc, data, phase, messages))
        if self.running is None and self.pipeline:
            self.drive()
        if self.phase != IDLE and not self.reading_stopped:
            self.watch(len(data), phase, messages)
    # --8<-- [end:data_received]

    def eof_received(self) -> bool | None:
        # The client closed its side. Most clients send FIN only when they go away, so do as
        # uvicorn: let asyncio close the transport; connection_lost tells the app.
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.state.connections.discard(self)
        self.reading_stopped = True
        for handle in (self.idle_handle, self.deadline_handle):
            if handle is not None:
                handle.cancel()
        self.pipeline.clear()
        if self.running is not None:
            self.running.disconnected = True
            self.running.wake()
        if self.flow is not None:
            self.flow.resume_writing()

    def pause_writing(self) -> None:
        self.flow.pause_writing()

    def resume_writing(self) -> None:
        self.flow.resume_writing()

    def shutdown(self) -> None:
        """Graceful shutdown: close now if idle, else after the response in flight."""
        self.reading_stopped = True
        self.pipeline.clear()
        if self.running is None:
            self.transport.close()
        else:
            self.running.keep_alive = False

    # Parser callbacks, in wire order

    # --8<-- [start:head_callbacks]
    def on_message_begin(self) -> None:
        self.phase = HEAD
        self.messages += 1
        self.url = b""
        self.headers = []
        self.head_seen = self.head_bound = self.body_size = self.hosts = 0
        self.head_started = 0.0
        self.te = self.content_length = None
        self.expect = False

    def on_url(self, url: bytes) -> None:
        self.url += url
        # RFC 9112 §3: a request-target longer than the server will parse gets 414. The
        # method, two spaces and "HTTP/1.1" count towards the request line too.
        limit = self.config.max_request_line - 10
        if len(self.url) > limit and len(self.url) + len(self.parser.get_method()) > limit:
            self.fail(414)

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()  # ASGI: header names are lowercased
        if value and value[-1] in (32, 9):  # SP, HTAB
            value = value.rstrip(b" \t")  # RFC 9112 §5.1: trailing OWS is not in the value
        headers = self.headers
        headers.append((name, value))
        if len(headers) > self.max_headers:
            self.fail(431)  # RFC 6585 §5 (the size of the head: on_headers_complete)
        if self.phase == BODY:  # a trailer field (RFC 9112 §7.1.2): its section is limited too
            self.trailer_size += len(name) + len(value) + 4
            if self.trailer_size > self.max_header_size:
                self.fail(431)
        if name in FRAMING:
            if name == b"host":
                self.hosts += 1
            elif name == b"content-length":
                self.content_length = value  # llhttp checked it: 1*DIGIT, only one
            elif name == b"transfer-encoding":
                self.te = value  # llhttp refused a second Transfer-Encoding line
            elif value.lower() == b"100-continue":
                self.expect = True
    # --8<-- [end:head_callbacks]

    def on_headers_complete(self) -> None:
        # RFC 6585 §5: a header block over the limit gets 431. This head came in the chunks
        # counted in head_bound and the current one, so add up its fields only when those
        # could hold that much (watch() refuses a head still unfinished past the limit).
        max_size = self.max_header_size
        if self.head_bound + self.chunk_size > max_size and sum(
                len(name) + len(value) + 4 for name, value in self.headers) > max_size:
            self.fail(431)
        parser = self.parser
        version = parser.get_http_version()
        if version != "1.1":
            if version == "0.9":
                self.fail(400)  # RFC 9112 §3: the version is required; no HTTP/0.9 here
            if version[0] != "1":
                self.fail(505)  # RFC 9110 §15.6.6: another major version
            if version != "1.0":
                version = "1.1"  # RFC 9110 §6.2: a higher 1.x minor is served as 1.1
        if version == "1.1" and self.hosts != 1:
            self.fail(400)  # RFC 9112 §3.2: no Host, or several, MUST get 400
        if self.te is not None:
            # RFC 9112 §6.1: Transfer-Encoding in 1.0 is faulty framing; chunked must be
            # last and applied once (§6.3 rule 4: 400); other codings we cannot undo: 501.
            codings = [c.strip().lower() for c in self.te.split(b",") if c.strip()]
            if version == "1.0" or codings[-1:] != [b"chunked"] or codings.count(b"chunked") > 1:
                self.fail(400)
            if len(codings) > 1:
                self.fail(501)
        if self.max_body is not None and self.content_length is not None:
            if int(self.content_length) > self.max_body:
                self.fail(413)  # RFC 9110 §15.5.14: refused before the body is read
        method = parser.get_method().decode("ascii")
        keep_alive = parser.should_keep_alive()  # RFC 9112 §9.3, HTTP/1.0 rules included
        if parser.should_upgrade():
            if method == "CONNECT":
                self.fail(501)
            keep_alive = False  # the Upgrade is ignored (RFC 9110 §7.8); llhttp drops its body
        raw_path, query = split_target(self.url)
        path = raw_path.decode("ascii")  # llhttp lets no byte above 0x7f into a target
        if "%" in path:
            path = unquote(path)  # the ASGI path is percent-decoded UTF-8
        root_path = self.config.root_path
        state = self.state
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": version,
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "method": method,
            "root_path": root_path,
            "path": root_path + path,
            "raw_path": root_path.encode() + raw_path if root_path else raw_path,
            "query_string": query,
            "headers": self.headers,
            "state": state.lifespan_state.copy(),
        }
        if self.tls is not None:
            scope["extensions"] = {"tls": self.tls}
        app = self.app
        limit = self.config.limit_concurrency
        if limit is not None and (len(state.connections) > limit or len(state.tasks) >= limit):
            app = service_unavailable
        # RFC 9110 §10.1.1: 100 (Continue) only when a body is expected, and never to 1.0.
        expect = self.expect and version == "1.1" and (
            self.te is not None or self.content_length not in (None, b"0"))
        self.cycle = cycle = RequestResponseCycle(self, app, scope, keep_alive, expect)
        self.pipeline.append(cycle)
        self.phase = BODY
        self.headers = []  # trailers, if any, land here and are dropped
        self.trailer_size = 0

    # --8<-- [start:body_callbacks]
    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        assert cycle is not None
        if self.max_body is not None:
            self.body_size += len(body)
            if self.body_size > self.max_body:
                self.fail(413)
        cycle.body.append(body)
        cycle.body_len += len(body)
        if cycle.body_len > HIGH_WATER_LIMIT:
            self.flow.pause_reading()
        if cycle.waiter is not None:
            cycle.wake()

    def on_message_complete(self) -> None:
        cycle = self.cycle
        assert cycle is not None
        cycle.more_body = False
        if cycle.waiter is not None:
            cycle.wake()
        self.phase = IDLE
        if not cycle.keep_alive:
            self.reading_stopped = True  # RFC 9112 §9.6: the last request on this connection
    # --8<-- [end:body_callbacks]

    # Bad requests and slow clients

    def fail(self, status: int) -> None:
        """Stop llhttp from inside a callback; ``data_received`` then answers ``status``."""
        self.error_status = status
        raise _Rejected(status)

    def status_for(self, exc: Exception, data: bytes, phase: int, messages: int) -> int:
        """The status for a parser error: ours when a callback refused, else by llhttp's kind."""
        if self.error_status:
            return self.error_status
        if isinstance(exc, httptools.HttpParserInvalidMethodError):
            # RFC 9110 §9.1: an unknown method is 501, a method that is no token is 400. Its
            # bytes can be read only when this chunk began the request.
            if phase == IDLE and self.messages == messages + 1:
                method, space, _ = data.lstrip(b"\r\n").partition(b" ")
                if space and is_token(method):
                    return 501
            return 400
        return 505 if str(exc) == H2_PREFACE else 400

    def reject(self, status: int) -> None:
        """Answer ``status`` with Connection: close once the responses queued before it are
        out; nothing after the bad request is read (RFC 9112 §6.3: "respond with a 400 (Bad
        Request) status code and then close the connection")."""
        self.reading_stopped = True
        self.pending_error = status
        if self.phase == BODY:  # the bad bytes were the body of self.cycle
            cycle = self.cycle
            assert cycle is not None
            if cycle is self.running:
                cycle.disconnected = True
                cycle.wake()
                self.running = None
                if cycle.response_started:
                    self.transport.close()  # too late for an error response
                    return
            else:
                self.pipeline.pop()  # its app never ran: drop it
        self.phase = IDLE
        if self.running is None and not self.driving:
            self.drive()

    def watch(self, size: int, phase: int, messages: int) -> None:
        """After a chunk that left a request unfinished: start its deadline; count a head
        that spans chunks (llhttp keeps partial fields to itself until they end).

        ``head_seen`` counts the chunks that were head from their first byte, to refuse a head
        still unfinished past the limit; ``head_bound`` counts every chunk that held part of
        the head, an upper bound for on_headers_complete."""
        now = self.loop.time()
        if self.phase == HEAD:
            self.head_bound += size  # this chunk held some of the head, maybe all of it
            if not self.head_started:
                self.head_started = now
            # The whole chunk is head when the head was under way or began in an idle parser.
            if phase != BODY and self.messages == messages + (phase == IDLE):
                self.head_seen += size
                if self.head_seen > self.max_header_size:
                    self.reject(431)
                    return
        else:
            self.body_active = now
        if self.deadline_handle is None:
            self.deadline_handle = self.loop.call_later(
                min(self.config.timeout_headers, self.config.timeout_body), self.on_deadline)

    def on_deadline(self) -> None:
        """Header deadline from the head's first chunk (408); body inactivity deadline (408 if
        no response started, else just close). RFC 9110 §15.5.9."""
        self.deadline_handle = None
        if self.transport.is_closing() or self.phase == IDLE:
            return
        now = self.loop.time()
        if self.phase == HEAD:
            left = self.head_started + self.config.timeout_headers - now
        elif self.flow.read_paused:  # we stopped reading, the client did not stall
            left, self.body_active = self.config.timeout_body, now
        else:
            left = self.body_active + self.config.timeout_body - now
        if left > 0:
            self.deadline_handle = self.loop.call_later(left, self.on_deadline)
        else:
            self.reject(408)

    def on_idle(self) -> None:
        """Keep-alive timeout: close a connection idle since its last response. uvicorn arms
        and cancels a timer per request; that costs ~2 µs in uvloop, so one timer stays armed
        and re-arms itself for what is left of the idle time."""
        self.idle_handle = None
        if self.running is not None or self.pipeline or self.phase != IDLE:
            return  # busy: the next response end arms it again
        left = self.idle_since + self.config.timeout_keep_alive - self.loop.time()
        if left > 0:
            self.idle_handle = self.loop.call_later(left, self.on_idle)
        else:
            self.transport.close()

    # Running the queue

    # --8<-- [start:drive]
    def drive(self) -> None:
        """Run queued cycles in order; when none is left, answer a pending error or go idle."""
        self.driving = True
        try:
            while self.running is None and self.pipeline:
                cycle = self.running = self.pipeline.popleft()
                self.start(cycle)
        finally:
            self.driving = False
        if self.running is not None:
            if self.pipeline:
                self.flow.pause_reading()  # RFC 9112 §9.3.2: answer in order, read no further
        elif self.transport.is_closing():
            pass
        elif self.pending_error:
            self.transport.write(error_response(self.pending_error,
                                                self.state.default_headers_bytes))
            self.transport.close()
        elif not self.reading_stopped:
            self.flow.resume_reading()
            if self.phase == IDLE:
                self.idle_since = self.loop.time()
                if self.idle_handle is None:
                    self.idle_handle = self.loop.call_later(
                        self.config.timeout_keep_alive, self.on_idle)

    def start(self, cycle: RequestResponseCycle) -> None:
        """Run the app for ``cycle`` in its own asyncio Task (its own contextvars copy, and a
        ``current_task()`` for ``asyncio.timeout`` and anyio), kept in ``state.tasks`` so a
        graceful shutdown can wait for it."""
        cycle.task = task = self.loop.create_task(cycle.run_asgi())
        if not task.done():  # an eager task factory (Python 3.12+) may have run it to its end
            self.state.tasks.add(task)  # run_asgi discards it as it ends
    # --8<-- [end:drive]

    def on_response_complete(self, cycle: RequestResponseCycle) -> None:
        if cycle is self.running:
            self.running = None
            if not self.driving:
                self.drive()


# --- the per-request cycle --------------------------------------------------------------------


class RequestResponseCycle:
    """One request and its response: the ``receive`` and ``send`` of one app call."""

    __slots__ = ("protocol", "transport", "app", "scope", "keep_alive", "expect_100", "body",
                 "body_len", "more_body", "body_done", "waiter", "disconnected",
                 "response_started", "response_complete", "head", "chunked", "no_body",
                 "remaining", "task")  # slots: the fastest attribute access in CPython

    def __init__(self, protocol: HttpToolsProtocol, app: ASGIApp, scope: Scope,
                 keep_alive: bool, expect_100: bool) -> None:
        self.protocol, self.transport, self.app, self.scope = (
            protocol, protocol.transport, app, scope)
        self.keep_alive, self.expect_100 = keep_alive, expect_100
        self.body: list[bytes] = []  # received, not yet handed to the app
        self.body_len = 0  # bytes in self.body
        self.more_body = True  # more request body is still to come from the client
        self.body_done = False  # the last http.request message was handed to the app
        self.waiter: asyncio.Future[None] | None = None  # receive() waiting for body
        self.disconnected = self.response_started = self.response_complete = False
        self.head: bytes | None = None  # the response head, written with the first body
        self.chunked = self.no_body = False  # how the response body is framed
        self.remaining: int | None = None  # Content-Length bytes still owed
        self.task: asyncio.Task[None] | None = None  # the Task running run_asgi

    def wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    # ASGI interface

    async def run_asgi(self) -> None:
        """Call the app; an error before the response starts is a 500, after it a close."""
        try:
            await self.app(self.scope, self.receive, self.send)
        except BaseException as exc:  # the app's failures never reach the server
            logger.error("Exception in ASGI application", exc_info=exc)
        else:
            if not (self.response_complete or self.disconnected):
                logger.error("ASGI app returned without %s the response",
                             "completing" if self.response_started else "starting")
        finally:
            self.protocol.state.tasks.discard(self.task)  # nothing awaits past this point
        if self.disconnected or self.response_complete:
            return
        if not self.response_started:
            self.response_started = True
            self.transport.write(error_response(500, self.protocol.state.default_headers_bytes))
            self.keep_alive = False
            self.complete()
        else:
            self.disconnected = True
            self.transport.close()  # RFC 9112 §6.3: the response cannot be ended properly

    async def receive(self) -> Message:
        if self.expect_100:
            self.expect_100 = False
            # RFC 9110 §10.1.1: the client holds the body until it sees 100; send it once the
            # app asks for the body, unless some body came anyway.
            if not self.body and self.more_body and not self.response_started:
                self.transport.write(CONTINUE)
        # Wait while nothing is buffered and either more body is coming or the last message
        # was already handed over (then only http.disconnect is left to report).
        while not self.body and (self.more_body or self.body_done) and not (
                self.disconnected or self.response_complete):
            if not self.protocol.pipeline:
                self.protocol.flow.resume_reading()
            self.waiter = self.protocol.loop.create_future()
            await self.waiter
            self.waiter = None
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        body = b"".join(self.body)
        self.body.clear()
        self.body_len = 0
        if not self.more_body:
            self.body_done = True
        elif self.protocol.flow.read_paused and not self.protocol.pipeline:
            self.protocol.flow.resume_reading()
        return {"type": "http.request", "body": body, "more_body": self.more_body}

    # --8<-- [start:send]
    async def send(self, message: Message) -> None:
        if self.protocol.flow.write_paused and not self.disconnected:
            await self.protocol.flow.drain()
        if self.disconnected:
            return
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected 'http.response.start', got {kind!r}")
            self.start_response(message["status"], message.get("headers", ()))
            return
        if kind != "http.response.body" or self.response_complete:
            raise RuntimeError(f"unexpected {kind!r} after the response head")
        body = message.get("body", b"")
        more_body = message.get("more_body", False)
        if self.no_body:
            data = b""
        elif self.chunked:  # RFC 9112 §7.1: size in hex, CRLF, data, CRLF; 0 CRLF CRLF ends
            data = b"%x\r\n%s\r\n" % (len(body), body) if body else b""
            if not more_body:
                data += LAST_CHUNK
        else:
            data = body
            if self.remaining is not None:
                self.remaining -= len(body)
                if self.remaining < 0:
                    raise RuntimeError("response body longer than its Content-Length")
        if self.head is not None:
            data, self.head = self.head + data, None
        if data:
            self.transport.write(data)
        if not more_body:
            if self.remaining:
                raise RuntimeError("response body shorter than its Content-Length")
            self.complete()
    # --8<-- [end:send]

    def start_response(self, status: int, headers: Iterable[tuple[bytes, bytes]]) -> None:
        """Build the response head (RFC 9112 §4, §6, §9.6); it leaves with the first body."""
        self.response_started = True
        self.expect_100 = False
        status_line = STATUS_LINE.get(status)
        if status_line is None:
            raise RuntimeError(f"invalid HTTP status {status!r}")
        parts = [status_line]
        own_date = own_server = app_chunked = False
        for name, value in headers:
            name = name.lower()
            if name not in _checked_names:
                if not is_token(name):
                    raise RuntimeError(f"invalid response header name {name!r}")
                if len(_checked_names) < 1024:
                    _checked_names.add(name)
            if bad_value(value):  # a CR or LF here would let the app forge header lines
                raise RuntimeError(f"invalid value for response header {name!r}")
            if name in RESPONSE_SPECIAL:
                if name == b"content-length":
                    if not value.isdigit():
                        raise RuntimeError(f"invalid Content-Length {value!r}")
                    self.remaining = int(value)
                elif name == b"transfer-encoding":
                    app_chunked = value.lower() == b"chunked"
                elif name == b"connection":
                    if b"close" in [t.strip() for t in value.lower().split(b",")]:
                        self.keep_alive = False
                elif name == b"date":
                    own_date = True
                else:
                    own_server = True
            parts += (name, b": ", value, b"\r\n")
        state = self.protocol.state
        if own_date or own_server:  # RFC 9110 §6.6.1: the app's own Date or Server wins
            for name, value in state.default_headers:
                if not ((name == b"date" and own_date) or (name == b"server" and own_server)):
                    parts.append(b"%s: %s\r\n" % (name, value))
        else:
            parts.append(state.default_headers_bytes)
        scope = self.scope
        http10 = scope["http_version"] == "1.0"
        if scope["method"] == "HEAD" or status in (204, 304) or status < 200:
            self.no_body = True  # RFC 9110 §6.4.1; HEAD keeps the Content-Length it was given
            self.remaining = None
        elif app_chunked or (self.remaining is None and not http10):
            self.chunked, self.remaining = True, None
            if not app_chunked:
                parts.append(CHUNKED)
        elif self.remaining is None:
            self.keep_alive = False  # RFC 9112 §6.3 rule 8: HTTP/1.0 body ends at the close
        if not self.keep_alive:
            parts.append(CLOSE)
        elif http10:
            parts.append(KEEP_ALIVE)  # RFC 9112 Appendix C.2.2: 1.0 needs to be told
        parts.append(b"\r\n")
        self.head = b"".join(parts)
        if self.protocol.access_log:
            client = scope["client"] or ("-", 0)
            query = scope["query_string"].decode("latin-1")
            access_logger.info('%s:%d - "%s %s%s HTTP/%s" %d', client[0], client[1],
                               scope["method"], scope["path"], "?" + query if query else "",
                               scope["http_version"], status)

    def complete(self) -> None:
        """The response is out: close if it was the last one, then let the next one run."""
        self.response_complete = True
        if self.waiter is not None:
            self.wake()
        protocol = self.protocol
        # A body the app did not read to its end leaves the stream unframed: close.
        if not self.keep_alive or self.more_body:
            protocol.reading_stopped = True
            protocol.pipeline.clear()
            self.transport.close()
        protocol.on_response_complete(self)


async def service_unavailable(scope: Scope, receive: Receive, send: Send) -> None:
    """The app past ``config.limit_concurrency``: 503 (RFC 9110 §15.6.4), then close."""
    await send({"type": "http.response.start", "status": 503,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", b"19"), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": b"Service Unavailable"})


# --- entry points -----------------------------------------------------------------------------


async def serve(app: ASGIApp, config: Config, *, sock: socket.socket | None = None,
                ready: Callable[[tuple[str, int]], object] | None = None,
                shutdown: asyncio.Event | None = None) -> None:
    """Serve ``app`` until ``shutdown`` is set (or SIGINT/SIGTERM); see ``serve_protocol``.

    Raises LifespanFailure when the app's startup fails, OSError when binding fails.
    """
    await serve_protocol(HttpToolsProtocol, app, config, sock=sock, ready=ready,
                         shutdown=shutdown, name="toy-httptools")


def run(app: ASGIApp, config: Config) -> None:
    """Block serving ``app`` with ``config`` on the configured event loop until stopped."""
    run_server(serve, app, config)
