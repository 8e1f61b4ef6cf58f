"""toy-raw: an HTTP/1.1 ASGI server on a plain asyncio.Protocol, with HTTP parsed by hand.

I/O model: one ``asyncio.Protocol`` per TCP connection. ``data_received`` appends the bytes to a
buffer; when the buffer holds a whole request head (everything up to the first blank line) the
head is checked and split by the small pure functions below (``check_partial_head``,
``parse_request_head``, ``body_framing``, ``split_target``), an ASGI ``RequestResponseCycle`` is
made, and its ``run_asgi`` runs as a Task. Body bytes (counted by Content-Length or decoded by
``ChunkedDecoder``) are handed to the app through ``receive()``; ``send()`` frames the response.
One request is served at a time: bytes of a pipelined next request wait in the buffer until the
response in flight is complete, so responses can never interleave. These parsers work on
whole byte strings with ``find``/``split``/``translate``/``re``, which run in C; a loop over
single bytes in Python would be many times slower.

Deliberately left out: the upgrade to WebSocket or h2c, request trailers reaching the app (they
are checked and dropped: ASGI has no event for them), response trailers, decoding any transfer
coding but chunked (others get 501), the CONNECT tunnel, and proxy headers (X-Forwarded-*), and
answering a client that half-closed its side (its FIN counts as a disconnect, as in uvicorn).

Spec: RFC 9112 §2.2 (message parsing), §3 (request line), §5 (field lines), §6 (message body
length), §7.1 (chunked coding), §9 (connection management); RFC 9110 §5.5 and §5.6.2 (field
values, tokens), §6.6.1 (Date), §10.1.1 (Expect), §15 (status codes); ASGI 3.0 HTTP connection
scope and events, spec version 2.4 (https://asgi.readthedocs.io/en/latest/specs/www.html).

Compare with: uvicorn/protocols/http/httptools_impl.py (the same skeleton; there, llhttp does the
parsing this module does by hand).
"""

from __future__ import annotations

import asyncio
import http
import logging
import re
import socket
from typing import Any
from urllib.parse import unquote

from toyservers._server import ServerState, run_server, serve_protocol, tls_extension
from toyservers._types import ASGIApp, Headers, Message
from toyservers.config import Config
from toyservers.flow_control import HIGH_WATER_LIMIT, FlowControl

logger = logging.getLogger("toyservers.error")
access_logger = logging.getLogger("toyservers.access")

# --8<-- [start:constants]
# ---------------------------------------------------------------------------------- constants

MAX_CHUNK_LINE = 4096  # bytes in one chunk-size line, extensions included
LINGER_SECONDS = 2.0  # after an answer that closes, how long we drain the client's leftovers

# RFC 9110 §5.6.2: token = 1*tchar; a byte string is a token when deleting these leaves nothing.
TCHAR = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
# The bytes a head may hold besides its CRLF line ends: HTAB, SP, VCHAR and obs-text (RFC 9110
# §5.5: field-vchar = VCHAR / obs-text). Deleting them with bytes.translate leaves only the
# forbidden bytes (NUL, other controls, DEL) and CR/LF; if what is left is exactly two bytes per
# CRLF, there is no forbidden byte and no bare CR or LF (RFC 9112 §2.2: a bare CR is invalid; we
# take the strict side of "a recipient MAY recognize a single LF as a line terminator").
HEAD_BYTES = b"\t" + bytes(range(0x20, 0x7F)) + bytes(range(0x80, 0x100))
# RFC 9112 §2.3: HTTP-version = "HTTP/" DIGIT "." DIGIT
HTTP_VERSION = re.compile(rb"HTTP/([0-9])\.([0-9])")
# RFC 9112 §3.2 with RFC 3986 §3.2.2: Host = uri-host [ ":" port ]
HOST_VALUE = re.compile(rb"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9\-._~!$&'()*+,;=%]*)(?::[0-9]*)?")
# RFC 9112 §7.1: chunk-size [ chunk-ext ] CRLF, where
#   chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
#   chunk-ext-val = token / quoted-string    (quoted-string: RFC 9110 §5.6.4)
_TOKEN = rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+"
_QUOTED = rb'"(?:[\t !#-\[\]-~\x80-\xff]|\\[\t -~\x80-\xff])*"'
CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})(?:[ \t]*;[ \t]*%s(?:[ \t]*=[ \t]*(?:%s|%s))?)*"
                        % (_TOKEN, _TOKEN, _QUOTED))
STATUS_LINES = {s.value: b"HTTP/1.1 %d %s\r\n" % (s.value, s.phrase.encode())
                for s in http.HTTPStatus}
