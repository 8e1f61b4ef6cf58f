"""The HTTP/2 rules toy-h2 keeps beside h2: request pseudo-header fields, the h2c upgrade, the
abuse budgets. Nothing here touches a socket or the event loop, so each is tested alone.

h2 (the sans-IO library) frames, parses HPACK, keeps the stream state machines and checks the
pseudo-header fields' grammar; what it leaves to a server is written here once:

- ``request_target``: a request's pseudo-header fields turned into what the ASGI scope needs
  (RFC 9113 §8.3.1), and the requests we answer instead of the app (CONNECT, a bad ``:path``,
  too many fields);
- ``h2c_settings``: may an HTTP/1.1 request be upgraded to h2c (RFC 7540 §3.2)?
- ``BodyLengthDecoder`` and ``content_length``: h2 answers a bad Content-Length by ending the
  whole connection, where a malformed request is a stream error (RFC 9113 §8.1.1), so the
  field is taken from h2's sight as HPACK decodes it, and checked here instead;
- ``FrameScanner``: frame boundaries read from each 9-byte frame header as bytes arrive, so a
  frame too large or a header block too long is refused before h2 buffers it (RFC 9113 §4.2,
  §10.5.1), and every control frame is counted;
- ``FloodBudget``: what a client may make us do per interval without an app's help, resets and
  control frames, past which the connection ends with ENHANCE_YOUR_CALM (RFC 9113 §7);
- ``goaway``: a GOAWAY frame framed outside h2's state machine (graceful shutdown).

Spec: RFC 9113 §3.4 (preface), §4.1-4.2 (frame layout and size), §6.8 (GOAWAY), §7 (error
codes), §8.1.1 (malformed messages), §8.3 (pseudo-header fields), §10.5 (denial of service);
RFC 9110 §8.6 (Content-Length); RFC 7540 §3.2 (h2c upgrade, removed from RFC 9113 but still
what ``curl --http2`` sends).

Compare with: hypercorn/protocol/h2.py (its ``_create_stream`` and ``_handle_events``),
nghttp2's ``nghttp2_session`` flood counters.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterable, Iterator

import h2.config
import h2.connection
import h2.events
import hpack
from h2.errors import ErrorCodes
from h2.settings import SettingCodes, Settings
from hyperframe.frame import GoAwayFrame

from toyservers import asgi_extensions, http1
from toyservers._types import Headers, Message, Scope

PREFACE = http1.H2_PREFACE_BYTES  # RFC 9113 §3.4, the client's first 24 bytes
SWITCHING = b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: h2c\r\n\r\n"
#: Fields of an HTTP/1.1 upgrade request that mean nothing on HTTP/2 (RFC 9113 §8.2.2).
CONNECTION_SPECIFIC = frozenset({b"connection", b"upgrade", b"http2-settings", b"keep-alive",
                                 b"proxy-connection", b"transfer-encoding"})
MAX_CONCURRENT_STREAMS = 100  # streams open at once per connection (RFC 9113 §5.1.2)
FLOOD_INTERVAL = 10.0  # seconds over which a FloodBudget counts
MAX_RESETS = 200  # streams a client may reset per interval (rapid reset, CVE-2023-44487)
MAX_CONTROL_FRAMES = 1000  # frames no app asked for, per interval (CVE-2019-9512/9513/9515/9518)
MAX_FRAME_SIZE = 16384  # the SETTINGS_MAX_FRAME_SIZE we advertise (RFC 9113 §6.5.2: the least)
#: Frame types (RFC 9113 §6) that carry a request: the rest, and any type we do not know
#: (§5.5: ignored, but parsed all the same), are control frames no app asked for.
DATA, HEADERS, PUSH_PROMISE, CONTINUATION = 0x0, 0x1, 0x5, 0x9
END_HEADERS = 0x4  # the HEADERS/PUSH_PROMISE/CONTINUATION flag that ends a header block
#: A byte no request-target may hold (RFC 3986 §2 and RFC 9112 §3.2: visible ASCII only), as
#: HTTP/1.1's request line refuses it; a control byte would also reach the access log raw.
bad_target_byte = re.compile(rb"[^\x21-\x7e]").search


class BodyLengthDecoder(hpack.Decoder):
    """h2's HPACK decoder, which takes the ``content-length`` fields out of each header block
    it decodes, their values kept in ``taken``, so that h2 never sees one.

    h2 4.x checks Content-Length itself and raises ProtocolError, a connection error (GOAWAY),
    for a value that is no number or DATA that does not add up to it; RFC 9113 §8.1.1 makes
    such a request malformed, a stream error, so the request beside it lives on. h2 offers no
    setting for that, but decodes every header block with ``conn.decoder``: this one, installed
    by ``connection``. ``taken`` belongs to the last block decoded, so its reader feeds h2 no
    more than one header block at a time (``FrameScanner.block_ends``).
    """

    def __init__(self, max_header_list_size: int) -> None:
        super().__init__(max_header_list_size)
        self.taken: list[bytes] = []

    def decode(self, data: bytes, raw: bool = False) -> list[hpack.HeaderTuple]:
        headers = list(super().decode(data, raw))
        self.taken = [value for name, value in headers if name == b"content-length"]
        if not self.taken:
            return headers
        return [field for field in headers if field[0] != b"content-length"]


def connection(max_header_size: int, connect_protocol: bool = False
               ) -> tuple[h2.connection.H2Connection, BodyLengthDecoder]:
    """A server-side h2 connection and its HPACK decoder (a ``BodyLengthDecoder``). Its
    SETTINGS (sent by ``initiate_connection``) say ``MAX_CONCURRENT_STREAMS``,
    ``MAX_FRAME_SIZE`` and a header list of ``max_header_size`` bytes, which the decoder
    enforces from the start (RFC 9113 §6.5.2), before the client ACKs them; with
    ``connect_protocol``, ``ENABLE_CONNECT_PROTOCOL`` 1 (RFC 8441 §3: WebSocket streams)."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(
        client_side=False, header_encoding=None))
    conn.local_settings = Settings(client=False, initial_values={
        SettingCodes.MAX_CONCURRENT_STREAMS: MAX_CONCURRENT_STREAMS,
        SettingCodes.MAX_HEADER_LIST_SIZE: max_header_size,
        SettingCodes.INITIAL_WINDOW_SIZE: 65535, SettingCodes.MAX_FRAME_SIZE: MAX_FRAME_SIZE,
        **({SettingCodes.ENABLE_CONNECT_PROTOCOL: 1} if connect_protocol else {})})
    conn.decoder = decoder = BodyLengthDecoder(max_header_size)
    return conn, decoder


