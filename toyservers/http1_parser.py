"""The project's own HTTP/1.1 request parser: the head, the body's framing, chunked decoding.

toy-raw reads requests with it on asyncio, and a server on plain sockets can read them with it
just the same: every function here takes bytes and gives values or raises ``BadRequest``, and
none touches a socket, a clock or an event loop (sans-IO, like h11, written small). It parses
with ``find``/``split``/``translate``/``re`` on whole byte strings, which run in C, never a
Python loop over bytes, and leans on ``toyservers.http1`` for the rules every server shares
(tokens, Host values, Transfer-Encoding, the chunk-size line).

- ``check_partial_head``: refuse an unfinished head that is already bad (414, 431, 400);
- ``split_head``: a whole head and the bytes after it, or the unfinished one checked;
  ``take_head`` the same on a bytearray, cutting the head off;
- ``parse_request_head``: the request line and fields, checked (RFC 9112 §2-§5);
- ``body_framing``: Content-Length or chunked, keep-alive, Expect (RFC 9112 §6, §9.3);
- ``ChunkedDecoder``: the chunked coding, incrementally, with limits (RFC 9112 §7.1);
- ``BodyReader``: a request body off the buffer whatever its framing, with the body limit.

Method and field names and Host values already checked are remembered (a bounded cache,
filled only with what passed), so a request like the last one skips the checks' work.

Deliberately left out: obs-fold (refused with 400, as §5.2 allows), a bare LF as a line end
(refused: §2.2 lets a server choose), and trailers reaching the caller (checked, dropped).

Spec: RFC 9112 §2.2 (message parsing), §3 (request line), §5 (field lines), §6 (message body
length), §7.1 (chunked coding), §9.3 (persistence); RFC 9110 §5.5-§5.6 (field values, tokens),
§8.6 (Content-Length), §10.1.1 (Expect).

Compare with: h11's ``_readers.py`` (the same jobs, done by a state machine), and llhttp,
which toy-httptools uses for them.
"""

from __future__ import annotations

import re

from toyservers import http1
from toyservers._types import Headers
from toyservers.asgi_extensions import accepts_trailers
from toyservers.http1 import HEAD_BYTES, HIGH_WATER_LIMIT, HTAB, MAX_CONTENT_LENGTH, TCHAR

HEX_DIGITS = b"0123456789abcdefABCDEF"
# ChunkedDecoder states: size -> data -> data-end -> size ... -> trailer -> done
SIZE, DATA, DATA_END, TRAILER, DONE = "size", "data", "data-end", "trailer", "done"
# HEAD_BYTES -> SP, any other byte -> NUL: with a 256-byte table ``translate`` runs CPython's
# one-lookup-per-byte loop; ``translate(None, HEAD_BYTES)`` first builds its own table each call.
_HEAD_MARKS = bytes(0x20 if byte in HEAD_BYTES else 0 for byte in range(256))
_EMPTY_LINES = re.compile(rb"\A(?:\r\n)+")  # CRLFs before a request line: one pass, not a loop


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
    # The bytes outside HEAD_BYTES are forbidden ones and CR/LF: two per CRLF, else a bare CR/LF
    # (RFC 9112 §2.2: we take the strict side of "MAY recognize a single LF as a line end").
    others = buffer.translate(_HEAD_MARKS).count(0) - 2 * buffer.count(b"\r\n")
    if others > 1 or (others == 1 and not buffer.endswith(b"\r")):  # a CR may await its LF
        raise BadRequest(400, "invalid character or bare CR/LF in the request head")