CONTINUE_100 = b"HTTP/1.1 100 Continue\r\n\r\n"
# Timer kinds: one timer per connection, its meaning depends on what we are waiting for.
IDLE, HEAD, BODY, LINGER = "idle", "head", "body", "linger"
# Connection phases: reading a head; reading a body; body read, response in flight; closed.
READ_HEAD, READ_BODY, WAIT_RESPONSE, CLOSED = "head", "body", "wait", "closed"
# --8<-- [end:constants]


# ------------------------------------------------------------------------------- wire helpers


class BadRequest(Exception):
    """A request we must refuse: answer ``status`` (400, 408, 413, 414, 431, 501, 505) and close.

    ``reason`` is a short text for the response body and the debug log.
    """

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class ClientDisconnected(OSError):
    """Raised by ``send()`` once the client is gone: since HTTP spec version 2.4, ASGI lets a
    server raise a server-specific ``OSError`` subclass from ``send()`` on a closed connection."""


def check_partial_head(buffer: bytes | bytearray, max_request_line: int, max_header_size: int,
                       max_headers: int) -> None:
    """Refuse an unfinished head (no blank line yet) that is already known to be bad.

    ``buffer`` holds the bytes received so far; the limits are in bytes and fields.
    Raises BadRequest: 414 request line too long, 431 too many header bytes or fields,
    400 a forbidden byte or a bare CR/LF (a trailing CR may still become a CRLF).
    """
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
    others = len(buffer.translate(None, HEAD_BYTES)) - 2 * buffer.count(b"\r\n")
    if others > 1 or (others == 1 and not buffer.endswith(b"\r")):  # a CR may await its LF
        raise BadRequest(400, "invalid character or bare CR/LF in the request head")


def parse_fields(lines: list[bytes]) -> Headers:
    """Split field lines (RFC 9112 §5: field-name ":" OWS field-value OWS), CRLFs removed.

    Returns ASGI headers: (lowercased name, value without surrounding SP/HTAB), in order. The
    caller has already refused forbidden bytes (see ``HEAD_BYTES``). Raises BadRequest(400) for
    obs-fold or leading whitespace, no colon, or a name that is not a token; that includes
    whitespace before the colon (RFC 9112 §5.1: "No whitespace is allowed between the field
    name and colon. ... A server MUST reject, with a response status code of 400").
    """
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
    """Parse a request head: the bytes before the blank line that ends it (RFC 9112 §2.1).

    ``head`` excludes the final CRLFCRLF. Returns ``(method, target, http_version, headers)``:
    method as sent (``"GET"``), target as sent (bytes), ``"1.1"`` or ``"1.0"`` (HTTP/1.2 and
    later minors answer as 1.1, RFC 9110 §6.2), headers as ASGI pairs in order.
    Raises BadRequest: 400 malformed, 414 request line over ``max_request_line`` bytes,
    431 fields over ``max_header_size`` bytes or ``max_headers`` lines, 505 major version not 1.
    """
    lines = head.split(b"\r\n")
    if len(head.translate(None, HEAD_BYTES)) != 2 * (len(lines) - 1):
        raise BadRequest(400, "invalid character or bare CR/LF in the request head")
    request_line = lines[0]
    if len(request_line) > max_request_line:
        raise BadRequest(414, "request line too long")
    if len(head) - len(request_line) - 2 > max_header_size:
        raise BadRequest(431, "header block too large")
    if len(lines) > max_headers + 1:
        raise BadRequest(431, "too many header fields")
    # RFC 9112 §3: request-line = method SP request-target SP HTTP-version (single spaces).
    parts = request_line.split(b" ")
    if len(parts) != 3:
        raise BadRequest(400, "malformed request line")
    method, target, version = parts
    if not method or method.translate(None, TCHAR):
        raise BadRequest(400, "invalid method")
    if not target or not target.isascii() or b"\t" in target or b"#" in target:
        raise BadRequest(400, "invalid request target")
    if version == b"HTTP/1.1":  # the common case, without the regular expression
        http_version = "1.1"
    else:
        match = HTTP_VERSION.fullmatch(version)
        if match is None:
            raise BadRequest(400, "invalid HTTP version")
        if match[1] != b"1":
            raise BadRequest(505, "HTTP version not supported")
        http_version = "1.0" if match[2] == b"0" else "1.1"
    return method.decode("ascii"), target, http_version, parse_fields(lines[1:])
# --8<-- [end:parse_request_head]