def content_length(values: list[bytes], ended: bool) -> int | None:
    """The Content-Length a request's ``content-length`` fields declare (None without one);
    ``ended``: its HEADERS frame ended the stream, so its content is empty.

    Raises ValueError when the request is malformed (RFC 9113 §8.1.1, a stream error): a value
    that is not 1*DIGIT (RFC 9110 §8.6), fields that disagree, or a length other than 0 on a
    request that carries no DATA. The DATA that follows is checked against it as it comes.
    """
    if not values:
        return None
    if not all(value.isdigit() for value in values) or len(lengths := set(map(int, values))) > 1:
        raise ValueError(f"content-length {values!r}")
    length = lengths.pop()
    if ended and length:
        raise ValueError(f"content-length {length} and no DATA")
    return length


def stop_enforcing_stream_limit(conn: h2.connection.H2Connection) -> None:
    """Once our SETTINGS are framed, h2 is told of no stream limit: it would answer a stream
    past ``MAX_CONCURRENT_STREAMS`` by ending the whole connection (TooManyStreamsError),
    where RFC 9113 §5.1.2 asks for a stream error; the server refuses that stream itself."""
    values = {SettingCodes(code): value for code, value in conn.local_settings.items()}
    values[SettingCodes.MAX_CONCURRENT_STREAMS] = 2**31 - 1
    conn.local_settings = Settings(client=False, initial_values=values)