def split_head(data: bytes, max_request_line: int, max_header_size: int,
               max_headers: int) -> tuple[bytes | None, bytes]:
    """``(head, rest)``: the whole request head at the front of ``data`` (the bytes before its
    blank line) and the bytes after that blank line; ``(None, data)`` while the head is
    unfinished, once ``check_partial_head`` found nothing wrong with it yet. Empty lines before
    it are dropped (RFC 9112 §2.2: "a server ... SHOULD ignore at least one empty line (CRLF)
    received prior to the request-line"), from ``rest`` too. On ``bytes`` (toy-raw's buffer)
    one ``partition`` finds the blank line and cuts both pieces, where a bytearray took a find,
    a slice, a copy and a del."""
    if data and data[0] == 13:  # CR first: empty lines, or a line end cut in two
        data = _EMPTY_LINES.sub(b"", data, 1)
    head, blank, rest = data.partition(b"\r\n\r\n")
    if not blank:
        check_partial_head(data, max_request_line, max_header_size, max_headers)
        return None, data
    return head, rest


def take_head(buffer: bytearray, max_request_line: int, max_header_size: int,
              max_headers: int) -> bytes | None:
    """``split_head`` on a bytearray (toy-wsgi's buffer): the head, cut off its front."""
    head, rest = split_head(bytes(buffer), max_request_line, max_header_size, max_headers)
    del buffer[:len(buffer) - len(rest)]
    return head


# Names already checked, so a request skips the work it was done for: the methods of RFC 9110
# §9 (and PATCH), as ``str``; field names seen before, as received -> lowercased (up to 1,024
# names of up to 64 bytes, shared by all connections and threads). Both hold only names that
# passed the check, so a hit gives the answer the check would. These, the _HEAD_MARKS table
# and body_framing's set of framing fields and known Host values took toy-raw from 143.2k
# to 132.4k instructions per POST/JSON request with 3 fields under callgrind (uvloop; 171.7k to
# 161.1k on asyncio): a translate with deletechars costs ~1,600, a dict hit ~300.
METHODS = {name.encode(): name for name in ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT",
                                            "OPTIONS", "TRACE", "PATCH")}
_field_names: dict[bytes, bytes] = {}
MAX_KNOWN_NAMES, MAX_KNOWN_NAME_SIZE = 1024, 64


def parse_fields(lines: list[bytes]) -> Headers:
    """Split field lines (RFC 9112 §5: field-name ":" OWS field-value OWS) into ASGI headers.

    400 for obs-fold, no colon, or a name that is not a token, as with whitespace before the
    colon (RFC 9112 §5.1: "A server MUST reject, with a response status code of 400")."""
    headers = []
    known = _field_names
    for line in lines:
        name, colon, value = line.partition(b":")
        lowered = known.get(name)
        if lowered is None or not colon:
            lowered = _field_name(line, name, colon)
        # The line holds no control byte but HTAB (checked before), so strip() takes exactly
        # the OWS (SP, HTAB), and faster than strip(b" \t"): 0.55k instructions a request.
        headers.append((lowered, value.strip()))
    return headers


def _field_name(line: bytes, name: bytes, colon: bytes) -> bytes:
    """Check a field name not seen before (see ``parse_fields``); its lowercase form."""
    if not colon or not name or name.translate(None, TCHAR):
        if line[:1] in (b" ", b"\t"):  # RFC 9112 §5.2: obs-fold, refused with 400
            raise BadRequest(400, "obsolete line folding or whitespace before a field")
        raise BadRequest(400, "invalid field line" if colon else "field line without a colon")
    lowered = name.lower()
    if len(_field_names) < MAX_KNOWN_NAMES and len(name) <= MAX_KNOWN_NAME_SIZE:
        _field_names[name] = lowered
    return lowered