# --8<-- [start:body_framing]
def body_framing(http_version: str, headers: Headers) -> tuple[int | None, bool, bool, bool]:
    """Decide how the request body ends and whether the connection persists (RFC 9112 §6, §9.3).

    Returns ``(content_length, chunked, keep_alive, expect_continue)``: the body length in bytes
    (None when chunked or absent), whether the body is chunked, whether the connection may serve
    another request, whether the client waits for ``100 Continue`` (RFC 9110 §10.1.1).
    Raises BadRequest: 400 for ambiguous or malformed framing, a missing, repeated or invalid
    Host (RFC 9112 §3.2); 501 for a transfer coding other than chunked (RFC 9112 §6.1).
    """
    content_length: int | None = None
    transfer_encoding: bytes | None = None
    host: bytes | None = None
    hosts = 0
    connection = expect = b""
    for name, value in headers:
        if name == b"content-length":
            # RFC 9110 §8.6: Content-Length = 1*DIGIT; duplicates and lists are refused here.
            if content_length is not None:
                raise BadRequest(400, "more than one Content-Length")
            if not value.isdigit() or len(value) > 18:
                raise BadRequest(400, "invalid Content-Length")
            content_length = int(value)
        elif name == b"transfer-encoding":
            transfer_encoding = value if transfer_encoding is None else b"%s,%s" % (
                transfer_encoding, value)
        elif name == b"host":
            host, hosts = value, hosts + 1
        elif name == b"connection":
            connection += b"," + value.lower()
        elif name == b"expect":
            expect = value
    # RFC 9112 §3.2: "A server MUST respond with a 400 (Bad Request) status code to any HTTP/1.1
    # request message that lacks a Host header field and to any request message that contains
    # more than one Host header field line or a Host header field with an invalid field value."
    if hosts > 1 or (http_version == "1.1" and hosts == 0):
        raise BadRequest(400, "missing or repeated Host")
    if host is not None and HOST_VALUE.fullmatch(host) is None:
        raise BadRequest(400, "invalid Host")
    chunked = False
    if transfer_encoding is not None:
        # RFC 9112 §6.1: both at once is how requests are smuggled; we may reject it, and do.
        if content_length is not None:
            raise BadRequest(400, "both Transfer-Encoding and Content-Length")
        # RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing.
        if http_version == "1.0":
            raise BadRequest(400, "Transfer-Encoding in an HTTP/1.0 request")
        codings = [c.strip(b" \t").lower() for c in transfer_encoding.split(b",")]
        codings = [c for c in codings if c]  # RFC 9110 §5.6.1: empty list elements are ignored
        # RFC 9112 §6.3: "If a Transfer-Encoding header field is present in a request and the
        # chunked transfer coding is not the final encoding ... the server MUST respond with
        # the 400 (Bad Request) status code and then close the connection."
        if not codings or codings[-1] != b"chunked":
            raise BadRequest(400, "final transfer coding is not chunked")
        if b"chunked" in codings[:-1]:  # RFC 9112 §7: never applied more than once
            raise BadRequest(400, "chunked applied more than once")
        if len(codings) > 1:
            raise BadRequest(501, "transfer coding not implemented")
        chunked = True
    if http_version == "1.1":  # RFC 9112 §9.3: 1.1 persists unless "close"; 1.0 only if asked
        keep_alive = not connection or b"close" not in _tokens(connection)
    else:
        keep_alive = b"keep-alive" in _tokens(connection) and b"close" not in _tokens(connection)
    expect_continue = http_version == "1.1" and expect.lower() == b"100-continue"
    return content_length, chunked, keep_alive, expect_continue
# --8<-- [end:body_framing]


def _tokens(value: bytes) -> list[bytes]:
    """The elements of a comma-separated list field (RFC 9110 §5.6.1), stripped of OWS."""
    return [item.strip(b" \t") for item in value.split(b",")]


def split_target(method: str, target: bytes) -> tuple[bytes, bytes]:
    """Split a request-target (RFC 9112 §3.2) into ``(raw_path, query_string)``.

    Accepts origin-form (``/p?q``), absolute-form (``http://host/p?q``, whose path is used),
    asterisk-form (``*``, OPTIONS only) and authority-form (CONNECT only, kept whole).
    Raises BadRequest(400) for any other shape.
    """
    if target[:1] == b"/":
        path, _, query = target.partition(b"?")
        return path, query
    if target == b"*" and method == "OPTIONS":
        return target, b""
    scheme, sep, rest = target.partition(b"://")
    if sep and scheme.lower() in (b"http", b"https"):  # the path starts after the authority
        authority_and_path, _, query = rest.partition(b"?")
        slash = authority_and_path.find(b"/")
        return (authority_and_path[slash:] if slash >= 0 else b"/"), query
    if method == "CONNECT":
        return target, b""
    raise BadRequest(400, "invalid request target")