def request_target(fields: Iterable[tuple[bytes, bytes]], max_headers: int
                   ) -> tuple[int, str, bytes, bytes, Headers]:
    """``(status, method, raw_path, query_string, headers)`` of a request's decoded fields.

    The pseudo-header fields (``:method``, ``:scheme``, ``:path``, ``:authority``) are taken
    out; h2 checked them (RFC 9113 §8.3.1: the first three once each, none unknown or after a
    regular field), and joined the cookie fields (§8.2.3). ``:authority`` is added to
    ``headers`` as ``host`` when there is none, since apps read ``host`` (§8.3.1: the two
    "MUST NOT" differ). ``status`` is 0, or the answer to give instead of running the app: 501
    for CONNECT (no proxy here) unless it is RFC 8441's extended CONNECT (``:protocol``; its
    ``:path`` is an origin-form target, §5), 400 for a ``:path`` of no request-target form
    (RFC 9112 §3.2) or with a byte that is not visible ASCII (a space, DEL, a control byte,
    raw UTF-8), 431 past ``max_headers`` fields (RFC 6585 §5).
    """
    pseudo, headers = {}, []
    for name, value in fields:
        if name[:1] == b":":
            pseudo[name] = value
        else:
            headers.append((name, value))
    method = pseudo.get(b":method", b"").decode("ascii", "replace")
    authority = pseudo.get(b":authority")
    if authority is not None and not any(name == b"host" for name, _ in headers):
        headers.insert(0, (b"host", authority))
    if method == "CONNECT" and b":protocol" not in pseudo:
        return 501, method, b"", b"", headers
    path = pseudo.get(b":path", b"")
    try:  # a request-target is visible ASCII (RFC 3986 §2; RFC 9113 §8.3.1: malformed)
        if bad_target_byte(path):
            raise http1.BadTarget("a byte outside visible ASCII in :path")
        raw_path, query = http1.split_target("GET" if method == "CONNECT" else method, path)
    except http1.BadTarget:
        return 400, method, b"", b"", headers
    return (431 if len(headers) > max_headers else 0), method, raw_path, query, headers


def request_head(fields: Iterable[tuple[bytes, bytes]], taken: list[bytes], ended: bool,
                 max_headers: int) -> tuple[int | None, tuple[int, str, bytes, bytes, Headers]]:
    """A request's declared Content-Length and ``request_target`` of its fields, the
    ``content-length`` values the ``BodyLengthDecoder`` took (``taken``) put back at the end;
    ``ended``: HEADERS ended the stream. Raises ValueError for a malformed Content-Length
    (``content_length``), a stream error."""
    target = request_target([*fields, *((b"content-length", value) for value in taken)],
                            max_headers)
    return content_length(taken, ended), target


