"""toy-raw: an HTTP/1.1 ASGI server on a plain asyncio.Protocol, with HTTP parsed by hand.

I/O model: one ``asyncio.Protocol`` per TCP connection. ``data_received`` appends the bytes to a
buffer; once it holds a whole request head, the pure functions below check and split it and a
``RequestResponseCycle`` runs the app as a Task. Body bytes (counted by Content-Length or
decoded by ``ChunkedDecoder``) reach the app through ``receive()``; ``send()`` frames the
response with ``http1.ResponseFramer``. One request at a time: a pipelined request waits in the
buffer until the response in flight is complete. The parsers use ``find``/``split``/
``translate``/``re`` on whole byte strings, which run in C, never a Python loop over bytes.

Deliberately left out: the upgrade to WebSocket or h2c, request trailers reaching the app (they
are checked and dropped: ASGI has no event for them), response trailers, decoding any transfer
coding but chunked (others get 501), the CONNECT tunnel, and proxy headers (X-Forwarded-*), and
answering a client that half-closed its side (its FIN counts as a disconnect, as in uvicorn).

Spec: RFC 9112 §2.2 (message parsing), §3 (request line), §5 (field lines), §6 (message body
length), §7.1 (chunked coding), §9 (connection management); RFC 9110 §5.5 and §5.6.2 (field
values, tokens), §10.1.1 (Expect), §15.2 (1xx); ASGI 3.0 HTTP connection scope and events,
spec version 2.4 (https://asgi.readthedocs.io/en/latest/specs/www.html).

Compare with: uvicorn/protocols/http/httptools_impl.py (the same skeleton; there, llhttp does the
parsing this module does by hand).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

from toyservers import asgi, http1
from toyservers._server import HTTPProtocol, ServerState, run_server, serve_protocol
from toyservers._types import ASGIApp, Headers, Message, Scope
from toyservers.config import Config
from toyservers.flow_control import HIGH_WATER_LIMIT
from toyservers.http1 import HEAD_BYTES, TCHAR

logger = logging.getLogger("toyservers.error")

# --8<-- [start:constants]
# ---------------------------------------------------------------------------------- constants

LINGER_SECONDS = 2.0  # after an answer that closes, how long we drain the client's leftovers
HEX_DIGITS = b"0123456789abcdefABCDEF"
# Deadline kinds: one timer per connection, its meaning depends on what we are waiting for.
IDLE, HEAD, BODY, LINGER = "idle", "head", "body", "linger"
# Connection phases: reading a head; reading a body; body read, response in flight; closed.
READ_HEAD, READ_BODY, WAIT_RESPONSE, CLOSED = "head", "body", "wait", "closed"
# ChunkedDecoder states: size -> data -> data-end -> size ... -> trailer -> done
SIZE, DATA, DATA_END, TRAILER, DONE = "size", "data", "data-end", "trailer", "done"
# --8<-- [end:constants]


# ------------------------------------------------------------------------------- wire helpers


class BadRequest(Exception):
    """A request we refuse: answer ``status`` (400, 408, 413, 414, 431, 501, 505) and close."""

    def __init__(self, status: int, reason: str) -> None:  # reason: for the debug log
        super().__init__(reason)
        self.status, self.reason = status, reason


def check_partial_head(buffer: bytes | bytearray, max_request_line: int, max_header_size: int,
                       max_headers: int) -> None:
    """Refuse an unfinished head (no blank line yet) already known to be bad: 414 request line
    too long, 431 too many header bytes or fields, 400 a forbidden byte or a bare CR/LF."""
    line_end = buffer.find(b"\r\n")
    if line_end < 0:
        if len(buffer) > max_request_line + 1:
            raise BadRequest(414, "request line too long")
    elif line_end > max_request_line:
        raise BadRequest(414, "request line too long")
    elif len(buffer) - line_end - 5 > max_header_size:
        raise BadRequest(431, "header block too large")
    elif buffer.count(b"\r\n") > max_headers + 1:
        raise BadRequest(431, "too many header fields")
    # Deleting HEAD_BYTES leaves forbidden bytes and CR/LF: two per CRLF, else a bare CR or LF
    # (RFC 9112 §2.2: we take the strict side of "MAY recognize a single LF as a line end").
    others = len(buffer.translate(None, HEAD_BYTES)) - 2 * buffer.count(b"\r\n")
    if others > 1 or (others == 1 and not buffer.endswith(b"\r")):  # a CR may await its LF
        raise BadRequest(400, "invalid character or bare CR/LF in the request head")


def parse_fields(lines: list[bytes]) -> Headers:
    """Split field lines (RFC 9112 §5: field-name ":" OWS field-value OWS) into ASGI headers.

    400 for obs-fold, no colon, or a name that is not a token, as with whitespace before the
    colon (RFC 9112 §5.1: "A server MUST reject, with a response status code of 400")."""
    headers = []
    for line in lines:
        name, colon, value = line.partition(b":")
        if not colon or not name or name.translate(None, TCHAR):
            if line[:1] in (b" ", b"\t"):  # RFC 9112 §5.2: obs-fold, refused with 400
                raise BadRequest(400, "obsolete line folding or whitespace before a field")
            raise BadRequest(400, "invalid field line" if colon else "field line without a colon")
        headers.append((name.lower(), value.strip(b" \t")))
    return headers


# --8<-- [start:parse_request_head]
def parse_request_head(head: bytes, max_request_line: int = 8192, max_header_size: int = 16384,
                       max_headers: int = 100) -> tuple[str, bytes, str, Headers]:
    """Parse the bytes before the blank line that ends a request head (RFC 9112 §2.1) into
    ``(method, target, "1.1" or "1.0", headers)`` (1.2 and later minors answer as 1.1, RFC 9110
    §6.2). BadRequest: 400 malformed, 414 or 431 over the limits, 505 not HTTP/1."""
    lines = head.split(b"\r\n")
    if len(head.translate(None, HEAD_BYTES)) != 2 * (len(lines) - 1):
        raise BadRequest(400, "invalid character or bare CR/LF in the request head")
    request_line = lines[0]
    if len(request_line) > max_request_line:
        raise BadRequest(414, "request line too long")
    if len(head) - len(request_line) - 2 > max_header_size or len(lines) > max_headers + 1:
        raise BadRequest(431, "header block too large")
    # RFC 9112 §3: request-line = method SP request-target SP HTTP-version (single spaces).
    parts = request_line.split(b" ")
    if len(parts) != 3:
        raise BadRequest(400, "malformed request line")
    method, target, version = parts
    if not method or method.translate(None, TCHAR):
        raise BadRequest(400, "invalid method")
    if not target or not target.isascii() or b"\t" in target:  # forms: http1.split_target
        raise BadRequest(400, "invalid request target")
    if version == b"HTTP/1.1":  # the common case, without the regular expression
        http_version = "1.1"
    else:
        match = http1.HTTP_VERSION.fullmatch(version)
        if match is None:
            raise BadRequest(400, "invalid HTTP version")
        if match[1] != b"1":
            raise BadRequest(505, "HTTP version not supported")
        http_version = "1.0" if match[2] == b"0" else "1.1"
    return method.decode("ascii"), target, http_version, parse_fields(lines[1:])
# --8<-- [end:parse_request_head]


# --8<-- [start:body_framing]
def body_framing(http_version: str, headers: Headers) -> tuple[int | None, bool, bool, bool]:
    """How the request body ends, and whether the connection persists (RFC 9112 §6, §9.3):
    ``(content_length or None, chunked, keep_alive, expect_100)``, the last one when the client
    waits for ``100 Continue`` (RFC 9110 §10.1.1). BadRequest: 400 for bad framing or Host
    (``http1.host_status``), 501 for a coding but chunked (``http1.transfer_coding_status``)."""
    content_length: int | None = None
    hosts: list[bytes] = []
    codings: list[bytes] = []  # the Transfer-Encoding lines: one list (RFC 9110 §5.3)
    connection = expect = b""
    for name, value in headers:
        if name == b"content-length":
            # RFC 9110 §8.6: 1*DIGIT, given once; past 2**63 - 1, "invalid" (RFC 9112 §6.3).
            if content_length is not None or not value.isdigit() or len(value) > 19 \
                    or int(value) > http1.MAX_CONTENT_LENGTH:
                raise BadRequest(400, "invalid or repeated Content-Length")
            content_length = int(value)
        elif name == b"transfer-encoding":
            codings.append(value)
        elif name == b"host":
            hosts.append(value)
        elif name == b"connection":
            connection += b"," + value
        elif name == b"expect":
            expect = value
    if http1.host_status(hosts, http_version):
        raise BadRequest(400, "missing, repeated or invalid Host")
    if codings:
        status = http1.transfer_coding_status(b",".join(codings), http_version,
                                              content_length is not None)
        if status:
            raise BadRequest(status, "a Transfer-Encoding we cannot or may not read")
    # RFC 9112 §9.3: 1.1 persists unless "close"; 1.0 only when it asks for keep-alive.
    tokens = http1.list_elements(connection) if connection else []
    keep_alive = b"close" not in tokens and (http_version == "1.1" or b"keep-alive" in tokens)
    expect_100 = http_version == "1.1" and expect.lower() == b"100-continue"
    return content_length, bool(codings), keep_alive, expect_100
# --8<-- [end:body_framing]


# --8<-- [start:chunked_decoder]
class ChunkedDecoder:
    """Incremental decoder of a chunked request body (RFC 9112 §7.1).

    ``feed(buffer, limit)`` consumes the connection's bytearray until it runs out or ``limit``
    bytes of data are out, and returns the data; once ``done``, the rest is the next request's.
    Trailers (§7.1.2) are checked and dropped. BadRequest: 400 for bad framing or a line over
    ``max_line``, 431 for trailers over ``max_trailer_size`` bytes or ``max_trailers`` lines.
    An offset walks the buffer, which is cut once at the end, and bare hex sizes skip the regex:
    300k one-byte chunks (1.8 MB, 256 KiB reads) took 1.5 s with a ``del`` and a regex per
    chunk, 0.4 s so.
    """

    def __init__(self, max_line: int = http1.MAX_CHUNK_LINE, max_trailer_size: int = 16384,
                 max_trailers: int = 100) -> None:
        self.max_line, self.max_trailer_size, self.max_trailers = max_line, max_trailer_size, \
            max_trailers
        self.state = SIZE
        self.remaining = self.trailer_size = self.trailers = 0  # remaining: of this chunk
        self.done = False

    def feed(self, buffer: bytearray, limit: int = HIGH_WATER_LIMIT) -> bytes:
        out: list[bytearray] = []
        pos, end, got = 0, len(buffer), 0
        state, remaining, max_line = self.state, self.remaining, self.max_line
        while got < limit and state is not DONE:
            if state is SIZE:  # chunk = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
                eol = buffer.find(b"\r\n", pos, pos + max_line)
                if eol < 0:
                    self._line_end(buffer, pos)  # raises if the line can never be valid
                    break
                line = buffer[pos:eol]
                if 0 < eol - pos <= 16 and not line.translate(None, HEX_DIGITS):
                    remaining = int(line, 16)
                else:  # chunk extensions, or an error
                    match = http1.CHUNK_LINE.fullmatch(line)
                    if match is None:
                        raise BadRequest(400, "invalid chunk size line")
                    remaining = int(match[1], 16)
                pos = eol + 2
                state = DATA if remaining else TRAILER
            if state is DATA:
                take = remaining if remaining <= end - pos else end - pos
                out.append(buffer[pos:pos + take])
                pos, got, remaining = pos + take, got + take, remaining - take
                if remaining:
                    break
                state = DATA_END
            if state is DATA_END:
                if not buffer.startswith(b"\r\n", pos):
                    if not b"\r\n".startswith(buffer[pos:pos + 2]):
                        raise BadRequest(400, "chunk data not followed by CRLF")
                    break  # the CRLF has not all come yet
                pos, state = pos + 2, SIZE
            elif state is TRAILER:  # trailer-section = *( field-line CRLF ), then CRLF
                eol = self._line_end(buffer, pos)
                if eol < 0:
                    break
                field, pos = bytes(buffer[pos:eol]), eol + 2
                if not field:
                    state, self.done = DONE, True
                    break
                self.trailer_size += len(field) + 2
                self.trailers += 1
                if self.trailer_size > self.max_trailer_size or self.trailers > self.max_trailers:
                    raise BadRequest(431, "trailer section too large")
                if field.translate(None, HEAD_BYTES):
                    raise BadRequest(400, "invalid character or bare CR/LF in a trailer")
                parse_fields([field])
        del buffer[:pos]
        self.state, self.remaining = state, remaining
        return b"".join(out)

    def _line_end(self, buffer: bytearray, pos: int) -> int:
        """Where the CRLF ending the line at ``pos`` is, -1 until it comes; 400 for a line over
        ``max_line`` bytes (RFC 9112 §7.1.1: a server "ought to limit" extensions) or a bare LF."""
        eol = buffer.find(b"\r\n", pos, pos + self.max_line)
        if eol < 0 and (len(buffer) - pos >= self.max_line or buffer.find(b"\n", pos) >= 0):
            raise BadRequest(400, "chunk line too long, or a bare LF")
        return eol
# --8<-- [end:chunked_decoder]


# -------------------------------------------------------------------------- Protocol interface


class RawHTTPProtocol(HTTPProtocol):
    """One HTTP/1.1 connection: parses requests by hand and runs one RequestResponseCycle each
    (``HTTPProtocol`` does the connection's bookkeeping, flow control and deadline)."""

    __slots__ = ("access_log", "buffer", "phase", "cycle", "body_remaining", "body_received",
                 "decoder", "eof")

    def __init__(self, state: ServerState) -> None:
        super().__init__(state)
        self.access_log = self.config.access_log and asgi.access_logger.isEnabledFor(logging.INFO)
        self.buffer = bytearray()
        self.phase = READ_HEAD
        self.cycle: RequestResponseCycle | None = None
        self.body_remaining = 0  # Content-Length bytes still to read
        self.body_received = 0  # chunked body bytes read so far (for max_body_size)
        self.decoder: ChunkedDecoder | None = None
        self.eof = False

    # --8<-- [start:data_received]
    def data_received(self, data: bytes) -> None:
        if self.phase is CLOSED:  # lingering close: read and drop until the client closes
            return
        if self.deadline.kind is IDLE:  # the keep-alive deadline ends with the first byte
            self.deadline.clear()
        self.buffer += data
        self._parse_buffer()
        if self.phase is WAIT_RESPONSE and len(self.buffer) > HIGH_WATER_LIMIT:
            self.flow.pause_reading()  # pipelined requests wait while a response is in flight
    # --8<-- [end:data_received]

    def _parse_buffer(self) -> None:  # read a head or a body, as the phase says
        try:
            if self.phase is READ_HEAD:
                self._read_head()
            elif self.phase is READ_BODY:
                self._read_body()
        except BadRequest as exc:
            self.send_error(exc.status, exc.reason)
        except http1.BadTarget as exc:
            self.send_error(400, str(exc))

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.phase = CLOSED
        if self.cycle is not None:
            self.cycle.disconnected = True
            self.cycle.wake()

    def eof_received(self) -> None:
        # A FIN cannot tell "done sending" from "gone", and apps wait on http.disconnect to stop
        # work for a client that left: like uvicorn we take it as gone (asyncio then closes).
        self.eof = True

    def shutdown(self) -> None:
        cycle = self.cycle
        if cycle is None or cycle.response_complete or self.phase is CLOSED:
            self.phase = CLOSED
            self.transport.close()
        else:
            cycle.framer.keep_alive = False  # says "Connection: close" if the head is not out

    # --8<-- [start:read_head]
    def _read_head(self) -> None:
        buffer = self.buffer
        # RFC 9112 §2.2: "a server ... SHOULD ignore at least one empty line (CRLF) received
        # prior to the request-line".
        while buffer.startswith(b"\r\n"):
            del buffer[:2]
        end = buffer.find(b"\r\n\r\n")
        config = self.config
        if end < 0:
            check_partial_head(buffer, config.max_request_line, config.max_header_size,
                               config.max_headers)
            if self.deadline.kind is not HEAD:  # the deadline runs from the first byte
                self.deadline.set(HEAD, config.timeout_headers)
            return
        head = bytes(buffer[:end])
        del buffer[: end + 4]
        self.deadline.clear()
        method, target, version, headers = parse_request_head(
            head, config.max_request_line, config.max_header_size, config.max_headers)
        content_length, chunked, keep_alive, expect_100 = body_framing(version, headers)
        raw_path, query = http1.split_target(method, target)
        if config.max_body_size is not None and (content_length or 0) > config.max_body_size:
            raise BadRequest(413, "request body too large")
        if asgi.at_concurrency_limit(self.state):
            self.send_error(503, "at the concurrency limit")
            return
        scope = asgi.http_scope(self, method, version, raw_path, query, headers)
        has_body = chunked or bool(content_length)
        self.cycle = cycle = RequestResponseCycle(self, scope, keep_alive, expect_100 and has_body)
        cycle.start_task(self.app)
        if has_body:
            self.phase = READ_BODY
            self.decoder = ChunkedDecoder(max_trailer_size=config.max_header_size,
                                          max_trailers=config.max_headers) if chunked else None
            self.body_remaining, self.body_received = content_length or 0, 0
            self._read_body()
        else:
            self.phase = WAIT_RESPONSE
            cycle.more_body = False
    # --8<-- [end:read_head]

    # --8<-- [start:read_body]
    def _read_body(self) -> None:
        buffer = self.buffer
        cycle = self.cycle
        assert cycle is not None
        if self.decoder is None:  # Content-Length: take what is there, up to what is left
            data = bytes(buffer[: self.body_remaining])
            del buffer[: len(data)]
            self.body_remaining -= len(data)
            done = self.body_remaining == 0
        else:  # chunked: decode no further than HIGH_WATER_LIMIT bytes waiting for the app
            data = self.decoder.feed(buffer, HIGH_WATER_LIMIT - len(cycle.body))
            self.body_received += len(data)
            limit = self.config.max_body_size
            if limit is not None and self.body_received > limit:
                raise BadRequest(413, "request body too large")
            done = self.decoder.done
        if data and not cycle.response_complete:  # after the response, the rest is discarded
            cycle.body = cycle.body + data if cycle.body else data
        if done:
            self.deadline.clear()
            self.phase = WAIT_RESPONSE
            cycle.more_body = False
            cycle.wake()
            if cycle.response_complete:
                self._next_request()
            return
        if data:
            cycle.wake()
        if len(cycle.body) >= HIGH_WATER_LIMIT:  # the app is behind; the client is not slow
            self.flow.pause_reading()
            self.deadline.clear()
        else:
            self.deadline.set(BODY, self.config.timeout_body)
    # --8<-- [end:read_body]

    def resume_reading(self) -> None:
        """The app wants more body: decode the chunks held back, then read the socket again."""
        if self.phase is READ_BODY and self.decoder is not None and self.buffer:
            self._parse_buffer()
            if self.cycle is not None and len(self.cycle.body) >= HIGH_WATER_LIMIT:
                return
        if self.flow.resume_reading() and self.phase is READ_BODY:
            self.deadline.set(BODY, self.config.timeout_body)

    def on_response_complete(self, cycle: RequestResponseCycle) -> None:
        """Called by the cycle once its last body byte is written."""
        if self.phase is CLOSED:
            return
        if cycle.framer.short:
            logger.error("response body shorter than its Content-Length; closing")
        if not cycle.framer.keep_alive or cycle.framer.short or self.eof:
            self.close()
        elif self.phase is WAIT_RESPONSE:
            self._next_request()
        else:  # still reading a body the app did not want: keep reading, and drop it
            cycle.body = b""
            self.resume_reading()

    def _next_request(self) -> None:
        self.cycle = self.decoder = None
        self.phase = READ_HEAD
        self.resume_reading()
        if self.buffer:
            self._parse_buffer()  # a pipelined request is already here
        else:
            self.deadline.set(IDLE, self.config.timeout_keep_alive)

    def send_error(self, status: int, reason: str = "") -> None:
        logger.debug("%d to %s: %s", status, self.client, reason)
        cycle = self.cycle
        if self.phase is CLOSED:
            return
        if cycle is None or not cycle.framer.head_sent:
            head = cycle is not None and cycle.scope["method"] == "HEAD"
            self.transport.write(http1.error_response(status, self.state.default_headers_bytes,
                                                      head=head))
        self.close()

    def close(self) -> None:
        """Stop reading requests and close: with TCP, half-close and drop what the client still
        sends for LINGER_SECONDS, lest its late bytes get a reset that destroys our last
        response before it is read (RFC 9112 §9.6: servers close in stages)."""
        self.phase = CLOSED
        self.buffer.clear()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.wake()
        if self.transport.can_write_eof() and not self.eof:
            self.transport.write_eof()
            self.flow.resume_reading()
            self.deadline.set(LINGER, LINGER_SECONDS)
        else:
            self.deadline.clear()
            self.transport.close()

    def on_timeout(self, kind: str) -> None:
        if kind is HEAD or kind is BODY:  # RFC 9110 §15.5.9: 408 Request Timeout
            self.send_error(408, f"timed out reading the request {kind}")
        else:  # idle keep-alive or lingering close: close without a word
            self.phase = CLOSED
            super().on_timeout(kind)


# ------------------------------------------------------------------------------ ASGI interface


class RequestResponseCycle(asgi.RequestResponseCycle):
    """One request and its response: the scope, ``receive()`` and ``send()`` given to the app
    (the base class runs the app, ``run_asgi``, and answers its failures)."""

    __slots__ = ("transport", "flow", "framer", "expect_100", "body", "more_body",
                 "request_complete", "waiter")
    protocol: RawHTTPProtocol

    def __init__(self, protocol: RawHTTPProtocol, scope: Scope, keep_alive: bool,
                 expect_100: bool) -> None:
        super().__init__(protocol, scope)
        self.transport, self.flow = protocol.transport, protocol.flow
        self.framer = http1.ResponseFramer(scope["method"] == "HEAD",
                                           scope["http_version"] == "1.0", keep_alive)
        self.expect_100 = expect_100
        self.body = b""  # request body bytes not yet received by the app
        self.more_body = True  # more body bytes will come
        self.request_complete = False
        self.waiter: asyncio.Future[None] | None = None

    def wake(self) -> None:
        """Resume a ``receive()`` waiting for body bytes, the end of the body or a disconnect."""
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self) -> None:
        self.waiter = waiter = self.protocol.loop.create_future()
        self.protocol.resume_reading()  # the app wants more: let the client send it
        await waiter  # at once if resume_reading decoded held-back chunks and woke it

    # --8<-- [start:receive]
    async def receive(self) -> Message:
        if self.expect_100 and not self.disconnected:
            # RFC 9110 §10.1.1: the client waits for 100 before sending the body; we send it
            # once the app asks for the body (never to HTTP/1.0: see body_framing), and only
            # while no byte of the response is out (RFC 9110 §15.2: 1xx precede the final one).
            self.expect_100 = False
            if not self.framer.head_sent:
                self.transport.write(http1.CONTINUE_100)
        # Once the app has the whole body (request_complete), only a disconnect can follow.
        while not (self.disconnected or self.response_complete) and (
                self.request_complete or (self.more_body and not self.body)):
            await self._wait()
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        body, self.body = self.body, b""
        more_body = self.more_body
        if more_body:
            self.protocol.resume_reading()  # may decode more into self.body, for the next call
        else:
            self.request_complete = True
        return {"type": "http.request", "body": body, "more_body": more_body}
    # --8<-- [end:receive]

    # --8<-- [start:send]
    async def send(self, message: Message) -> None:
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            raise asgi.ClientDisconnected("the client has disconnected")
        kind = message["type"]
        framer = self.framer
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected 'http.response.start', got {kind!r}")
            # Checked now, before any byte is out (ResponseError); it leaves with the first body.
            state = self.protocol.state
            framer.start(message["status"], message.get("headers", ()),
                         state.default_headers, state.default_headers_bytes)
            self.response_started = True
            if self.protocol.access_log:
                asgi.log_access(self.protocol.client, self.scope, framer.status)
            return
        if kind != "http.response.body" or self.response_complete:
            raise RuntimeError(f"unexpected ASGI message {kind!r} after the response started")
        more_body = message.get("more_body", False)
        if self.expect_100 and not framer.head_sent and self.protocol.phase is READ_BODY:
            framer.keep_alive = False  # the client may never send the body it offered
        data = framer.body(message.get("body", b""), more_body)
        if data:
            self.transport.write(data)
        if not more_body:
            self.response_complete = True
            self.wake()
            self.protocol.on_response_complete(self)
    # --8<-- [end:send]


# ------------------------------------------------------------------------------------- serve


async def serve(app: ASGIApp, config: Config, *, sock: socket.socket | None = None,
                ready: Callable[[tuple[str, int]], object] | None = None,
                shutdown: asyncio.Event | None = None) -> None:
    """Serve ``app`` until ``shutdown`` is set (or SIGINT/SIGTERM); see ``serve_protocol``."""
    await serve_protocol(RawHTTPProtocol, app, config, sock=sock, ready=ready,
                         shutdown=shutdown, name="toy-raw")


# --------------------------------------------------------------------------------------- run


def run(app: ASGIApp, config: Config) -> None:
    """Block serving ``app`` on the configured event loop (uvloop when available)."""
    run_server(serve, app, config)