# --8<-- [start:chunked_decoder]
class ChunkedDecoder:
    """Incremental decoder of a chunked request body (RFC 9112 §7.1).

    ``feed(buffer)`` consumes from the connection's bytearray as much as it can and returns the
    chunk data found (possibly ``b""``). Once ``done`` is true, what is left in the buffer
    belongs to the next request. Trailer fields (RFC 9112 §7.1.2) are checked, then dropped.
    Raises BadRequest: 400 for a malformed size line, extension, terminator or trailer, and for
    a line over ``max_line`` bytes; 431 for trailers over ``max_trailer_size`` bytes or
    ``max_trailers`` lines.
    """

    def __init__(self, max_line: int = MAX_CHUNK_LINE, max_trailer_size: int = 16384,
                 max_trailers: int = 100) -> None:
        self.max_line = max_line
        self.max_trailer_size = max_trailer_size
        self.max_trailers = max_trailers
        self.state = "size"  # size -> data -> data-end -> size ... -> trailer -> done
        self.remaining = 0  # bytes of chunk-data still to come in the current chunk
        self.trailer_size = 0
        self.trailers = 0
        self.done = False

    def feed(self, buffer: bytearray) -> bytes:
        out: list[bytes] = []
        while not self.done:
            if self.state == "data":
                if not buffer:
                    break
                piece = bytes(buffer[: self.remaining])
                del buffer[: len(piece)]
                out.append(piece)
                self.remaining -= len(piece)
                if self.remaining:
                    break
                self.state = "data-end"
            elif self.state == "data-end":  # chunk = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
                if len(buffer) < 2:
                    if buffer and buffer[0] != 13:  # 13 is CR
                        raise BadRequest(400, "chunk data not followed by CRLF")
                    break
                if buffer[:2] != b"\r\n":
                    raise BadRequest(400, "chunk data not followed by CRLF")
                del buffer[:2]
                self.state = "size"
            else:
                line = self._line(buffer)
                if line is None:
                    break
                if self.state == "size":
                    match = CHUNK_LINE.fullmatch(line)
                    if match is None:
                        raise BadRequest(400, "invalid chunk size line")
                    self.remaining = int(match[1], 16)
                    self.state = "data" if self.remaining else "trailer"
                elif line:  # trailer-section = *( field-line CRLF ), then the final CRLF
                    self.trailer_size += len(line) + 2
                    self.trailers += 1
                    if (self.trailer_size > self.max_trailer_size
                            or self.trailers > self.max_trailers):
                        raise BadRequest(431, "trailer section too large")
                    parse_fields([line])
                else:
                    self.done = True
        return b"".join(out)

    def _line(self, buffer: bytearray) -> bytes | None:
        """Take one CRLF-terminated line from ``buffer`` (None until it is all there)."""
        end = buffer.find(b"\n", 0, self.max_line)
        if end < 0:
            if len(buffer) >= self.max_line:
                raise BadRequest(400, "chunk line too long")
            return None
        line = bytes(buffer[:end + 1])
        del buffer[: end + 1]
        if not line.endswith(b"\r\n") or len(line.translate(None, HEAD_BYTES)) != 2:
            raise BadRequest(400, "invalid character or bare CR/LF in chunked framing")
        return line[:-2]
# --8<-- [end:chunked_decoder]


def error_response(status: int, reason: str, default_headers: bytes, body: bool = True) -> bytes:
    """A complete ``text/plain`` response that closes the connection, as bytes on the wire."""
    content = reason.encode() + b"\n"
    return b"%scontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n" \
        b"connection: close\r\n%s\r\n%s" % (
            STATUS_LINES[status], len(content), default_headers, content if body else b"")


def _address(info: Any) -> tuple[str, int] | None:
    """``(host, port)`` from a socket address, None for a UNIX socket or an unknown one."""
    if isinstance(info, tuple) and len(info) >= 2:
        return str(info[0]), int(info[1])
    return None


# -------------------------------------------------------------------------- Protocol interface