# --8<-- [start:parse_request_head]
def parse_request_head(head: bytes, max_request_line: int = 8192, max_header_size: int = 16384,
                       max_headers: int = 100) -> tuple[str, bytes, str, Headers]:
    """Parse the bytes before the blank line that ends a request head (RFC 9112 §2.1) into
    ``(method, target, "1.1" or "1.0", headers)`` (1.2 and later minors answer as 1.1, RFC 9110
    §6.2). BadRequest: 400 malformed, 414 or 431 over the limits, 505 not HTTP/1."""
    lines = head.split(b"\r\n")
    # Bytes outside HEAD_BYTES are forbidden, but for the CR and LF of each CRLF (RFC 9112 §2.2).
    if head.translate(_HEAD_MARKS).count(0) != 2 * (len(lines) - 1):
        raise BadRequest(400, "invalid character or bare CR/LF in the request head")
    request_line = lines[0]
    if len(request_line) > max_request_line:
        raise BadRequest(414, "request line too long")
    # (the fields' bytes are summed only when the whole head is over the limit)
    if (len(head) > max_header_size and len(head) - len(request_line) - 2 > max_header_size) \
            or len(lines) > max_headers + 1:
        raise BadRequest(431, "header block too large")
    # RFC 9112 §3: request-line = method SP request-target SP HTTP-version (single spaces); a
    # failed unpacking, not a length check first (try costs nothing in CPython 3.11)
    try:
        method, target, version = request_line.split(b" ")
    except ValueError:
        raise BadRequest(400, "malformed request line") from None
    method_name = METHODS.get(method)
    if method_name is None:
        if not method or method.translate(None, TCHAR):
            raise BadRequest(400, "invalid method")
        method_name = method.decode("ascii")
    if not target or not target.isascii() or HTAB in target:  # forms: split_target
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
    return method_name, target, http_version, parse_fields(lines[1:])
# --8<-- [end:parse_request_head]


# --8<-- [start:body_framing]
FRAMING_FIELDS = frozenset({b"content-length", b"transfer-encoding", b"host", b"connection",
                            b"expect", b"upgrade", b"te"})  # TE: may the response trail?
_known_hosts: set[bytes] = set()  # Host values found valid (up to 1,024, of up to 255 bytes)


def body_framing(http_version: str, headers: Headers
                 ) -> tuple[int | None, bool, bool, bool, bytes, bool]:
    """How the request body ends, and whether the connection persists (RFC 9112 §6, §9.3):
    ``(content_length or None, chunked, keep_alive, expect_100, upgrade, trailers)``:
    ``expect_100`` when the client waits for ``100 Continue`` (RFC 9110 §10.1.1), ``upgrade``
    the Upgrade field's value (b"" without one, and in HTTP/1.0, which RFC 9110 §7.8 says to
    ignore), ``trailers`` when TE lists them (``asgi_extensions.accepts_trailers``).
    BadRequest: 400 for bad framing or Host (``http1.host_status``), 501 for a coding but
    chunked (``http1.transfer_coding_status``)."""
    content_length: int | None = None
    host: bytes | None = None  # RFC 9112 §3.2: one Host line, no more (a value, not a list)
    codings: list[bytes] = []  # the Transfer-Encoding lines: one list (RFC 9110 §5.3)
    connection = upgrade = b""
    chunked = expect_100 = trailers = False
    for name, value in headers:
        if name not in FRAMING_FIELDS:  # most fields: one set lookup
            continue
        if name == b"content-length":
            # RFC 9110 §8.6: 1*DIGIT, given once; past 2**63 - 1, "invalid" (RFC 9112 §6.3).
            if content_length is not None or not value.isdigit() or len(value) > 19:
                raise BadRequest(400, "invalid or repeated Content-Length")
            content_length = int(value)
            if content_length > MAX_CONTENT_LENGTH:
                raise BadRequest(400, "invalid or repeated Content-Length")
        elif name == b"transfer-encoding":
            codings.append(value)
        elif name == b"host":
            if host is not None:
                raise BadRequest(400, "repeated Host")
            host = value
        elif name == b"connection":
            connection += b"," + value
        elif name == b"upgrade":
            upgrade += b"," + value if upgrade else value
        elif name == b"te":  # its lines, one list (RFC 9110 §5.3)
            trailers = trailers or accepts_trailers(value)
        else:  # Expect
            expect_100 = value.lower() == b"100-continue"
    # A Host value already found valid skips the regular expression (the set holds only values
    # http1.host_status passed, so a hit is its answer).
    if host not in _known_hosts:
        if http1.host_status([] if host is None else [host], http_version):
            raise BadRequest(400, "missing or invalid Host")
        if host is not None and len(_known_hosts) < MAX_KNOWN_NAMES and len(host) <= 255:
            _known_hosts.add(host)
    if codings:
        status = http1.transfer_coding_status(b",".join(codings), http_version,
                                              content_length is not None)
        if status:
            raise BadRequest(status, "a Transfer-Encoding we cannot or may not read")
        chunked = True
    # RFC 9112 §9.3: 1.1 persists unless "close"; 1.0 only when it asks for keep-alive.
    if connection:
        tokens = http1.list_elements(connection)
        keep_alive = b"close" not in tokens and (http_version == "1.1" or b"keep-alive" in tokens)
    else:
        keep_alive = http_version == "1.1"
    if http_version != "1.1":  # RFC 9110 §10.1.1 and §7.8: 1.0 has neither
        expect_100, upgrade = False, b""
    # (Host, chunked and expect_100 as values set in the loop, and parse_request_head's
    # checks skipping work that cannot fail: 26.5k -> 25.0k instructions for the two calls
    # on a POST with 3 fields, callgrind)
    return content_length, chunked, keep_alive, expect_100, upgrade, trailers
