"""toy-httptools: an HTTP/1.1 ASGI server on asyncio, parsed by llhttp through httptools.

I/O model: one ``asyncio.Protocol`` per connection feeds what it receives to an
``httptools.HttpRequestParser``, which calls back (``RequestReader``) for the request line,
each field, the end of the head, pieces of body and the end of the message; what llhttp lets
through is checked with the shared HTTP/1.1 rules (``toyservers.http1``). Each request gets the
shared ``RequestResponseCycle`` (``toyservers.http1_cycle``, framing with ``ResponseFramer``),
its app in its own Task; pipelined requests are answered in order, reading paused meanwhile.

Built to be fast: the app starts once the read holding its head is parsed, so a small body is
there when it calls ``receive()``; the response head leaves with the first body in one
``transport.write``; one ``Deadline`` timer per connection; ``__slots__`` everywhere.

WebSocket: ``handle_upgrade`` calls ``websocket_protocol.upgrade``; ``--ws auto`` is our own
engine, the faster: a 1 KiB text echo over 10 connections cost 17.0 µs of server CPU a
message, wsproto's 30.5 (26.3k against 14.7k messages/s).

Deliberately left out: other protocol upgrades (an ``Upgrade`` that is no WebSocket handshake
is answered as HTTP/1.1, then the connection closes; toy-h2 takes h2c), ``CONNECT`` (501),
transfer codings but chunked (501), request trailers (dropped), uvicorn's extras,
``http.response.debug``; ``sendfile(2)`` under TLS and before trailers: a file body is read
in pieces there.

Spec: RFC 9112 §2-§7 (syntax, target forms, fields, body length, chunked), §9 (persistence,
pipelining); RFC 9110 §5.5, §7.8, §8.6, §10.1.1, §15; RFC 6585 §5; RFC 6455 §4.2; RFC 8297; ASGI
HTTP (its Trailers, Early Hints, Path Send, Zero Copy Send: the shared ``http1_cycle``) and
WebSocket 2.4, Lifespan 2.0 (asgi.readthedocs.io/en/latest/specs).

Compare with: uvicorn/protocols/http/httptools_impl.py and flow_control.py.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import httptools

from toyservers import asgi_extensions, http1, websocket_protocol
from toyservers._server import run_server, serve_protocol
from toyservers._types import ASGIApp, Scope
from toyservers.asgi import at_concurrency_limit, http_scope
from toyservers.config import Config
from toyservers.http1 import FRAGMENT, HIGH_WATER_LIMIT, MAX_CHUNK_LINE, ResponseFramer
from toyservers.http1_cycle import HTTP1Protocol, RequestResponseCycle
from toyservers.state import ServerState

# --- Constants ------------------------------------------------------------------------------------

NO_MESSAGE, IN_HEAD, IN_BODY = 0, 1, 2  # where llhttp is: between messages, in a head, in a body
FRAMING = frozenset({b"host", b"content-length", b"transfer-encoding", b"expect", b"te"})
H2_PREFACE = "Pause on PRI/Upgrade"  # llhttp's reason for "PRI * HTTP/2.0", HTTP/2's preface
CHUNK_LINE_LIMIT = MAX_CHUNK_LINE + 2  # with its CRLF
WS_ENGINE = "toyservers"  # --ws auto: our RFC 6455 engine, the faster (module docstring)
MAX_TURN = 64 * 1024  # bytes parsed a loop turn (~30 ms of 1-byte chunks), then others run


class _StopParsing(Exception):
    """Raised in a parser callback to stop llhttp; the status is in ``error_status``."""


# --- Protocol interface ---------------------------------------------------------------------------


class RequestReader(HTTP1Protocol):
    """The reading half of toy-httptools' protocol: the callbacks llhttp calls as it parses,
    in wire order, which check each request against our contract (RFC 9112, ``http1``'s
    rules), build its scope and queue its ``RequestResponseCycle`` in ``pipeline``; a
    callback refuses with ``stop_parsing(status)``. ``HttpToolsProtocol`` feeds llhttp and
    answers the queue in order."""

    # CPython 3.11 reads instance attributes at a fixed index only while the instance dict
    # shares its keys (30 at most); past that, a cached dict index. Slots: a fixed offset.
    __slots__ = (
        "parser", "max_headers", "max_header_size", "max_body", "pipeline", "driving",
        "reading_stopped", "queued_error", "error_status", "phase", "messages", "piece",
        "trailer_size", "url", "headers", "head_seen", "body_size", "framing", "line_bytes",
        "hosts", "te", "content_length", "expect", "parsing", "good_host", "trailers",
    )

    def __init__(self, state: ServerState) -> None:
        super().__init__(state)
        config: Config = state.config
        self.parser = httptools.HttpRequestParser(self)
        # Any DIGIT.DIGIT through: on_headers_complete tells 505 from 400, serves 1.2 as 1.1.
        self.parser.set_dangerous_leniencies(lenient_version=True)
        self.max_headers, self.max_header_size = config.max_headers, config.max_header_size
        self.max_body = config.max_body_size
        self.pipeline: deque[RequestResponseCycle] = deque()  # parsed, waiting their turn
        # self.cycle (HTTP1Protocol): the request whose response goes out
        self.parsing: RequestResponseCycle | None = None  # the last request whose head ended
        # reading_stopped: after Connection: close, an upgrade, EOF or an error; queued_error:
        # to answer once the responses before it are out; error_status: a callback's refusal
        self.driving = self.reading_stopped = False
        self.queued_error = self.error_status = self.line_bytes = self.trailer_size = 0
        self.piece = self.good_host = b""  # the bytes being parsed; the last valid Host
        self.headers: list[tuple[bytes, bytes]] = []  # the request being parsed: see
        self.hosts: list[bytes] = []  # on_message_begin
        self.te: bytes | None = None
        self.content_length: bytes | None = None
        self.messages = 0
        self.on_message_begin()
        self.phase, self.messages = NO_MESSAGE, 0

    # --8<-- [start:head_callbacks]
    def on_message_begin(self) -> None:
        self.phase, self.url, self.headers, self.hosts = IN_HEAD, b"", [], []
        self.messages += 1
        self.head_seen = self.body_size = self.framing = 0
        self.te = self.content_length = None
        self.expect = self.trailers = False  # Expect: 100-continue; TE lists trailers

    def on_url(self, url: bytes) -> None:
        self.url += url  # RFC 9112 §3: a request line too long to parse gets 414
        limit = self.config.max_request_line - 10
        if len(self.url) > limit and len(self.url) + len(self.parser.get_method()) > limit:
            self.stop_parsing(414)

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()  # ASGI: header names are lowercased
        if value and value[-1] in (32, 9):  # SP, HTAB
            value = value.rstrip(b" \t")  # RFC 9112 §5.1: trailing OWS is not in the value
        headers = self.headers
        headers.append((name, value))
        if len(headers) > self.max_headers:
            self.stop_parsing(431)  # RFC 6585 §5 (the size of the head: on_headers_complete)
        if self.phase == IN_BODY:  # a trailer field (RFC 9112 §7.1.2): its section is limited too
            self.trailer_size += len(name) + len(value) + 4
            if self.trailer_size > self.max_header_size:
                self.stop_parsing(431)
        if name in FRAMING:
            if name == b"host":
                self.hosts.append(value)
            elif name == b"content-length":
                self.content_length = value  # llhttp checked it: 1*DIGIT, only one
            elif name == b"transfer-encoding":  # RFC 9110 §5.3: lines combine with commas
                self.te = value if self.te is None else self.te + b"," + value
            elif name == b"te":  # RFC 9110 §10.1.4: may the response carry trailers?
                self.trailers = self.trailers or asgi_extensions.accepts_trailers(value)
            elif value.lower() == b"100-continue":
                self.expect = True
    # --8<-- [end:head_callbacks]

    def on_headers_complete(self) -> None:
        # RFC 6585 §5: a header block over the limit gets 431; add up its fields only when
        # the slices that held it (head_seen, the one it began in, this one) could be so big.
        max_size = self.max_header_size
        if self.head_seen + MAX_CHUNK_LINE + len(self.piece) > max_size and sum(
                len(name) + len(value) + 4 for name, value in self.headers) > max_size:
            self.stop_parsing(431)
        parser = self.parser
        version, hosts, te = parser.get_http_version(), self.hosts, self.te
        # Checking a client's Host once per connection saves ~4,000 instructions a request.
        if version != "1.1" or te is not None or len(hosts) != 1 or hosts[0] != self.good_host \
                or (self.max_body is not None and self.content_length is not None):
            status, version = http1.head_status(version, hosts, te, self.content_length,
                                                self.max_body)
            if status:
                self.stop_parsing(status)
            self.good_host = hosts[0] if hosts else self.good_host
        method = parser.get_method().decode("ascii")
        if method == "CONNECT":
            self.stop_parsing(501)  # RFC 9110 §9.3.6: CONNECT is for proxies
        # RFC 9112 §9.3 (1.0 rules too); an Upgrade is ignored (RFC 9110 §7.8) and llhttp
        # drops what follows it: then the connection closes
        keep_alive = parser.should_keep_alive() and not parser.should_upgrade()
        url = self.url  # origin-form, split_target's first case, inline: 117.0k -> 116.4k
        if url[:1] == b"/" and FRAGMENT not in url:  # instructions per request (callgrind)
            raw_path, _, query = url.partition(b"?")
        else:
            try:
                raw_path, query = http1.split_target(method, url)
            except http1.BadTarget:
                self.stop_parsing(400)  # RFC 9112 §3.2: none of the four request-target forms
        scope = http_scope(self, method, version, raw_path, query, self.headers, self.trailers)
        # RFC 9110 §10.1.1: 100 (Continue) only when a body is expected, and never to 1.0.
        expect = self.expect and version == "1.1" and (
            te is not None or self.content_length not in (None, b"0"))
        self.parsing = cycle = RequestResponseCycle(
            self, scope, ResponseFramer(method == "HEAD", version == "1.0", keep_alive), expect)
        self.pipeline.append(cycle)
        if te is not None:  # a chunk-size line comes first
            self.framing, self.line_bytes = CHUNK_LINE_LIMIT, 0
        self.phase = IN_BODY
        self.headers = []  # trailers, if any, land here and are dropped
        self.trailer_size = 0

    # --8<-- [start:body_callbacks]
    def on_body(self, body: bytes) -> None:
        cycle = self.parsing
        assert cycle is not None
        self.framing = 0  # chunk data, not a line
        self.body_size += len(body)
        if self.max_body is not None and self.body_size > self.max_body:
            self.stop_parsing(413)
        if cycle.response_complete:
            return  # answered already: RFC 9112 §9.3, the rest is read and dropped
        cycle.body += body  # b"" + body is body itself; the rest is bounded by the pause
        if len(cycle.body) > HIGH_WATER_LIMIT:
            self.flow.pause_reading()
        if cycle.waiter is not None:
            cycle.wake()

    def on_message_complete(self) -> None:
        cycle = self.parsing
        assert cycle is not None
        cycle.more_body = False
        if cycle.waiter is not None:
            cycle.wake()
        self.phase = NO_MESSAGE
        if not cycle.framer.keep_alive:
            self.reading_stopped = True  # RFC 9112 §9.6: the last request on this connection
    # --8<-- [end:body_callbacks]

    def on_chunk_header(self) -> None:
        # A chunk-size line begun in an earlier slice ends at this slice's first LF.
        if self.line_bytes and self.line_bytes + self.piece.find(b"\n") >= CHUNK_LINE_LIMIT:
            self.stop_parsing(400)
        self.framing, self.line_bytes = self.max_header_size, 0  # trailers, if the last chunk

    def on_chunk_complete(self) -> None:
        self.framing, self.line_bytes = CHUNK_LINE_LIMIT, 0  # the next chunk-size line

    # Bad requests and slow clients

    def stop_parsing(self, status: int) -> None:
        """Stop llhttp from inside a callback; ``data_received`` then refuses with ``status``."""
        self.error_status = status
        raise _StopParsing(status)

    def status_for(self, exc: Exception, data: bytes, phase: int, messages: int) -> int:
        """The status for a parser error: ours when a callback refused, else by llhttp's kind."""
        if self.error_status:
            return self.error_status
        if isinstance(exc, httptools.HttpParserInvalidMethodError):
            # RFC 9110 §9.1: an unknown method 501, one that is no token 400 (readable here
            # only when this slice began the request).
            if phase == NO_MESSAGE and self.messages == messages + 1:
                method, space, _ = data.lstrip(b"\r\n").partition(b" ")
                if space and http1.is_token(method):
                    return 501
            return 400
        if str(exc) == H2_PREFACE and self.messages == 1:  # the connection's first bytes
            # (the slices before this one held the preface's first head_seen bytes)
            seen = http1.H2_PREFACE_BYTES[:self.head_seen]
            return 0 if self.handle_upgrade(None, seen + data) else 505
        return 400

    # --8<-- [start:handle_upgrade]
    def handle_upgrade(self, scope: Scope | None, data: bytes) -> bool:
        """The one hook for handing this connection to another protocol; True when it did.

        Called with ``scope``, the request's, when llhttp parsed a request asking ``Upgrade``
        (RFC 9110 §7.8) that is the only one in flight, ``data`` the bytes after it; and with
        ``scope`` None when the connection opens with HTTP/2's preface (RFC 9113 §3.4: built to
        fail as an HTTP/1.1 request), ``data`` the preface and what followed. A WebSocket
        handshake is taken (``websocket_protocol.upgrade``, on ``WS_ENGINE``); False for the
        rest: an Upgrade is answered as HTTP/1.1 (then the connection closes, ``data``
        unread), the preface gets 505. A subclass that takes the connection calls
        ``stop_reading()`` and ``switch_protocol(new, data)`` (toy-h2: h2c and prior
        knowledge); bytes read after ``data`` go to the new protocol too."""
        if scope is None or at_concurrency_limit(self.state):  # drive() answers 503
            return False
        return websocket_protocol.upgrade(self, scope, data, auto=WS_ENGINE)
    # --8<-- [end:handle_upgrade]