class RawHTTPProtocol(asyncio.Protocol):
    """One HTTP/1.1 connection: parses requests by hand and runs one RequestResponseCycle each."""

    def __init__(self, state: ServerState, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.state = state
        self.config = state.config
        self.loop = loop or asyncio.get_running_loop()
        self.access_log = state.config.access_log and access_logger.isEnabledFor(logging.INFO)
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.flow: FlowControl = None  # type: ignore[assignment]
        self.buffer = bytearray()
        self.phase = READ_HEAD
        self.cycle: RequestResponseCycle | None = None
        self.body_remaining = 0  # Content-Length bytes still to read
        self.body_received = 0  # bytes of body read so far (for max_body_size)
        self.decoder: ChunkedDecoder | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.timer_kind: str | None = None
        self.eof = False
        self.server: tuple[str, int] | None = None
        self.client: tuple[str, int] | None = None
        self.scheme = "http"
        self.tls: dict[str, Any] | None = None  # the ASGI tls extension, over TLS

    # --8<-- [start:connection_made]
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.flow = FlowControl(self.transport)
        self.state.connections.add(self)
        self.server = _address(transport.get_extra_info("sockname"))
        self.client = _address(transport.get_extra_info("peername"))
        self.scheme = "https" if transport.get_extra_info("sslcontext") else "http"
        self.tls = tls_extension(transport, self.state)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._set_timer(IDLE, self.config.timeout_keep_alive)  # a client that never speaks
    # --8<-- [end:connection_made]

    # --8<-- [start:data_received]
    def data_received(self, data: bytes) -> None:
        if self.phase is CLOSED:  # lingering close: read and drop until the client closes
            return
        if self.timer_kind is IDLE:  # keep-alive timer "cancelled in data_received"
            self._cancel_timer()
        self.buffer += data
        if self.phase is READ_HEAD:
            self._read_head()
        elif self.phase is READ_BODY:
            self._read_body()
        self._limit_read_ahead()
    # --8<-- [end:data_received]

    def connection_lost(self, exc: Exception | None) -> None:
        self.state.connections.discard(self)
        self.phase = CLOSED
        self._cancel_timer()
        if self.cycle is not None:
            self.cycle.disconnected = True
            self.cycle.wake()
        self.flow.resume_writing()  # wake a send() blocked on drain; it will see the disconnect

    def eof_received(self) -> None:
        # The client closed its side. A FIN cannot tell "done sending" from "gone", and ASGI
        # apps wait on http.disconnect to stop work for a client that left; like uvicorn we take
        # it as gone: returning None lets asyncio close, and connection_lost tells the app.
        self.eof = True

    def pause_writing(self) -> None:
        self.flow.pause_writing()

    def resume_writing(self) -> None:
        self.flow.resume_writing()

    def shutdown(self) -> None:
        """Graceful shutdown: close now if idle, else let the response in flight finish first."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete or self.phase is CLOSED:
            self.phase = CLOSED
            self._cancel_timer()
            self.transport.close()
        else:
            cycle.keep_alive = False

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
            try:
                check_partial_head(buffer, config.max_request_line, config.max_header_size,
                                   config.max_headers)
            except BadRequest as exc:
                self._refuse(exc)
                return
            if self.timer_kind is not HEAD:  # the deadline runs from the request's first byte
                self._set_timer(HEAD, config.timeout_headers)
            return
        head = bytes(buffer[:end])
        del buffer[: end + 4]
        self._cancel_timer()
        try:
            method, target, version, headers = parse_request_head(
                head, config.max_request_line, config.max_header_size, config.max_headers)
            content_length, chunked, keep_alive, expect = body_framing(version, headers)
            raw_path, query = split_target(method, target)
            if config.max_body_size is not None and (content_length or 0) > config.max_body_size:
                raise BadRequest(413, "request body too large")
            limit = config.limit_concurrency
            if limit is not None and (len(self.state.connections) > limit
                                      or len(self.state.tasks) >= limit):
                raise BadRequest(503, "server at its concurrency limit")
        except BadRequest as exc:
            self._refuse(exc)
            return
        self._start_request(method, raw_path, query, version, headers, content_length, chunked,
                            keep_alive, expect)
    # --8<-- [end:read_head]

    def _start_request(self, method: str, raw_path: bytes, query: bytes, version: str,
                       headers: Headers, content_length: int | None, chunked: bool,
                       keep_alive: bool, expect: bool) -> None:
        root_path = self.config.root_path
        path = raw_path.decode("ascii")
        if b"%" in raw_path:
            path = unquote(path)  # ASGI: path is percent-decoded and UTF-8 decoded
        scope = {
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
            "headers": headers,
            "state": self.state.lifespan_state.copy(),
        }
        if self.tls is not None:
            scope["extensions"] = {"tls": self.tls}
        has_body = chunked or bool(content_length)
        cycle = RequestResponseCycle(self, scope, keep_alive, expect and has_body)
        self.cycle = cycle
        task = self.loop.create_task(cycle.run_asgi(self.state.app))
        self.state.tasks.add(task)
        task.add_done_callback(self.state.tasks.discard)
        self.body_received = 0
        if has_body:
            self.phase = READ_BODY
            self.decoder = ChunkedDecoder(max_trailer_size=self.config.max_header_size,
                                          max_trailers=self.config.max_headers) if chunked else None
            self.body_remaining = content_length or 0
            self._read_body()
        else:
            self.phase = WAIT_RESPONSE
            cycle.more_body = False

    # --8<-- [start:read_body]
    def _read_body(self) -> None:
        buffer = self.buffer
        cycle = self.cycle
        assert cycle is not None
        if self.decoder is None:  # Content-Length: take what is there, up to what is left
            if len(buffer) <= self.body_remaining:
                data = bytes(buffer)
                buffer.clear()
            else:
                data = bytes(buffer[: self.body_remaining])
                del buffer[: self.body_remaining]
            self.body_remaining -= len(data)
            done = self.body_remaining == 0
        else:
            try:
                data = self.decoder.feed(buffer)
                self.body_received += len(data)
                limit = self.config.max_body_size
                if limit is not None and self.body_received > limit:
                    raise BadRequest(413, "request body too large")
            except BadRequest as exc:
                self._refuse(exc)
                return
            done = self.decoder.done
        if data and not cycle.response_complete:  # after the response, the rest is discarded
            cycle.body = cycle.body + data if cycle.body else data
        if done:
            self._cancel_timer()
            self.phase = WAIT_RESPONSE
            cycle.more_body = False
            cycle.wake()
            if cycle.response_complete:
                self._next_request()
            return
        if data:
            cycle.wake()
        if len(cycle.body) > HIGH_WATER_LIMIT:
            self.pause_reading()  # the app is behind; the client is not the slow one
        else:
            self._set_timer(BODY, self.config.timeout_body)
    # --8<-- [end:read_body]

    def on_response_complete(self, cycle: RequestResponseCycle) -> None:
        """Called by the cycle once its last body byte is written."""
        if self.access_log:
            scope = cycle.scope
            query = scope["query_string"]
            client = f"{self.client[0]}:{self.client[1]}" if self.client else "-"
            target = scope["raw_path"].decode("latin-1") + ("?" + query.decode("latin-1")
                                                            if query else "")
            access_logger.info('%s - "%s %s HTTP/%s" %d', client, scope["method"], target,
                               scope["http_version"], cycle.status)
        if self.phase is CLOSED:
            return
        if not cycle.keep_alive or self.eof:
            self.close()
        elif self.phase is WAIT_RESPONSE:
            self._next_request()
        else:  # still reading a body the app did not want: keep reading, and drop it
            cycle.body = b""
            self.resume_reading()

    def _next_request(self) -> None:
        self.cycle = None
        self.decoder = None
        self.phase = READ_HEAD
        self.resume_reading()
        if self.buffer:
            self._read_head()  # a pipelined request is already here
            self._limit_read_ahead()
        else:
            self._set_timer(IDLE, self.config.timeout_keep_alive)

    def _refuse(self, exc: BadRequest) -> None:
        """Answer a request we will not serve with ``exc.status`` and close the connection."""
        logger.debug("refused request from %s: %d %s", self.client, exc.status, exc.reason)
        cycle = self.cycle
        if cycle is not None and cycle.response_started:
            self.phase = CLOSED
            self.transport.abort()  # no valid response is possible any more
            return
        self.transport.write(error_response(exc.status, exc.reason,
                                            self.state.default_headers_bytes))
        self.close()

    def close(self) -> None:
        """Stop reading requests and close. With TCP, half-close first and read (and drop) what
        the client still sends for up to LINGER_SECONDS, so that the kernel does not answer its
        late bytes with a reset that destroys our last response before the client reads it
        (RFC 9112 §9.6, on why servers close a connection in stages)."""
        self.phase = CLOSED
        self.buffer.clear()
        self._cancel_timer()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.wake()
        if self.transport.can_write_eof() and not self.eof:
            self.transport.write_eof()
            self.resume_reading()
            self._set_timer(LINGER, LINGER_SECONDS)
        else:
            self.transport.close()

    def _on_timeout(self, kind: str) -> None:
        self.timer = self.timer_kind = None
        if kind is HEAD:
            self._refuse(BadRequest(408, "timed out reading the request head"))
        elif kind is BODY:
            self._refuse(BadRequest(408, "timed out reading the request body"))
        else:  # idle keep-alive or lingering close: close without a word
            self.phase = CLOSED
            self.transport.close()

    def _set_timer(self, kind: str, seconds: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_later(seconds, self._on_timeout, kind)
        self.timer_kind = kind

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = self.timer_kind = None

    def _limit_read_ahead(self) -> None:
        """Pipelined bytes wait in the buffer while a response is in flight; past
        HIGH_WATER_LIMIT bytes, stop reading until that response is done."""
        if self.phase is WAIT_RESPONSE and len(self.buffer) > HIGH_WATER_LIMIT:
            self.pause_reading()

    def pause_reading(self) -> None:
        """Stop reading from the socket (the app or the pipeline is behind)."""
        self.flow.pause_reading()
        if self.timer_kind is BODY:
            self._cancel_timer()

    def resume_reading(self) -> None:
        """Read from the socket again, if we had paused."""
        if self.flow.resume_reading() and self.phase is READ_BODY:
            self._set_timer(BODY, self.config.timeout_body)


# ------------------------------------------------------------------------------ ASGI interface


class RequestResponseCycle:
    """One request and its response: the scope, ``receive()`` and ``send()`` given to the app."""

    def __init__(self, protocol: RawHTTPProtocol, scope: dict[str, Any], keep_alive: bool,
                 expect_continue: bool) -> None:
        self.protocol = protocol
        self.transport = protocol.transport
        self.flow = protocol.flow
        self.scope = scope
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = expect_continue
        self.disconnected = False
        # Request state: body bytes not yet received by the app; whether more will come.
        self.body = b""
        self.more_body = True
        self.request_complete = False
        self.waiter: asyncio.Future[None] | None = None
        # Response state.
        self.response_started = False
        self.head_sent = False
        self.response_complete = False
        self.status = 0
        self.head: list[bytes] = []
        self.expected_length: int | None = None
        self.bytes_sent = 0
        self.chunked = False
        self.no_body = False
        self.app_chunked = self.app_close = False

    # --8<-- [start:run_asgi]
    async def run_asgi(self, app: ASGIApp) -> None:
        try:
            result = await app(self.scope, self.receive, self.send)  # type: ignore[func-returns-value]
        except ClientDisconnected:
            logger.debug("client %s went away during the response", self.protocol.client)
        except Exception:
            logger.exception("Exception in ASGI application")
            self._fail()
        else:
            if result is not None:
                logger.error("ASGI callable should return None, but returned %r", result)
            if not self.response_complete and not self.disconnected:
                logger.error("ASGI callable returned without %s the response",
                             "completing" if self.response_started else "starting")
                self._fail()
    # --8<-- [end:run_asgi]

    def _fail(self) -> None:
        """After an app error: a 500 if nothing was written yet, else close the connection."""
        if self.disconnected or self.response_complete:
            return
        if self.head_sent:
            self.protocol.close()
            return
        self.keep_alive = False
        self.status = 500
        self.transport.write(error_response(500, "Internal Server Error",
                                            self.protocol.state.default_headers_bytes,
                                            body=self.scope["method"] != "HEAD"))
        self.head_sent = self.response_started = self.response_complete = True
        self.protocol.on_response_complete(self)

    def wake(self) -> None:
        """Resume a ``receive()`` waiting for body bytes, the end of the body or a disconnect."""
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def _wait(self) -> None:
        self.protocol.resume_reading()  # the app wants more: let the client send it
        self.waiter = self.protocol.loop.create_future()
        await self.waiter

    # --8<-- [start:receive]
    async def receive(self) -> Message:
        if self.waiting_for_100_continue and not self.disconnected:
            # RFC 9110 §10.1.1: the client waits for 100 before sending the body; we send it
            # only now that the app asks for the body (never to HTTP/1.0: see body_framing).
            self.waiting_for_100_continue = False
            self.transport.write(CONTINUE_100)
        if self.request_complete:  # the app has the whole body: only a disconnect can follow
            while not (self.disconnected or self.response_complete):
                await self._wait()
            return {"type": "http.disconnect"}
        while not self.body and self.more_body and not (self.disconnected
                                                        or self.response_complete):
            await self._wait()
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        body, self.body = self.body, b""
        if self.more_body:
            self.protocol.resume_reading()
        else:
            self.request_complete = True
        return {"type": "http.request", "body": body, "more_body": self.more_body}
    # --8<-- [end:receive]

    # --8<-- [start:send]
    async def send(self, message: Message) -> None:
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            raise ClientDisconnected("the client has disconnected")
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected 'http.response.start', got {kind!r}")
            self._start(message["status"], message.get("headers", ()))
        elif self.response_complete:
            raise RuntimeError(f"got {kind!r} after the response was complete")
        elif kind != "http.response.body":
            raise RuntimeError(f"expected 'http.response.body', got {kind!r}")
        else:
            self._body(message.get("body", b""), message.get("more_body", False))
    # --8<-- [end:send]

    def _start(self, status: int, headers: Any) -> None:
        """Check and keep the status and headers; they go out with the first body bytes."""
        head = [STATUS_LINES.get(status) or b"HTTP/1.1 %d \r\n" % status]
        own_defaults = False
        for name, value in headers:
            lower = name.lower()
            # Response splitting guard: no CR, LF or NUL may reach the wire inside a field.
            if not name or name.translate(None, TCHAR) or b"\r" in value or b"\n" in value \
                    or b"\0" in value:
                raise RuntimeError(f"invalid response header {name!r}: {value!r}")
            if lower == b"content-length":
                self.expected_length = int(value)
            elif lower == b"transfer-encoding":
                self.app_chunked = True
            elif lower == b"connection":
                if b"close" in _tokens(value.lower()):
                    self.keep_alive = False
                    self.app_close = True
            elif lower == b"date" or lower == b"server":
                own_defaults = True
            head.append(b"%s: %s\r\n" % (name, value))
        defaults = self.protocol.state.default_headers
        if own_defaults:  # the app's Date/Server win over ours (RFC 9110 §6.6.1 lets it)
            given = {name.lower() for name, _ in headers}
            head.extend(b"%s: %s\r\n" % pair for pair in defaults if pair[0] not in given)
        else:
            head.append(self.protocol.state.default_headers_bytes)
        self.status = status
        self.head = head
        # RFC 9110 §9.3.2, §15.3.5, §15.4.5: no content after HEAD, 1xx, 204 or 304.
        self.no_body = self.scope["method"] == "HEAD" or status in (204, 304) or status < 200
        self.response_started = True

    def _framing(self, body: bytes, more_body: bool) -> bytes:
        """The response head, with the framing headers chosen now that the first body is known."""
        scope = self.scope
        status = self.status
        head = self.head
        if self.app_chunked:
            self.chunked = not self.no_body
        elif self.expected_length is None and not (status in (204, 304) or status < 200):
            if not more_body:  # the whole body in one message: give it a length
                if not self.no_body:
                    head.append(b"content-length: %d\r\n" % len(body))
            elif scope["http_version"] == "1.1":
                self.chunked = not self.no_body
                head.append(b"transfer-encoding: chunked\r\n")
            else:  # RFC 9112 §6.3 p8: an HTTP/1.0 body without a length ends at close
                self.keep_alive = False
        if self.waiting_for_100_continue and self.protocol.phase is READ_BODY:
            self.keep_alive = False  # the client may never send the body it offered
        if not self.keep_alive:
            if not self.app_close:
                head.append(b"connection: close\r\n")
        elif scope["http_version"] == "1.0":
            head.append(b"connection: keep-alive\r\n")
        head.append(b"\r\n")
        self.head_sent = True
        return b"".join(head)

    # --8<-- [start:body]
    def _body(self, body: bytes, more_body: bool) -> None:
        if self.expected_length is not None and not self.no_body and not self.app_chunked:
            self.bytes_sent += len(body)
            if self.bytes_sent > self.expected_length:
                raise RuntimeError("response content longer than Content-Length")
        data = self._framing(body, more_body) if not self.head_sent else b""
        if self.no_body:
            pass  # HEAD, 204, 304: the head says what a body would be, none follows
        elif self.chunked:  # RFC 9112 §7.1: chunk = chunk-size CRLF chunk-data CRLF
            if body:
                data += b"%x\r\n%s\r\n" % (len(body), body)
            if not more_body:
                data += b"0\r\n\r\n"  # last-chunk, and an empty trailer section
        else:
            data = data + body if data else body
        if data:
            self.transport.write(data)
        if not more_body:
            if self.expected_length is not None and not self.no_body \
                    and not self.app_chunked and self.bytes_sent < self.expected_length:
                logger.error("response content shorter than Content-Length; closing")
                self.keep_alive = False
            self.response_complete = True
            self.wake()
            self.protocol.on_response_complete(self)
    # --8<-- [end:body]


# ------------------------------------------------------------------------------------- serve


async def serve(app: ASGIApp, config: Config, *, sock: socket.socket | None = None,
                ready: Any = None, shutdown: asyncio.Event | None = None) -> None:
    """Serve ``app`` until ``shutdown`` is set (or SIGINT/SIGTERM); see ``serve_protocol``."""
    await serve_protocol(RawHTTPProtocol, app, config, sock=sock, ready=ready,
                         shutdown=shutdown, name="toy-raw")


# --------------------------------------------------------------------------------------- run


def run(app: ASGIApp, config: Config) -> None:
    """Block serving ``app`` on the configured event loop (uvloop when available)."""
    run_server(serve, app, config)