# --8<-- [end:body_framing]


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
                else:  # chunk extensions, leading zeros past 16 digits, or an error
                    if line[:2] == b"00":  # RFC 9112 §7.1: chunk-size = 1*HEXDIG; zeros in
                        line = line.lstrip(b"0")  # front add no bits, so are not counted
                        if not line[:1].isalnum():  # the size was zero: keep one digit
                            line.insert(0, ord("0"))
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


def take_counted(buffer: bytearray, remaining: int) -> bytes:
    """Up to ``remaining`` bytes off the front of ``buffer``: a counted body's (Content-Length,
    RFC 9112 §6.2), the rest being the next request's."""
    if len(buffer) <= remaining:  # all of it body: no slice
        data = bytes(buffer)
        buffer.clear()
        return data
    data = bytes(buffer[:remaining])
    del buffer[:remaining]
    return data


class BodyReader:
    """A request body taken off a connection's buffer as it comes, whichever its framing: the
    Content-Length's bytes counted (RFC 9112 §6.2), or the chunked coding decoded by a
    ``ChunkedDecoder`` (§7.1) and counted against ``max_body`` bytes (None: no limit; a
    Content-Length over it was refused before, from the head). toy-raw and toy-wsgi read with it.

    ``feed(buffer, limit)`` returns the body bytes the buffer holds (at most ``limit`` of a
    chunked body, all that is owed of a counted one), cutting them off; once ``done``, the rest
    of the buffer is the next request's. ``remaining``: the declared bytes still to come, None
    for a chunked body. BadRequest: 413 past ``max_body``, and ``ChunkedDecoder``'s errors.
    """

    __slots__ = ("remaining", "decoder", "received", "max_body", "done")

    def __init__(self, content_length: int | None, chunked: bool, max_body: int | None,
                 max_trailer_size: int = 16384, max_trailers: int = 100) -> None:
        self.decoder = ChunkedDecoder(max_trailer_size=max_trailer_size,
                                      max_trailers=max_trailers) if chunked else None
        self.remaining: int | None = None if chunked else content_length or 0
        self.received = 0  # chunked body bytes decoded so far
        self.max_body = max_body
        self.done = not chunked and not content_length

    def feed(self, buffer: bytearray, limit: int = HIGH_WATER_LIMIT) -> bytes:
        decoder = self.decoder
        if decoder is None:  # counted: take what is there, up to what is owed
            remaining = self.remaining or 0
            data = take_counted(buffer, remaining)
            self.remaining = remaining = remaining - len(data)
            self.done = not remaining
            return data
        data = decoder.feed(buffer, limit)
        self.received += len(data)
        if self.max_body is not None and self.received > self.max_body:
            raise BadRequest(413, "request body too large")  # RFC 9110 §15.5.14
        self.done = decoder.done
        return data

