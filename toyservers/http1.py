"""The HTTP/1.1 rules every toy server shares: grammar, request checks, error responses, framing.

A server module keeps how it *reads* bytes (by hand, through llhttp or through h11); what the
RFCs say about those bytes is written here once, so the three servers cannot disagree:

- the grammar pieces (``TCHAR``, ``is_token``, ``bad_field_value``, the chunk-size line, the Host
  value, the HTTP-version) and the status lines;
- the request checks a parser may leave to its caller: ``transfer_coding_status`` (RFC 9112
  §6.1, §6.3), ``host_status`` (§3.2), both with the version and body limit in ``head_status``,
  ``split_target`` (§3.2, the four request-target forms);
- ``error_response``: the whole response a server sends when it refuses a request, then closes;
- ``ResponseFramer``: for servers that frame responses by hand (toy-raw, toy-httptools), the
  status line, the checked fields and the body framing (Content-Length, chunked with or
  without trailers, or close-delimited for HTTP/1.0).
Every check quotes the clause it enforces. Nothing here touches a socket or the event loop.

Spec: RFC 9112 §2-§7 and §9; RFC 9110 §5.5-§5.6 (field values, tokens), §6.4.1 (no content),
§6.6.1 (Date), §8.6 (Content-Length), §15 (status codes).

Compare with: h11's ``_abnf.py`` and ``_writers.py``; uvicorn's ``httptools_impl.py`` ``send``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from http import HTTPStatus

from toyservers._types import Headers

# --- grammar --------------------------------------------------------------------------------------

# RFC 9110 §5.6.2: token = 1*tchar; a byte string is a token when deleting these leaves nothing.
TCHAR = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
# RFC 9110 §5.5: field-vchar = VCHAR / obs-text, with SP and HTAB between; every other control
# byte (NUL, CR, LF, DEL, ...) is invalid in a field value, sent or received.
bad_field_value = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]").search
# The bytes a request head may hold besides its CRLF line ends: HTAB, SP, VCHAR and obs-text.
# Deleting them with bytes.translate leaves only forbidden bytes and CR/LF (RFC 9112 §2.2).
HEAD_BYTES = b"\t" + bytes(range(0x20, 0x7F)) + bytes(range(0x80, 0x100))
# RFC 9112 §2.3: HTTP-version = "HTTP/" DIGIT "." DIGIT
HTTP_VERSION = re.compile(rb"HTTP/([0-9])\.([0-9])")
# RFC 9112 §3.2 with RFC 3986 §3.2.2-§3.2.3: Host = uri-host [ ":" port ], where uri-host is an
# IP-literal in brackets or a reg-name of unreserved, pct-encoded and sub-delims characters.
HOST_VALUE = re.compile(rb"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9\-._~!$&'()*+,;=%]*)(?::[0-9]*)?")
# RFC 9112 §7.1: chunk-size [ chunk-ext ] CRLF, where
#   chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
#   chunk-ext-val = token / quoted-string    (quoted-string: RFC 9110 §5.6.4)
# The size is at most 16 hex digits: larger overflows 64 bits (§7.1: "anticipate ... overflow").
_TOKEN = rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+"
_QUOTED = rb'"(?:[\t !#-\[\]-~\x80-\xff]|\\[\t -~\x80-\xff])*"'
CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})(?:[ \t]*;[ \t]*%s(?:[ \t]*=[ \t]*(?:%s|%s))?)*"
                        % (_TOKEN, _TOKEN, _QUOTED))
# A byte looked for by its code: ``b"#" in target`` first tries b"#" as an integer and formats
# the TypeError (1.9k instructions on CPython 3.11, callgrind); ``FRAGMENT in target``: memchr.
FRAGMENT, HTAB = ord("#"), ord("\t")  # RFC 3986 §3.5: a fragment begins at "#"
MAX_CHUNK_LINE = 4096  # bytes in one chunk-size line, extensions included (ours, not the RFC's)
HIGH_WATER_LIMIT = 64 * 1024  # bytes of request body buffered for the app before reading pauses
MAX_CONTENT_LENGTH = 2**63 - 1  # larger is an overflow: RFC 9112 §6.3 p5, "invalid"


def is_token(data: bytes) -> bool:
    """True when ``data`` is a non-empty RFC 9110 §5.6.2 token (methods, field names)."""
    return bool(data) and not data.translate(None, TCHAR)


def list_elements(value: bytes) -> list[bytes]:
    """The non-empty elements of a comma-separated field value, OWS stripped, lowercased
    (RFC 9110 §5.6.1: "a recipient MUST ... ignore ... empty list elements")."""
    return [e for e in (item.strip(b" \t").lower() for item in value.split(b",")) if e]


# --- status lines ---------------------------------------------------------------------------------


def _status_line(code: int) -> bytes:
    try:
        return b"HTTP/1.1 %d %s\r\n" % (code, HTTPStatus(code).phrase.encode())
    except ValueError:  # RFC 9112 §4: the reason-phrase may be empty
        return b"HTTP/1.1 %d \r\n" % code


STATUS_LINES = {code: _status_line(code) for code in range(100, 600)}
"""The status line for every RFC 9110 §15 code, 100-599 (unregistered ones have no phrase)."""
# RFC 9113 §3.4: an HTTP/2 client's first 24 bytes, built to fail as an HTTP/1.1 request.
H2_PREFACE_BYTES = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
CONTINUE_100 = b"HTTP/1.1 100 Continue\r\n\r\n"  # RFC 9110 §15.2.1, as an interim response
LAST_CHUNK = b"0\r\n\r\n"  # RFC 9112 §7.1: last-chunk, then an empty trailer section


def reason(status: int) -> bytes:
    """The registered reason phrase of ``status`` (``b"Not Found"``), or ``b""``."""
    return STATUS_LINES[status][13:-2]


# --- request checks -------------------------------------------------------------------------------


def transfer_coding_status(value: bytes, http_version: str, has_content_length: bool) -> int:
    """Check a request's Transfer-Encoding (all its field lines joined with ``,``).

    Returns 0 when the body is chunked and may be read, else the status to answer (then close):
    400 with Content-Length beside it (RFC 9112 §6.1: how requests are smuggled; a server MAY
    reject it, and we do), in HTTP/1.0 (§6.1: "faulty framing"), when chunked is not the final
    coding (§6.3 rule 4: "MUST respond with a 400") or is applied twice (§7); 501 for a coding
    we cannot undo before chunked (§6.1: "SHOULD respond with 501").
    """
    codings = list_elements(value)
    if has_content_length or http_version == "1.0":
        return 400
    if not codings or codings[-1] != b"chunked" or b"chunked" in codings[:-1]:
        return 400
    return 501 if len(codings) > 1 else 0


def host_status(hosts: list[bytes], http_version: str) -> int:
    """400 when the Host fields break RFC 9112 §3.2, else 0.

    "A server MUST respond with a 400 (Bad Request) status code to any HTTP/1.1 request
    message that lacks a Host header field and to any request message that contains more than
    one Host header field line or a Host header field with an invalid field value."
    """
    if len(hosts) > 1 or (not hosts and http_version != "1.0"):
        return 400
    if hosts and HOST_VALUE.fullmatch(hosts[0]) is None:
        return 400
    return 0


def head_status(version: str, hosts: list[bytes], te: bytes | None,
                content_length: bytes | None, max_body: int | None) -> tuple[int, str]:
    """Check a request head a parser let through: ``(status, version)``.

    ``status`` is 0 when the request may go to the app, else the status to refuse it with;
    ``version`` is the one it is served as ("1.0" or "1.1"). The arguments: the version as
    parsed ("major.minor"), the Host field values, the Transfer-Encoding lines joined with
    ``,`` (RFC 9110 §5.3), the Content-Length value (1*DIGIT) and the server's body limit.
    """
    if version == "0.9":
        return 400, version  # RFC 9112 §3: the version is required; there is no HTTP/0.9
    if version[0] != "1":
        return 505, version  # RFC 9110 §15.6.6: another major version
    if version != "1.0":
        version = "1.1"  # RFC 9110 §6.2: a higher 1.x minor is served as 1.1
    status = host_status(hosts, version)
    if not status and te is not None:
        status = transfer_coding_status(te, version, content_length is not None)
    if not status and max_body is not None and content_length is not None:
        if int(content_length) > max_body:
            status = 413  # RFC 9110 §15.5.14: refused before the body is read
    return status, version


class BadTarget(ValueError):
    """A request-target of none of the four forms of RFC 9112 §3.2 (answer 400)."""


def split_target(method: str, target: bytes) -> tuple[bytes, bytes]:
    """Split a request-target into ``(raw_path, query_string)`` (RFC 9112 §3.2).

    - origin-form ``/p?q`` (§3.2.1);
    - absolute-form ``http://host/p?q`` (§3.2.2: "a server MUST accept the absolute-form"):
      its path and query, ``/`` when the path is empty;
    - asterisk-form ``*``, for OPTIONS only (§3.2.4);
    - authority-form ``host:port``, for CONNECT only (§3.2.3): kept whole.

    Raises BadTarget for any other shape, for a fragment (§3.2: none in a request-target), and
    for bytes outside visible ASCII.
    """
    if target[:1] == b"/" and method != "CONNECT":
        if b"#" in target:
            raise BadTarget("a fragment in the request-target")
        raw_path, _, query = target.partition(b"?")
        return raw_path, query
    if not target.isascii() or b"#" in target or b" " in target or b"\t" in target:
        raise BadTarget("invalid request-target")
    if target == b"*":
        if method != "OPTIONS":
            raise BadTarget("asterisk-form is for OPTIONS only")
        return target, b""
    if method == "CONNECT":
        if b"/" in target or HOST_VALUE.fullmatch(target) is None or b":" not in target:
            raise BadTarget("CONNECT needs authority-form: host:port")
        return target, b""
    scheme, sep, rest = target.partition(b"://")
    if not sep or scheme.lower() not in (b"http", b"https"):
        raise BadTarget("not origin-, absolute-, authority- or asterisk-form")
    authority_path, _, query = rest.partition(b"?")
    slash = authority_path.find(b"/")
    authority = authority_path if slash < 0 else authority_path[:slash]
    if not authority or HOST_VALUE.fullmatch(authority.rpartition(b"@")[2]) is None:
        raise BadTarget("absolute-form without a valid authority")
    return (authority_path[slash:] if slash >= 0 else b"/"), query


# --- responses ------------------------------------------------------------------------------------


def error_response(status: int, default_headers: bytes, *, head: bool = False) -> bytes:
    """A whole ``text/plain`` response that ends the connection, as bytes for the wire.

    ``default_headers`` are the server's framed ``Date``/``Server`` lines
    (``ServerState.default_headers_bytes``); ``head``: the request was HEAD, so the body is
    left out while Content-Length still says its size (RFC 9110 §9.3.2). The response says
    ``Connection: close`` (RFC 9112 §9.6) and the caller closes after writing it.
    """
    body = reason(status) or b"Error"
    return b"%s%scontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n" \
        b"connection: close\r\n\r\n%s" % (STATUS_LINES[status], default_headers, len(body),
                                          b"" if head else body)


class ResponseError(RuntimeError):
    """The app's response cannot be framed: a bad status, field or body length.

    Raised from ``send()``, so the app sees it; the server answers 500 when nothing was
    written yet, else closes the connection (``toyservers.asgi.RequestResponseCycle``).
    """


class ResponseFields:
    """The checked fields of an app's ``http.response.start`` (ASGI HTTP spec 2.4).

    ``check_response(status, headers, default_headers)`` builds one. Attributes: ``lines``
    (the fields framed as ``name: value\\r\\n`` bytes, the server's ``Date``/``Server`` added
    unless the app set its own: RFC 9110 §6.6.1 lets an origin send its own Date),
    ``content_length`` (int or None), ``close`` (the app said ``Connection: close``).
    """

    __slots__ = ("lines", "content_length", "close")

    def __init__(self, lines: list[bytes], content_length: int | None, close: bool) -> None:
        self.lines, self.content_length, self.close = lines, content_length, close


# What the checks below found valid before, so a response like the last one skips their work:
# field names found to be tokens, as the app wrote them -> lowercased, and values found free
# of control bytes (1,024 of each at most, values up to 256 bytes, shared by all connections
# and threads; only what passed is added, so a hit gives the check's answer). Instructions per
# POST/JSON request on toy-httptools (callgrind): the values 106.2k -> 103.7k (a regex over
# the joined values cost 3.0k), the names 103.2k -> 102.3k (lower() and a set lookup).
_known_names: dict[bytes, bytes] = {}
_known_values: set[bytes] = set()
MAX_KNOWN, MAX_KNOWN_VALUE_SIZE = 1024, 256
_SPECIAL = frozenset({b"content-length", b"transfer-encoding", b"connection", b"date",
                      b"server", b"upgrade", b"keep-alive", b"te",
                      b"proxy-connection"})


def check_response(status: object, headers: Iterable[tuple[bytes, bytes]],
                   default_headers: Headers, framed_defaults: bytes | None = None
                   ) -> ResponseFields:
    """Check what an app sends in ``http.response.start`` as strictly as a request.

    ``status`` must be an int from 200 to 599 (RFC 9110 §15: 1xx are interim, never final);
    each header a pair of bytes: a token name (§5.6.2), a value without control bytes (§5.5,
    which also keeps CR/LF from forging lines). Content-Length must be 1*DIGIT and given once
    (§8.6). The framing belongs to the server: an app's ``Transfer-Encoding: chunked`` is
    dropped (the server chooses chunked itself where it may), any other Transfer-Encoding, an
    ``Upgrade``, ``Keep-Alive``, ``TE`` or ``Proxy-Connection`` field is refused (hop-by-hop
    fields, RFC 9110 §7.6.1; not ``Trailer``: §6.6.2), and ``Connection`` may only say
    ``close`` or ``keep-alive``. ``default_headers`` (the server's Date and Server) are added
    after the app's, except a name the app set itself; ``framed_defaults``, the same already
    framed (``ServerState.default_headers_bytes``), is added as one piece when the app set
    neither.

    Raises ResponseError with what is wrong.
    """
    lines: list[bytes] = []
    content_length, close = check_fields(status, headers, default_headers, framed_defaults,
                                         lines, status_line=False)
    return ResponseFields(lines, content_length, close)


def check_fields(status: object, headers: Iterable[tuple[bytes, bytes]],
                 default_headers: Headers, framed_defaults: bytes | None, lines: list[bytes],
                 status_line: bool) -> tuple[int | None, bool]:
    """``check_response``'s work, appending the framed fields to ``lines`` (after the status
    line, with ``status_line``); returns ``(content_length, close)``. The framers' ``start``
    call it directly, so the hot path builds no other object (and pass ``status_line`` by
    position: as a keyword it cost 0.2k instructions a request, callgrind)."""
    if type(status) is not int or not 200 <= status <= 599:
        raise ResponseError(f"invalid status {status!r}: a final status is 200-599")
    if status_line:
        lines.append(STATUS_LINES[status])
    first = len(lines)  # the fields start here
    content_length: int | None = None
    close = own_defaults = False
    try:
        for name, value in headers:
            lowered = _known_names.get(name)
            if lowered is None:
                lowered = name.lower()
                if not is_token(lowered):
                    raise ResponseError(f"invalid response header name {name!r}")
                if len(_known_names) < MAX_KNOWN and type(name) is bytes:
                    _known_names[name] = lowered
            name = lowered
            if name in _SPECIAL:
                if name == b"content-length":
                    if content_length is not None or not value.isdigit() or len(value) > 18:
                        raise ResponseError(f"invalid or repeated Content-Length {value!r}")
                    content_length = int(value)
                    lines += (name, b": ", value, b"\r\n")
                    continue  # digits only: no control byte
                elif name == b"transfer-encoding":
                    if list_elements(value) != [b"chunked"]:
                        raise ResponseError(f"Transfer-Encoding {value!r}: the server frames")
                    continue  # the server decides: chunked on 1.1, close-delimited on 1.0
                elif name == b"connection":
                    tokens = list_elements(value)
                    if not set(tokens) <= {b"close", b"keep-alive"}:
                        raise ResponseError(f"Connection {value!r}: only close or keep-alive")
                    close = close or b"close" in tokens
                    continue  # the server writes its own Connection field
                elif name == b"date" or name == b"server":
                    own_defaults = True
                else:
                    raise ResponseError(f"hop-by-hop header {name!r} is the server's")
            if type(value) is not bytes or value not in _known_values:
                if bad_field_value(value):  # also refuses a value that is not bytes-like
                    raise ResponseError(f"invalid value for response header {name!r}")
                if len(_known_values) < MAX_KNOWN and len(value) <= MAX_KNOWN_VALUE_SIZE \
                        and type(value) is bytes:
                    _known_values.add(value)
            lines += (name, b": ", value, b"\r\n")
    except (TypeError, ValueError, AttributeError) as exc:  # not pairs of byte strings
        raise ResponseError(f"response headers must be pairs of byte strings: {exc}") from None
    if not own_defaults and framed_defaults is not None:
        lines.append(framed_defaults)
    else:
        taken = set(lines[first::4]) if own_defaults else ()
        for name, value in default_headers:
            if name not in taken:
                lines += (name, b": ", value, b"\r\n")
    return content_length, close


class ResponseFramer:
    """Frame one response on an HTTP/1.1 connection by hand: the head, then the body.

    ``start(status, headers, default_headers)`` checks the fields (``check_response``) and
    holds the head; the first ``body(data, more_body)`` decides the framing and returns the
    head with the first bytes (pieces for one ``writelines``), so a small response leaves in
    one write:

    - the app's Content-Length (RFC 9112 §6.2), whose promise ``body`` keeps (ResponseError
      when the body runs over; ``short`` tells the caller it ran under, and it must close);
    - else, when the whole body is in the first message, a Content-Length of its size;
    - else chunked on HTTP/1.1 (§7.1), or on HTTP/1.0 a body ended by closing (§6.3 rule 8);
    - no content at all after HEAD, 204 and 304 (RFC 9110 §6.4.1), the head as it was given;
    - chunked, then a trailer section (RFC 9112 §7.1.2): ``expect_trailers``, then ``end``.

    Attributes: ``keep_alive`` (False once the response must end the connection: the caller
    closes after the last body), ``status``, ``head_sent``.
    """

    __slots__ = ("head_request", "http10", "keep_alive", "status", "parts", "head_sent",
                 "no_body", "chunked", "remaining")

    def __init__(self, head_request: bool, http10: bool, keep_alive: bool) -> None:
        self.head_request, self.http10, self.keep_alive = head_request, http10, keep_alive
        self.status = 0
        self.parts: list[bytes] = []  # the head, until the first body message
        self.head_sent = self.no_body = self.chunked = False
        self.remaining: int | None = None  # Content-Length bytes still owed

    def start(self, status: object, headers: Iterable[tuple[bytes, bytes]],
              default_headers: Headers, framed_defaults: bytes | None = None) -> None:
        """Check and keep the head of the app's response (the arguments are
        ``check_response``'s). Raises ResponseError."""
        parts: list[bytes] = []
        self.parts = parts
        self.remaining, close = check_fields(status, headers, default_headers,
                                             framed_defaults, parts, True)
        assert type(status) is int  # checked above
        self.status = status
        if close:
            self.keep_alive = False
        self.no_body = self.head_request or status == 204 or status == 304

    def body(self, body: bytes, more_body: bool) -> list[bytes]:
        """The bytes to write for one ``http.response.body`` message, as pieces for one
        ``transport.writelines`` (some may be empty). ``body`` is a piece of its own, never
        copied behind the head: joining them copied the 430,000 bytes of ``bench servers``'
        long body, 430k instructions a request, as much as the rest of the request
        (callgrind); a writev of two pieces costs no more than a write of one.

        Raises ResponseError when ``body`` is not bytes or runs past the Content-Length, or
        when the whole body, in one message, falls short of it (nothing is written yet).
        """
        if type(body) is not bytes:
            raise ResponseError(f"response body must be bytes, not {type(body).__name__}")
        if self.remaining is not None and not self.no_body:  # checked before the head is
            self.remaining -= len(body)  # taken: when this raises, nothing was written yet
            if self.remaining < 0:
                raise ResponseError("response body longer than its Content-Length")
            if self.remaining and not more_body and not self.head_sent:  # a 500 still can go
                raise ResponseError("response body shorter than its Content-Length")
        head = b""
        if not self.head_sent:  # the first body message: frame the head (not a method of its
            parts = self.parts  # own: the call cost 0.6k instructions a request, callgrind)
            if self.remaining is None and not (self.status == 204 or self.status == 304):
                if not more_body:
                    if not self.no_body or body:
                        parts.append(b"content-length: %d\r\n" % len(body))
                elif not self.http10:
                    parts.append(b"transfer-encoding: chunked\r\n")
                    self.chunked = not self.no_body
                else:
                    self.keep_alive = False  # RFC 9112 §6.3 rule 8: 1.0 body ends at the close
            if not self.keep_alive:
                parts.append(b"connection: close\r\n")
            elif self.http10:
                parts.append(b"connection: keep-alive\r\n")  # RFC 9112 §C.2.2: 1.0 is told
            parts.append(b"\r\n")
            self.head_sent = True
            head = b"".join(parts)
        if self.no_body:
            return [head]
        if self.chunked:  # RFC 9112 §7.1: chunk-size in hex CRLF chunk-data CRLF
            pieces = [head, b"%x\r\n" % len(body), body, b"\r\n"] if body else [head]
            if not more_body:
                pieces.append(LAST_CHUNK)
            return pieces
        return [head, body]

    def expect_trailers(self) -> None:
        """A trailer section will end the message (RFC 9112 §7.1.2): chunked, the app's
        Content-Length dropped (§6.1: "MUST NOT send a Content-Length header field in any
        message that contains a Transfer-Encoding"); each body framed as if more came."""
        if self.remaining is not None:  # its name is at 1 + 4k: after the status line
            at = self.parts[1::4].index(b"content-length") * 4 + 1
            del self.parts[at:at + 4]
            self.remaining = None

    def end(self, lines: list[bytes]) -> list[bytes]:
        """The last chunk, then the trailer section of ``lines`` (``name: value\\r\\n``)."""
        return [b"0\r\n", *lines, b"\r\n"]

    def continue_bytes(self) -> bytes:
        """``100 Continue`` (RFC 9110 §15.2.1) while no byte of the response is out, else b""
        (an interim response after the final one would be read as garbage)."""
        return b"" if self.head_sent else CONTINUE_100

    @property
    def short(self) -> bool:
        """The response ended before its Content-Length was sent: the connection must close
        (RFC 9112 §6.3: the client would wait for bytes that never come)."""
        return bool(self.remaining) and not self.no_body