class HttpToolsProtocol(RequestReader):
    """One connection: llhttp fed, RequestResponseCycles answered in order (``RequestReader``:
    the callbacks; ``HTTP1Protocol``: the cycle and the close path; ``HTTPProtocol``: the
    bookkeeping)."""

    __slots__ = ()

    # --8<-- [start:data_received]
    def data_received(self, data: bytes) -> None:
        if self.reading_stopped:
            return  # RFC 9112 §9.6: nothing after the last request (or a bad one) is read
        if self.held:  # earlier bytes wait for their turn: these queue behind them
            self.held += data
            return
        if len(data) > MAX_CHUNK_LINE:  # in slices no longer than a chunk-size line (watch)
            data, rest = data[:MAX_TURN], data[MAX_TURN:]  # the rest waits for the next turn
            for at in range(0, len(data), MAX_CHUNK_LINE):
                self.data_received(data[at:at + MAX_CHUNK_LINE])
                if self.reading_stopped:  # the rest is never read, unless another protocol
                    successor = self.transport.get_protocol()  # took the connection over
                    if successor is not self and (rest := data[at + MAX_CHUNK_LINE:] + rest):
                        successor.data_received(rest)
                    return
            if rest:
                self.hold(rest)
            return
        phase, messages = self.phase, self.messages
        self.piece = data
        try:
            self.parser.feed_data(data)  # RequestReader's callbacks run inside feed_data
        except httptools.HttpParserUpgrade as exc:  # the upgrade request was parsed
            cycle = self.parsing
            if cycle is not None and self.cycle is None and list(self.pipeline) == [cycle]:
                self.handle_upgrade(cycle.scope, data[exc.args[0]:])  # the only one in flight
        except httptools.HttpParserError as exc:
            if not self.reading_stopped:  # else llhttp refused bytes after Connection: close
                if status := self.status_for(exc, data, phase, messages):
                    self.refuse(status)
        if self.phase != NO_MESSAGE and not self.reading_stopped:
            self.watch(data, phase, messages)
        if self.pipeline:
            if self.cycle is None:
                self.drive()
            else:  # RFC 9112 §9.3.2: answered in order; read no more while they wait
                self.flow.pause_reading()
    # --8<-- [end:data_received]

    def keep_paused(self) -> bool:
        parsing = self.parsing  # requests waiting their turn, or an app behind on its body
        return bool(self.pipeline) or (parsing is not None and len(parsing.body) > HIGH_WATER_LIMIT)

    def shutdown(self) -> None:
        """Close now if idle; else finish the request in flight (and its body) with
        Connection: close, reading no other request."""
        self.pipeline.clear()  # their apps never ran
        cycle = self.cycle
        if cycle is None:
            return self.close_idle()
        cycle.framer.keep_alive = False
        if not (cycle is self.parsing and self.phase == IN_BODY):
            self.reading_stopped = True

    def on_timeout(self, kind: str) -> None:
        """``idle``: close when nothing is in flight; a slow ``head`` or ``body``: 408 (RFC
        9110 §15.5.9), or a close when the response already began."""
        if kind == "idle":
            if self.cycle is None and not self.pipeline and self.phase == NO_MESSAGE:
                super().on_timeout(kind)
        elif kind == "body" and self.phase == IN_BODY and self.flow.read_paused:
            self.deadline.set("body", self.config.timeout_body)  # we paused, not the client
        elif self.phase == (IN_HEAD if kind == "head" else IN_BODY):
            self.refuse(408)

    def stop_reading(self) -> None:
        self.reading_stopped = True
        self.pipeline.clear()  # their apps never ran

    def refuse(self, status: int) -> None:
        """Read nothing more, and ``send_error(status)`` once the responses queued before
        this request are out (RFC 9112 §9.3.2, §6.3)."""
        self.reading_stopped = True
        if self.phase == IN_BODY:  # the bad bytes were the body of self.parsing
            cycle = self.parsing
            if cycle is self.cycle:
                self.phase = NO_MESSAGE
                return self.send_error(status)
            if cycle in self.pipeline:  # its app never ran: drop it and those after it
                while self.pipeline.pop() is not cycle:
                    pass
        self.phase = NO_MESSAGE
        self.queued_error = status
        if self.cycle is None and not self.driving:
            self.drive()

    def watch(self, data: bytes, phase: int, messages: int) -> None:
        """After a slice that left a request unfinished: start its deadline; bound what llhttp
        reads silently. A head: ``head_seen`` adds up the slices that were all head (431 past
        the limit). A chunked body: the chunk-size line or trailer field open after the slice's
        last LF may not outgrow ``framing`` (RFC 9112 §7.1)."""
        size = len(data)
        if self.phase == IN_HEAD:
            if phase != IN_BODY and self.messages == messages + (phase == NO_MESSAGE):  # all head
                self.head_seen += size
                if self.head_seen > self.max_header_size:
                    self.refuse(431)
                    return
            if phase != IN_HEAD or self.messages != messages:  # this head began in this slice
                self.deadline.set("head", self.config.timeout_headers)
            return
        self.deadline.set("body", self.config.timeout_body)  # inactivity: moved each slice
        if self.framing:
            lf = data.rfind(b"\n")
            self.line_bytes = (self.line_bytes if lf < 0 else 0) + size - lf - 1
            if self.line_bytes > self.framing:
                self.refuse(400)

    # --8<-- [start:drive]
    def drive(self) -> None:
        """Run queued cycles in order; when none is left, answer a queued error or go idle."""
        self.driving = True
        while self.cycle is None and self.pipeline:
            cycle = self.cycle = self.pipeline.popleft()
            if self.config.limit_concurrency is not None and at_concurrency_limit(self.state):
                self.driving = False
                return self.send_error(503)  # RFC 9110 §15.6.4, as uvicorn's limit_concurrency
            cycle.start_task(self.app)
        self.driving = False
        if self.cycle is not None:
            if self.pipeline:
                self.flow.pause_reading()  # RFC 9112 §9.3.2: answer in order, read no further
        elif self.transport.is_closing():
            pass
        elif self.queued_error:
            self.send_error(self.queued_error)
        elif not self.reading_stopped:
            if self.flow.read_paused:
                self.flow.resume_reading()
            if self.phase == NO_MESSAGE:
                self.deadline.set("idle", self.config.timeout_keep_alive)
    # --8<-- [end:drive]

    # --- ASGI interface ---------------------------------------------------------------------------
    # The shared RequestResponseCycle's hooks (toyservers.http1_cycle); its framer: ResponseFramer.

    # --8<-- [start:cycle_hooks]
    def on_response_complete(self) -> None:
        """The response is out: close if it was the last one, then let the next one run (a body
        the app left unread is read and dropped first: ``on_body``)."""
        cycle = self.cycle
        assert cycle is not None
        if not cycle.framer.keep_alive:
            self.stop_reading()
            self.lingering_close()
        self.cycle = None
        if self.driving:
            return  # drive() is running: it goes on with the next one
        if self.pipeline or self.queued_error or self.reading_stopped or self.flow.read_paused:
            self.drive()
        elif self.phase == NO_MESSAGE:  # drive()'s usual last step, without the call to it:
            self.deadline.set("idle", self.config.timeout_keep_alive)  # 1.0k instructions less

    def resume_reading(self) -> None:
        if not self.pipeline and not self.held:  # else pipelined requests or bytes held back
            self.flow.resume_reading()  # keep reading paused: next_turn resumes it

    def unread_body(self) -> int | None:
        length = self.content_length  # unknown for a chunked body (RFC 9112 §6.3: TE wins)
        return None if length is None or self.te else int(length) - self.body_size
    # --8<-- [end:cycle_hooks]


# --- Serving --------------------------------------------------------------------------------------


async def serve(app: ASGIApp, config: Config, **options: Any) -> None:
    """Serve ``app`` until ``shutdown`` is set (or SIGINT/SIGTERM). The options (``sock``,
    ``ready``, ``shutdown``, ``stop_accepting``) and the errors are ``serve_protocol``'s."""
    await serve_protocol(HttpToolsProtocol, app, config, name="toy-httptools", **options)


def run(app: ASGIApp, config: Config) -> None:
    """Block serving ``app`` on the configured event loop (``toyserve --server toy-httptools``)."""
    run_server(serve, app, config)