def expects_continue(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Does a request ask for ``100 Continue`` before its body (RFC 9110 §10.1.1)?"""
    return any(n == b"expect" and v.lower() == b"100-continue" for n, v in headers)


def response_head(status: int, headers: Iterable[tuple[bytes, bytes]],
                  default_headers: Headers) -> Headers:
    """The HEADERS of a response: ``:status`` and the app's fields as ``http1.check_response``
    checks them (raises http1.ResponseError), with the server's defaults."""
    lines = http1.check_response(status, headers, default_headers).lines  # name, ": ", ...
    return [(b":status", b"%d" % status), *zip(lines[::4], lines[2::4], strict=True)]


class Response:
    """One stream's response as the app's ASGI messages build it (ASGI HTTP spec 2.4 and its
    HTTP Trailers and Early Hints extensions), sans I/O: ``start`` turns
    ``http.response.start`` into the HEADERS fields (``head``, held until the first body
    frames it), ``body`` says what an ``http.response.body`` frames, ``trailer`` gathers
    ``http.response.trailers``, ``early_hint`` gives a 103's fields. Raises
    RuntimeError for a message out of order, http1.ResponseError for a field or body the
    response may not carry."""

    __slots__ = ("no_content", "status", "head", "trailers", "trailer_fields", "body_sent")

    def __init__(self, method: str) -> None:
        self.no_content = method == "HEAD"  # RFC 9110 §9.3.2: the head only
        self.status = 0
        self.head: Headers | None = None  # checked fields, until the first body frames them
        self.trailers = False  # the app said it sends http.response.trailers
        self.trailer_fields: Headers = []  # what it sent of them so far
        self.body_sent = False  # the last http.response.body went out

    def start(self, message: Message, default_headers: Headers) -> None:
        self.status = message["status"]
        self.head = response_head(self.status, message.get("headers", ()), default_headers)
        self.trailers = bool(message.get("trailers", False))
        self.no_content = self.no_content or self.status in (204, 304)  # RFC 9110 §6.4.1

    def body(self, message: Message) -> tuple[Headers | None, bytes, bool]:
        """``(head to frame first or None, body bytes, END_STREAM after them)``."""
        body, more_body = message.get("body", b""), message.get("more_body", False)
        if self.body_sent:
            raise RuntimeError("unexpected 'http.response.body' after the last one")
        if type(body) is not bytes:
            raise http1.ResponseError(f"response body must be bytes, not {type(body).__name__}")
        self.body_sent = not more_body
        head, self.head = self.head, None
        return head, b"" if self.no_content else body, not more_body and not self.trailers

    def early_hint(self, message: Message) -> Headers:
        """The fields of ``http.response.early_hint``'s 103 (RFC 8297), for a HEADERS frame
        without END_STREAM before the response's own (RFC 9113 §8.1: interim responses)."""
        links = asgi_extensions.check_links(message.get("links", ()))
        return [(b":status", b"103"), *((b"link", link) for link in links)]

    def trailer(self, message: Message) -> Headers | None:
        """The trailer fields once the last ``http.response.trailers`` came, else None."""
        if not (self.trailers and self.body_sent):
            raise RuntimeError("unexpected 'http.response.trailers' in the response")
        self.trailer_fields += trailer_fields(message.get("headers", ()))
        return None if message.get("more_trailers", False) else self.trailer_fields


def trailer_fields(headers: Iterable[tuple[bytes, bytes]]) -> Headers:
    """An ``http.response.trailers`` message's fields, checked as a head's, without those a
    trailer may not carry (``asgi_extensions.check_trailers``: RFC 9110 §6.5.1)."""
    lines = asgi_extensions.check_trailers(headers)
    return list(zip(lines[::4], lines[2::4], strict=True))


def error_head(status: int, default_headers: Headers, length: int) -> Headers:
    """The HEADERS of a plain-text error response of ``length`` bytes."""
    return [(b":status", b"%d" % status), *default_headers,
            (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", b"%d" % length)]


def h2c_upgrade(scope: Scope) -> tuple[bytes, Scope] | None:
    """An ``Upgrade: h2c`` request's decoded HTTP2-Settings and its scope as HTTP/2 sees it
    (``http_version`` "2", no connection-specific fields: RFC 9113 §8.2.2, HTTP/2's
    extensions: ``asgi_extensions.offered``), or None when it may not be upgraded
    (``h2c_settings``). The scope is changed in place."""
    settings = h2c_settings(scope)
    if settings is None:
        return None
    scope["http_version"], scope["headers"] = "2", [
        (n, v) for n, v in scope["headers"] if n not in CONNECTION_SPECIFIC]
    scope["extensions"] = asgi_extensions.offered(scope["extensions"].get("tls"), "2", True)
    return settings, scope


def h2c_settings(scope: Scope) -> bytes | None:
    """The decoded ``HTTP2-Settings`` of an ``Upgrade: h2c`` request (a SETTINGS frame's
    payload), or None when it may not be upgraded: RFC 7540 §3.2 wants ``h2c`` first in
    Upgrade, one HTTP2-Settings of whole 6-byte settings, both named in Connection; our own
    rule: no request body (it would have to be read as HTTP/1.1 first)."""
    fields: dict[bytes, list[bytes]] = {}
    for name, value in scope["headers"]:
        fields.setdefault(name, []).append(value)
    connection = http1.list_elements(b",".join(fields.get(b"connection", [])))
    settings = fields.get(b"http2-settings", [])
    if (http1.list_elements(b",".join(fields.get(b"upgrade", [])))[:1] != [b"h2c"]
            or len(settings) != 1 or not {b"upgrade", b"http2-settings"} <= set(connection)
            or b"transfer-encoding" in fields or fields.get(b"content-length", [b"0"]) != [b"0"]):
        return None
    try:  # base64url, its padding left out (RFC 7540 §3.2.1)
        decoded = base64.b64decode(settings[0] + b"=" * (-len(settings[0]) % 4), b"-_",
                                   validate=True)
    except (binascii.Error, ValueError):
        return None
    return None if len(decoded) % 6 else decoded


class FloodBudget:
    """What one client may make us do without an app's help, per ``FLOOD_INTERVAL`` seconds.

    ``spend(resets, control)`` counts streams the client reset (rapid reset: each one started
    an app for nothing) and control frames we must answer or process (every frame but
    DATA, HEADERS and CONTINUATION, and empty DATA: the 2019 floods); past ``MAX_RESETS`` or
    ``MAX_CONTROL_FRAMES`` it raises FrameRefused (ENHANCE_YOUR_CALM, the attack's name). ``clock``
    gives seconds (the event loop's ``time``). Compare with nghttp2's per-session flood
    counters and Go's ``http2.Server`` rapid-reset fix (CVE-2023-44487), which bound the same.
    """

    __slots__ = ("clock", "start", "resets", "control")

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.start, self.resets, self.control = clock(), 0, 0

    def spend(self, resets: int = 0, control: int = 0) -> None:
        now = self.clock()
        if now - self.start >= FLOOD_INTERVAL:
            self.start, self.resets, self.control = now, 0, 0
        self.resets += resets
        self.control += control
        if self.resets > MAX_RESETS:
            raise FrameRefused(ErrorCodes.ENHANCE_YOUR_CALM, "rapid reset")
        if self.control > MAX_CONTROL_FRAMES:
            raise FrameRefused(ErrorCodes.ENHANCE_YOUR_CALM, "control frame flood")

    def earn(self, control: int) -> None:
        """We sent ``control`` DATA frames: a reading client owes WINDOW_UPDATEs for them (one
        per stream, one for the connection), which are no flood; the credit banked is bounded
        by one budget, so a download cannot buy an unbounded flood later."""
        self.control = max(self.control - control, -MAX_CONTROL_FRAMES)


class FrameRefused(Exception):
    """A frame refused before h2 buffers it (``FrameScanner``) or past a ``FloodBudget``: the
    connection ends with GOAWAY ``code``; ``reason`` is what to log."""

    def __init__(self, code: ErrorCodes, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


class FrameScanner:
    """Frame boundaries in what a client sends, read from each frame's 9-byte header as the
    bytes arrive (RFC 9113 §4.1: a 24-bit length, a type, flags, a stream id), a step ahead of
    h2, which looks at a frame only once all of it is here.

    ``scan(data)`` takes the next bytes of the connection (after the 24-byte preface, which it
    skips) and returns how many control frames began in them: any frame that is not DATA,
    HEADERS or CONTINUATION, unknown types included (§5.5: parsed, then ignored). It raises
    FrameRefused with FRAME_SIZE_ERROR as soon as a header announces more than
    ``MAX_FRAME_SIZE`` bytes (§4.2: the payload is never waited for, let alone buffered), and
    with ENHANCE_YOUR_CALM once a header block still open (HEADERS or PUSH_PROMISE without
    END_HEADERS, then CONTINUATIONs) outgrows ``max_header_block`` bytes (§10.5.1). After it,
    ``block_ends`` holds the offsets in ``data`` just past each frame that ends a header block
    (its END_HEADERS frame, payload included), where the reader may cut ``data`` so that h2
    decodes one block per call (see ``BodyLengthDecoder``).
    """

    __slots__ = ("max_header_block", "skip", "head", "block", "ends_block", "block_ends")

    def __init__(self, max_header_block: int, skip: int = len(PREFACE)) -> None:
        self.max_header_block = max_header_block
        self.skip = skip  # bytes to pass before the next frame header (the preface, a payload)
        self.head = b""  # the first bytes of a frame header split across reads
        self.block = -1  # bytes of the header block still open, -1 when none is
        self.ends_block = False  # the frame being skipped ends a header block
        self.block_ends: list[int] = []

    def scan(self, data: bytes) -> int:
        control, at, end = 0, 0, len(data)
        self.block_ends = []
        while True:
            if self.skip:
                step = min(self.skip, end - at)
                self.skip -= step
                at += step
                if self.skip:
                    return control
            if self.ends_block:
                self.ends_block = False
                self.block_ends.append(at)
            need = 9 - len(self.head)
            if end - at < need:
                self.head += data[at:]
                return control
            head = self.head + data[at:at + need]
            self.head, at = b"", at + need
            length, kind, flags = int.from_bytes(head[:3], "big"), head[3], head[4]
            if length > MAX_FRAME_SIZE:
                raise FrameRefused(ErrorCodes.FRAME_SIZE_ERROR, f"a frame of {length} bytes")
            if kind == HEADERS or kind == PUSH_PROMISE or kind == CONTINUATION:
                self.ends_block = bool(flags & END_HEADERS)
                if kind != CONTINUATION:
                    self.block = length
                elif self.block >= 0:
                    self.block += length
                    if self.block > self.max_header_block:
                        raise FrameRefused(ErrorCodes.ENHANCE_YOUR_CALM, "header block too large")
                if self.ends_block:
                    self.block = -1
            elif kind != DATA:
                control += 1
            self.skip = length


def receive(conn: h2.connection.H2Connection, scanner: FrameScanner, budget: FloodBudget,
            data: bytes) -> Iterator[h2.events.Event]:
    """h2's events for ``data``, the connection's next bytes: their frame headers scanned
    first (raises FrameRefused: a frame too large, a header block too long, a flood), then
    fed to h2 cut after each header block, so the ``BodyLengthDecoder``'s ``taken`` is the
    request's while its RequestReceived is handled. Raises h2's ProtocolError for a connection
    error (h2 has queued its GOAWAY)."""
    budget.spend(0, scanner.scan(data))
    start = 0
    for end in (*scanner.block_ends, len(data)):
        if end > start:
            yield from conn.receive_data(data[start:end])
        start = end


def send_data(conn: h2.connection.H2Connection, stream_id: int, body: memoryview,
              end: bool) -> tuple[memoryview, int]:
    """Frame as much of ``body`` as stream ``stream_id``'s window, the connection's and
    MAX_FRAME_SIZE allow (RFC 9113 §5.2, §6.9), END_STREAM on the last frame if ``end``
    (an empty ``body`` too); the bytes that must wait for credit, and the DATA frames made."""
    frames = 0
    while body or (end and not frames):
        size = min(len(body), conn.local_flow_control_window(stream_id),
                   conn.max_outbound_frame_size)
        if size <= 0 and body:
            break
        conn.send_data(stream_id, body[:size], end_stream=end and size == len(body))
        body, frames = body[size:], frames + 1
    return body, frames


def send_error(conn: h2.connection.H2Connection, stream_id: int, status: int,
               default_headers: Headers) -> None:
    """Frame a plain-text ``status`` response (its reason phrase as body) on a stream."""
    body = http1.reason(status) or b"Error"
    conn.send_headers(stream_id, error_head(status, default_headers, len(body)))
    conn.send_data(stream_id, body, end_stream=True)


def goaway(last_stream_id: int, error_code: ErrorCodes = ErrorCodes.NO_ERROR) -> bytes:
    """A GOAWAY frame (RFC 9113 §6.8) as bytes. h2's ``close_connection`` also frames one,
    but then refuses to send anything more, so a graceful shutdown, whose streams in flight
    must finish, frames its own."""
    frame = GoAwayFrame(0)
    frame.last_stream_id, frame.error_code = last_stream_id, error_code
    return frame.serialize()
