"""Differential reading of HTTP/1.1 requests: our parser, h11 and llhttp on the same bytes.

http-garden's method, small: feed one byte string to several parsers, each without sockets,
and compare what each understood. A reading is one comparable shape (``Reading``): the
request was refused, was still incomplete when the bytes ran out, or was read, with its
method, target, version, header list, body and the number of input bytes the request took.
That last number is where a pipelined request would start: two parsers that agree on a
request but not on its end are a request-smuggling pair.

Each parser is read as a toy server reads it, so the readings compare parsing, not policy:

- ours: ``take_head``, ``parse_request_head``, ``body_framing``, ``ChunkedDecoder``
  (toy-raw, toy-wsgi);
- h11: ``h11.Connection(h11.SERVER)``, then ``h11_checks.request_status`` (toy-h11, toy-anyio);
- llhttp: ``httptools.HttpRequestParser`` with ``lenient_version`` as toy-httptools sets it,
  fed one byte at a time so the byte that completes the request is known, then
  ``http1.head_status``.

Every server then refuses a request-target of none of the four forms (``http1.split_target``)
and CONNECT (501), so those are applied to all three readings alike.

Where a reference parser and ours disagree by design, ``KNOWN_DIFFERENCES`` says so, each
entry with the RFC clause that decides who is right and a test (``explains``) narrow enough to
match that one difference only. Anything else is a finding.

Spec: RFC 9112 §2.2, §3, §5, §6, §7.1; RFC 9110 §5.5, §5.6, §8.6.
Compare with: http-garden (narfindustries/http-garden), which does this across servers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from itertools import combinations
from typing import Literal

import h11
import httptools
from hypothesis import strategies as st

from toyservers import http1
from toyservers.config import Config
from toyservers.h11_checks import request_status
from toyservers.http1_parser import (
    BadRequest,
    ChunkedDecoder,
    body_framing,
    parse_request_head,
    take_head,
)

Verdict = Literal["request", "refused", "incomplete"]
Headers = tuple[tuple[bytes, bytes], ...]
CONFIG = Config()  # the servers' default limits: 8 KiB request line, 16 KiB and 100 fields


@dataclass(frozen=True)
class Reading:
    """What one parser understood of the front of a byte string.

    ``verdict`` is "request" (read whole), "refused" or "incomplete" (it waits for more); the
    other attributes only for a request: ``version`` as served ("1.0" or "1.1", RFC 9110
    §6.2), ``headers`` with lowercased names (trailers left out), ``body`` decoded, and
    ``consumed``, the number of input bytes the request took (its head, body and trailers).
    """

    verdict: Verdict
    method: bytes = b""
    target: bytes = b""
    version: str = ""
    headers: Headers = ()
    body: bytes = b""
    consumed: int = 0
    reason: str = field(default="", compare=False)  # why refused, for the report only


REFUSED, INCOMPLETE = Reading("refused"), Reading("incomplete")


def _served(reading: Reading) -> Reading:
    """The checks every toy server makes after its parser: the target's form, no CONNECT."""
    if reading.verdict != "request":
        return reading
    method = reading.method.decode("ascii")
    try:
        http1.split_target(method, reading.target)
    except http1.BadTarget as exc:
        return Reading("refused", reason=f"split_target: {exc}")
    if method == "CONNECT":
        return Reading("refused", reason="CONNECT (501)")
    return reading


# --- ours ----------------------------------------------------------------------------------------


def read_ours(data: bytes) -> Reading:
    """Our parser's reading of ``data``, the way toy-raw drives it."""
    buffer = bytearray(data)
    try:
        head = take_head(buffer, CONFIG.max_request_line, CONFIG.max_header_size,
                         CONFIG.max_headers)
        if head is None:
            return INCOMPLETE
        method, target, version, headers = parse_request_head(
            head, CONFIG.max_request_line, CONFIG.max_header_size, CONFIG.max_headers)
        content_length, chunked, _, _, _, _ = body_framing(version, headers)
        if chunked:
            decoder = ChunkedDecoder(max_trailer_size=CONFIG.max_header_size,
                                     max_trailers=CONFIG.max_headers)
            body = decoder.feed(buffer, len(data) + 1)
            if not decoder.done:
                return INCOMPLETE
        else:
            length = content_length or 0
            if len(buffer) < length:
                return INCOMPLETE
            body = bytes(buffer[:length])
            del buffer[:length]
    except BadRequest as exc:
        return Reading("refused", reason=f"{exc.status} {exc.reason}")
    return _served(Reading("request", method.encode(), target, version, tuple(headers), body,
                           len(data) - len(buffer)))


# --- h11 -----------------------------------------------------------------------------------------


def read_h11(data: bytes) -> Reading:
    """h11's reading of ``data`` with the checks toy-h11 adds (``h11_checks.request_status``)."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data)
    request: h11.Request | None = None
    body: list[bytes] = []
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return INCOMPLETE
            if isinstance(event, h11.Request):
                request = event
                headers = [(name.lower(), value) for name, value in event.headers.raw_items()]
                if status := request_status(event, headers, CONFIG):
                    return Reading("refused", reason=f"request_status {status}")
            elif isinstance(event, h11.Data):
                body.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
    except h11.RemoteProtocolError as exc:
        return Reading("refused", reason=f"h11: {exc}")
    assert request is not None
    version = "1.0" if request.http_version == b"1.0" else "1.1"
    return _served(Reading("request", bytes(request.method), bytes(request.target), version,
                           tuple(headers), b"".join(body), len(data) - len(conn.trailing_data[0])))


# --- llhttp --------------------------------------------------------------------------------------


class _LlhttpRequest:
    """httptools' callbacks, collecting one request (``done`` once it is complete)."""

    def __init__(self) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.head_done = self.done = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.head_done:  # llhttp reports trailer fields here too: dropped, as ours does
            self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.done = True


def read_llhttp(data: bytes) -> Reading:
    """llhttp's reading of ``data`` with toy-httptools' leniency and checks
    (``http1.head_status``). Fed a byte at a time: the byte it completes on is the boundary."""
    request = _LlhttpRequest()
    parser = httptools.HttpRequestParser(request)
    parser.set_dangerous_leniencies(lenient_version=True)
    consumed, version = 0, ""
    try:
        while not request.done and consumed < len(data):
            parser.feed_data(data[consumed:consumed + 1])
            consumed += 1
            if request.head_done and not version:  # toy-httptools: in on_headers_complete
                status, version = _llhttp_head_status(parser, request.headers)
                if status:
                    return Reading("refused", reason=f"head_status {status}")
    except httptools.HttpParserUpgrade:
        return Reading("refused", reason="llhttp: upgrade")  # the toy stops reading there
    except httptools.HttpParserError as exc:
        return Reading("refused", reason=f"llhttp: {exc}")
    if not request.done:
        return INCOMPLETE
    return _served(Reading("request", parser.get_method(), request.url, version,
                           tuple(request.headers), b"".join(request.body), consumed))


def _llhttp_head_status(parser: httptools.HttpRequestParser,
                        headers: list[tuple[bytes, bytes]]) -> tuple[int, str]:
    hosts = [value for name, value in headers if name == b"host"]
    te_lines = [value for name, value in headers if name == b"transfer-encoding"]
    length = next((value for name, value in headers if name == b"content-length"), None)
    return http1.head_status(parser.get_http_version(), hosts,
                             b",".join(te_lines) if te_lines else None, length, None)


READERS: dict[str, Callable[[bytes], Reading]] = {"h11": read_h11, "llhttp": read_llhttp}


# --- known differences ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """A disagreement between ``parser`` and ours that is intended, with the clause that says
    who is right. Three shapes, by what ``change`` is given:

    - ``rewrite`` (bytes -> bytes, or None when it does not apply) and ``lenient="them"``: the
      parser accepts what we refuse. Explained when we refuse, it reads a request (or waits
      for more), and we read the rewritten bytes (the input as the lenient parser understood
      it) just so;
    - ``rewrite`` and ``lenient="us"``: we accept what the parser refuses. Explained when the
      parser reads the rewritten bytes as we read the input;
    - ``rewrite`` and ``lenient="early"``: we refuse a request the parser still waits on, as
      ``check_partial_head`` refuses an unfinished head that can no longer be valid. Explained
      when the parser refuses the rewritten (completed) bytes too;
    - ``adjust`` (Reading -> Reading): both read a request and the parser presents a value
      otherwise. Explained when the two readings, both adjusted, are equal.

    ``ours_as`` maps our reading to the one the parser gives of the rewritten bytes, where the
    rewrite changes more than the request's length (a method llhttp does not know, say).

    A rewrite that moves the end of the request moves ``consumed`` by as many bytes, no more.
    """

    name: str
    parser: str
    clause: str
    rewrite: Callable[[bytes], bytes | None] | None = None
    lenient: Literal["them", "us", "early"] = "them"
    adjust: Callable[[Reading], Reading] | None = None
    ours_as: Callable[[Reading], Reading] = lambda reading: reading


def _shifted(reading: Reading, by: int) -> Reading:
    return replace(reading, consumed=reading.consumed + by) if reading.verdict == "request" \
        else reading


def _same(parser: str, ours: Reading, theirs: Reading) -> bool:
    """Equal once ``parser``'s known presentation differences (``adjust``) are undone."""
    if ours == theirs:
        return True
    for difference in KNOWN_DIFFERENCES:
        if difference.parser == parser and difference.adjust is not None \
                and ours.verdict == theirs.verdict == "request":
            ours, theirs = difference.adjust(ours), difference.adjust(theirs)
    return ours == theirs


def explained_by(parser: str, data: bytes, ours: Reading, theirs: Reading) -> list[str]:
    """The names of the known differences that explain why ``parser`` read ``data`` as
    ``theirs`` where we read ``ours``; empty for a finding."""
    names = []
    if ours.verdict == theirs.verdict == "request" and _same(parser, ours, theirs):
        names = [d.name for d in KNOWN_DIFFERENCES if d.parser == parser and d.adjust is not None
                 and (d.adjust(theirs) != theirs or d.adjust(ours) != ours)]
    rewrites = [d for d in KNOWN_DIFFERENCES if d.parser == parser and d.rewrite is not None]
    for difference in rewrites:
        if _rewrite_explains(difference, parser, data, ours, theirs):
            names.append(difference.name)
    if not names:  # two leniencies at once (a bare LF and an obs-fold, say): their rewrites
        for lenient in ("them", "us"):
            chain = [d for d in rewrites if d.lenient == lenient and d.rewrite is not None
                     and d.rewrite(data) not in (None, data)]
            for size in range(2, len(chain) + 1):
                for combination in combinations(chain, size):
                    rewritten = data
                    for difference in combination:
                        assert difference.rewrite is not None
                        rewritten = difference.rewrite(rewritten) or rewritten
                    composed = Difference("", parser, "", _always(rewritten), lenient,
                                          ours_as=_chained([d.ours_as for d in combination]))
                    if _rewrite_explains(composed, parser, data, ours, theirs):
                        return [d.name for d in combination]
    return names


_HEAD_END = re.compile(rb"\r?\n\r?\n")


def _in_head(data: bytes, change: Callable[[bytes], bytes]) -> bytes:
    """``data`` with ``change`` applied to its head only: up to and with the first empty line,
    a bare LF counting as a line end (where a lenient parser ends the head)."""
    match = _HEAD_END.search(data, len(data) - len(data.lstrip(b"\r\n")))
    end = len(data) if match is None else match.end()
    return change(data[:end]) + data[end:]


_LAST_CHUNK = re.compile(rb"(?:^|(?<=\n))0+(?:[ \t;][^\n]*?)?\r?\n")  # h11: an extension to LF


def _in_field_sections(data: bytes, change: Callable[[bytes], bytes]) -> bytes:
    """``data`` with ``change`` applied to its head and to its trailer section, if any (from
    the last-chunk line to the empty line after it, a bare LF counting as a line end)."""
    data = _in_head(data, change)
    head_end = _HEAD_END.search(data)
    last = None if head_end is None else _LAST_CHUNK.search(data, head_end.end())
    if last is None:
        return data
    return data[:last.start()] + _in_head(data[last.start():], change)


def _crlf_lines(data: bytes) -> bytes:
    """The bare LFs of the head and trailers as CRLFs: the request as a parser taking LF for
    a line end read it."""
    return _in_field_sections(data, lambda lines: re.sub(rb"(?<!\r)\n", b"\r\n", lines))


def _unfolded(data: bytes) -> bytes:
    """The head and trailers with each obs-fold (CRLF, then SP/HTAB) replaced by one SP, as
    h11 does."""
    return _in_field_sections(data, lambda lines: re.sub(rb"\r?\n[ \t]+", b" ", lines))


def _one_content_length(data: bytes) -> bytes | None:
    """The head with repeated identical Content-Length values (lines, or list elements) given
    once, in the first line's place; None when there are no such repeats."""
    pattern = re.compile(rb"(?im)^content-length:[ \t]*([^\r\n]*?)[ \t]*\r?\n")

    def once(head: bytes) -> bytes:
        values = [v.strip(b" \t") for m in pattern.finditer(head) for v in m[1].split(b",")]
        if len(values) < 2 or len(set(values)) != 1:
            return head
        first = pattern.search(head)
        assert first is not None
        rest = pattern.sub(b"", head[first.end():])
        return head[:first.start()] + b"Content-Length: " + values[0] + b"\r\n" + rest

    return _in_head(data, once)


def _no_leading_empty_lines(data: bytes) -> bytes:
    return data.lstrip(b"\r\n") if data.startswith(b"\r\n") else data


_CHUNK_LINE = re.compile(rb"(?m)^[0-9A-Fa-f]+[ \t]*;[^\r\n]*\r\n")


def _no_chunk_bws(data: bytes) -> bytes:
    """The body's chunk lines without the BWS around their ';' and '='."""
    match = _HEAD_END.search(data)
    if match is None:
        return data
    end = match.end()
    return data[:end] + _CHUNK_LINE.sub(
        lambda line: re.sub(rb"[ \t]*([;=])[ \t]*", rb"\1", line[0]), data[end:])


def _no_chunk_extensions(data: bytes) -> bytes:
    """The body's chunk lines without their extensions: h11 reads ';' and anything up to
    the LF (a CR included) as one."""
    match = _HEAD_END.search(data)
    if match is None:
        return data
    end = match.end()
    return data[:end] + re.sub(rb"(?m)^([0-9A-Fa-f]+);[^\n]*\r\n", rb"\1\r\n", data[end:])


def _no_empty_extension_values(data: bytes) -> bytes:
    """The body's chunk lines without the extensions whose value is empty (``;a=``): llhttp
    reads past them."""
    match = _HEAD_END.search(data)
    if match is None:
        return data
    end = match.end()
    return data[:end] + re.sub(rb"(?m)^([0-9A-Fa-f]+(?:;[^\r\n]*?)?);[!#$%&'*+.^_`|~0-9A-Za-z-]+="
                               rb"(?=;|\r\n)", rb"\1", data[end:])


def _no_trailer_controls(data: bytes) -> bytes:
    """The trailer section with its control bytes (but CR, LF, HTAB and NUL) as 'x'."""
    head_end = _HEAD_END.search(data)
    last = None if head_end is None else _LAST_CHUNK.search(data, head_end.end())
    if last is None:
        return data
    return data[:last.start()] + _in_head(data[last.start():], lambda trailers: re.sub(
        rb"[\x01-\x08\x0b\x0c\x0e-\x1f\x7f]", b"x", trailers))


def _in_chunk_lines(data: bytes, pattern: bytes, repl: bytes) -> bytes:
    """``data`` with ``re.sub(pattern, repl)`` applied after its head (to the chunked body)."""
    match = _HEAD_END.search(data, len(data) - len(data.lstrip(b"\r\n")))
    if match is None:
        return data
    return data[:match.end()] + re.sub(pattern, repl, data[match.end():])


def _no_ows_after_chunk_size(data: bytes) -> bytes:
    return _in_chunk_lines(data, rb"(?m)^([0-9A-Fa-f]+)[ \t]+\r\n", rb"\1\r\n")


def _overflow_as_invalid(data: bytes) -> bytes:
    """Chunk sizes of more than 16 significant hex digits written as an invalid size."""
    return _in_chunk_lines(data, rb"(?m)^0*[1-9A-Fa-f][0-9A-Fa-f]{16,}", b"overflow")


def _no_leading_zeros(data: bytes) -> bytes:
    """Chunk sizes written with more than 20 digits, without their leading zeros."""
    return _in_chunk_lines(data, rb"(?m)^(?=[0-9A-Fa-f]{21})0+(?=[0-9A-Fa-f])", b"")


_CODING_LINE = re.compile(rb"(?im)^transfer-encoding:([^\r\n]*)\r\n")


def _plain_chunked(data: bytes) -> bytes:
    """The Transfer-Encoding lines, when together they are the list (chunked) with empty
    elements ('chunked,' on one line, or an empty line beside a 'chunked' one; any case),
    written as one 'Transfer-Encoding: chunked' line where the first of them was."""
    def change(head: bytes) -> bytes:
        lines = list(_CODING_LINE.finditer(head))
        if not lines or http1.list_elements(b",".join(m[1] for m in lines)) != [b"chunked"] \
                or (len(lines) == 1 and b"," not in lines[0][1]):
            return head
        first = lines[0]
        return head[:first.start()] + b"Transfer-Encoding: chunked\r\n" \
            + _CODING_LINE.sub(b"", head[first.end():])
    return _in_head(data, change)


def _te_chunked(reading: Reading) -> Reading:
    """Our reading with its Transfer-Encoding fields as one 'chunked' field, where the
    first was."""
    headers: list[tuple[bytes, bytes]] = []
    for name, value in reading.headers:
        if name != b"transfer-encoding":
            headers.append((name, value))
        elif all(other != b"transfer-encoding" for other, _ in headers):
            headers.append((name, b"chunked"))
    return replace(reading, headers=tuple(headers))


def _single_spaces(data: bytes) -> bytes:
    """The request line with each run of SP taken as one SP."""
    line_end = data.find(b"\r\n", len(data) - len(data.lstrip(b"\r\n")))
    if line_end < 0:
        return data
    return re.sub(rb"(?<=[^\r\n]) {2,}", b" ", data[:line_end]) + data[line_end:]


def _no_leading_line_ends(data: bytes) -> bytes:
    return data.lstrip(b"\r\n")


def _no_trailing_ows(data: bytes) -> bytes:
    """The head's field lines without the OWS after their values (RFC 9112 §5.1)."""
    return _in_head(data, lambda head: re.sub(rb"(?<=[^ \t\r\n])[ \t]+\r\n", b"\r\n", head))


def _lower_codings(reading: Reading) -> Reading:
    return replace(reading, headers=tuple(
        (name, value.lower() if name == b"transfer-encoding" else value)
        for name, value in reading.headers))


def _stripped_values(reading: Reading) -> Reading:
    return replace(reading, headers=tuple((name, value.strip(b" \t"))
                                          for name, value in reading.headers))


def _always(data: bytes) -> Callable[[bytes], bytes]:
    return lambda _: data


def _chained(maps: list[Callable[[Reading], Reading]]) -> Callable[[Reading], Reading]:
    def chained(reading: Reading) -> Reading:
        for each in maps:
            reading = each(reading)
        return reading
    return chained


def _shifts(difference: Difference, data: bytes, rewritten: bytes, reading: Reading
            ) -> list[int]:
    """How far the rewrite may move the end of ``reading``'s request: by all it changes, or by
    what it changes before that end only (the pipelined request behind may be rewritten too,
    which moves nothing of this one)."""
    shifts = [len(rewritten) - len(data)]
    if reading.verdict == "request":
        assert difference.rewrite is not None
        head = data[:reading.consumed]
        shifts.append(len(difference.rewrite(head) or head) - len(head))
    return shifts


def _rewrite_explains(difference: Difference, parser: str, data: bytes, ours: Reading,
                      theirs: Reading) -> bool:
    assert difference.rewrite is not None
    rewritten = difference.rewrite(data)
    if rewritten is None or rewritten == data:
        return False
    shifts = _shifts(difference, data, rewritten, theirs if difference.lenient == "them" else ours)
    if difference.lenient == "them":
        return ours.verdict == "refused" and theirs.verdict != "refused" and any(
            _same(parser, read_ours(rewritten), _shifted(theirs, shift)) for shift in shifts)
    if difference.lenient == "us":
        readings = [difference.ours_as(_shifted(ours, shift)) for shift in shifts] \
            if ours.verdict == "request" else [ours]
        return theirs.verdict == "refused" and ours.verdict != "refused" and any(
            _same(parser, reading, READERS[parser](rewritten)) for reading in readings)
    return ours.verdict == "refused" and theirs.verdict == "incomplete" \
        and READERS[parser](rewritten).verdict == "refused"


def _completed(data: bytes) -> bytes:
    return data + b"\r\n\r\n"


_METHOD = re.compile(rb"((?:\r\n)*)([^ \r\n]+) ")


def _method_as_get(data: bytes) -> bytes:
    """The request with its method (a token: we read it) replaced by GET."""
    return _METHOD.sub(lambda m: m[1] + b"GET ", data, count=1)


KNOWN_DIFFERENCES: list[Difference] = [
    Difference("h11 reads a bare LF as a line end", "h11",
               "RFC 9112 §2.2: a recipient MAY recognize a single LF as a line terminator;"
               " we do not (the contract, as in the hostile corpus's line_bare_lf)",
               rewrite=_crlf_lines),
    Difference("h11 unfolds obs-fold", "h11",
               "RFC 9112 §5.2: a server MUST either reject obs-fold with 400 or replace it"
               " with SP; we reject (corpus: field_obs_fold)", rewrite=_unfolded),
    Difference("h11 merges identical Content-Length values", "h11",
               "RFC 9110 §8.6: a recipient MAY reject repeated identical values or replace"
               " them with one; we reject (corpus: cl_duplicate_identical)",
               rewrite=_one_content_length),
    Difference("h11 refuses an empty line before the request line", "h11",
               "RFC 9112 §2.2: a server SHOULD ignore at least one empty line (CRLF)"
               " received prior to the request-line; we do", rewrite=_no_leading_empty_lines,
               lenient="us"),
    Difference("h11 lowercases Transfer-Encoding", "h11",
               "RFC 9112 §7: transfer-coding names are case-insensitive, so both are right;"
               " we pass the value as received", adjust=_lower_codings),
    Difference("llhttp keeps trailing OWS in a field value", "llhttp",
               "RFC 9112 §5.1: OWS after the last non-whitespace octet of the field value is"
               " excluded from it (we strip it; corpus: ok_ows_around_value)",
               adjust=_stripped_values),
    Difference("llhttp refuses a value its trailing OWS made invalid", "llhttp",
               "RFC 9112 §5.1 (as above): 'chunked\\t' and 'example.com ' are valid values"
               " once their OWS is excluded (corpus: ok_te_ows)", rewrite=_no_trailing_ows,
               lenient="us"),
    Difference("llhttp skips any CR and LF before the request line", "llhttp",
               "RFC 9112 §2.2: a bare CR MUST be taken as invalid or replaced by SP, and a"
               " recipient MAY (not must) take a single LF as a line end; we refuse both",
               rewrite=_no_leading_line_ends),
    Difference("llhttp takes a run of SP for one in the request line", "llhttp",
               "RFC 9112 §3: recipients MAY parse the request-line on whitespace-delimited word"
               " boundaries; we keep to its grammar, single SPs (corpus: line_space_in_target)",
               rewrite=_single_spaces),
    Difference("llhttp knows only its own list of methods", "llhttp",
               "RFC 9110 §9.1: method = token, and §16.1 lets methods be registered; we accept"
               " any token (corpus: line_bad_method refuses only a non-token)",
               rewrite=_method_as_get, lenient="us",
               ours_as=lambda reading: replace(reading, method=b"GET")),
    Difference("h11 does not read chunk extensions", "h11",
               "RFC 9112 §7.1.1: chunk-ext-name is a token and chunk-ext-val a token or a"
               " quoted-string; h11's grammar is ';.*', so it never sees a bad one (corpus:"
               " chunk_ext_ctl)", rewrite=_no_chunk_extensions),
    Difference("h11 lets control bytes through in trailer values", "h11",
               "RFC 9110 §5.5: field values hold no CTL but HTAB, trailers included (§6.5);"
               " h11's field grammar takes any byte but NUL and whitespace, and toy-h11 checks"
               " only the head's values (the trailers are dropped)",
               rewrite=_no_trailer_controls),
    Difference("h11 allows whitespace after a chunk size", "h11",
               "RFC 9112 §7.1: chunk = chunk-size [ chunk-ext ] CRLF, whitespace only as the"
               " BWS of chunk-ext (before ';'); h11's grammar ends the line with OWS",
               rewrite=_no_ows_after_chunk_size),
    Difference("h11 waits for a chunk size past 64 bits", "h11",
               "RFC 9112 §7.1: a recipient MUST anticipate potentially large hexadecimal"
               " numerals and prevent parsing errors due to integer conversion overflows; we"
               " refuse more than 16 significant digits, h11 reads up to 20 and waits",
               rewrite=_overflow_as_invalid, lenient="early"),
    Difference("h11 refuses a chunk size of more than 20 digits", "h11",
               "RFC 9112 §7.1: chunk-size = 1*HEXDIG, so leading zeros are part of a valid"
               " size; h11's grammar takes at most 20 digits", rewrite=_no_leading_zeros,
               lenient="us"),
    *(Difference(f"{parser} refuses empty list elements beside 'chunked'", parser,
                 "RFC 9110 §5.6.1: a recipient MUST parse and ignore a reasonable number of"
                 " empty list elements; 'chunked,' is the list (chunked), and so is a"
                 " 'chunked' line with an empty one (RFC 9110 §5.3: one list)",
                 rewrite=_plain_chunked, lenient="us", ours_as=_te_chunked)
      for parser in ("h11", "llhttp")),
    Difference("llhttp accepts an empty chunk-extension value", "llhttp",
               "RFC 9112 §7.1.1: chunk-ext-val = token / quoted-string, and a token is 1*tchar,"
               " so ';a=' is malformed; llhttp reads past it", rewrite=_no_empty_extension_values),
    *(Difference(f"{parser} refuses BWS in a chunk extension", parser,
                 "RFC 9112 §7.1.1: chunk-ext = *( BWS \";\" BWS chunk-ext-name [ BWS \"=\" BWS"
                 " chunk-ext-val ] ), and RFC 9110 §5.6.3: a recipient MUST parse for BWS and"
                 " remove it; we accept it", rewrite=_no_chunk_bws, lenient="us")
      for parser in ("h11", "llhttp")),
    *(Difference(f"we refuse an unfinished head {parser} still waits on", parser,
                 "RFC 9112 §2.2 with §5: a head holding a forbidden byte or a malformed line"
                 " can never become valid; we refuse it before its end (check_partial_head),"
                 f" {parser} once the head is whole", rewrite=_completed, lenient="early")
      for parser in ("h11",)),  # llhttp refuses such a byte as it comes
]


def classify(data: bytes) -> tuple[Reading, dict[str, Reading], list[str]]:
    """Read ``data`` with every parser: ``(ours, theirs by parser, findings)``, where
    ``findings`` names each parser whose reading differs from ours with no known difference
    to explain it."""
    ours = read_ours(data)
    theirs = {name: read(data) for name, read in READERS.items()}
    findings = [name for name, reading in theirs.items()
                if reading != ours and not explained_by(name, data, ours, reading)]
    return ours, theirs, findings


def describe(reading: Reading) -> str:
    """One line for a report."""
    if reading.verdict != "request":
        return f"{reading.verdict} {reading.reason}".strip()
    return (f"request {reading.method!r} {reading.target!r} {reading.version} "
            f"{list(reading.headers)!r} body={reading.body!r} consumed={reading.consumed}")




# --- requests, valid and near-valid ------------------------------------------------------------
# Each piece is drawn valid most of the time (``_rare``: about one time in ``RARE`` it is a
# mutation), so a request carries a few mutations and reaches the parsers' deeper states.

RARE = 25
RARE_IN_CHUNKS = 8  # the chunk grammar, where most smuggling bugs live, is mutated more often
NEXT = b"GET /next HTTP/1.1\r\nHost: next.example\r\n\r\n"  # a pipelined request after each

METHODS = [b"GET", b"POST", b"PUT", b"DELETE", b"OPTIONS", b"PATCH", b"HEAD"]
BAD_METHODS = [b"get", b"FOO", b"G(T", b"", b"GET\x00", b"M-SEARCH", b"PRI", b"\xc3\xa9"]
TARGETS = [b"/", b"/a/b?c=d", b"/%41", b"http://example.com/x?y", b"*"]
BAD_TARGETS = [b"", b"/a b", b"/a\tb", b"/\x7f", b"/\x00", b"/\xe9", b"/a#f", b"example.com:80",
               b"//", b"HTTP://example.com", b"/a\rb", b"/?\x1b"]
VERSIONS = [b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0"]
BAD_VERSIONS = [b"HTTP/1.2", b"HTTP/2.0", b"HTTP/0.9", b"http/1.1", b"HTTP/1.10", b"HTTP/1",
                b"HTTP/1.1 ", b"", b"HTTP/1.1\t", b"HTTP/01.1", b"HTTP /1.1", b"HTTP/9.9"]
SPACES = [b"  ", b"\t", b"", b"\x0b", b" \r"]
LINE_ENDS = [b"\n", b"\r", b"\r\r\n", b"\n\r", b" \r\n"]
SEPARATORS = [b" :", b"\t:", b":\x0b", b":\x0c", b": \x00"]  # valid: ":", ": ", ":\t", ": \t"
NAMES = [b"X-Thing", b"Accept", b"X_Under", b"Connection", b"Expect", b"Content-Type"]
BAD_NAMES = [b"", b"X Thing", b"X(Y)", b"X\xe9", b"Content-Length ", b" Transfer-Encoding",
             b"Transfer_Encoding", b"Content\x00Length", b"X\x7f"]
VALUES = [b"v", b"a b", b"caf\xe9", b"\"quoted\"", b"", b"close", b"keep-alive", b"100-continue",
          b"a\tb"]
BAD_VALUES = [b"a\x00b", b"a\x7fb", b"a\rb", b"a\nb", b"a\x01", b"a\r\n b", b"a\r\n\tb"]
HOSTS = [b"example.com", b"example.com:8080", b"[::1]:80", b"", b"127.0.0.1"]
BAD_HOSTS = [b"exa mple.com", b"example.com/path", b"a@b", b"example.com:port", b"\"x\""]
CONTENT_LENGTHS = [b"0", b"5", b"005", b"12"]  # with a body of that many bytes (or 12)
BAD_CONTENT_LENGTHS = [b"+5", b"-1", b"0x5", b"5, 5", b"5,6", b"5 5", b"1_0", b"", b"5.0",
                       b"18446744073709551621", b"\xd9\xa5", b" 5\x0b", b"05 ,"]
CODINGS = [b"chunked", b"Chunked", b"CHUNKED", b" chunked ", b"chunked\t"]
BAD_CODINGS = [b"gzip, chunked", b"chunked, gzip", b"chunked, chunked", b"identity", b"gzip",
               b",chunked", b"chunked,", b"chunked ,", b"\"chunked\"", b"chunked;q=1", b"chunk",
               b"x-chunked", b"chunked\x0b", b"identity, chunked", b"", b"chunked, identity"]
EXTENSIONS = [b"", b";a", b";a=b", b";a=\"q ;\\\"\"", b"; a = b", b"\t;a", b";a;b=c"]
BAD_EXTENSIONS = [b";", b";a=", b";a=\x01", b";a\nb", b";a b", b";a=\"q", b";\"x\"", b"x",
                  b";a=b c", b";a\rb", b" ", b";a=\"\x7f\""]
DATA_ENDS = [b"\n", b"", b"XX", b"\r", b" \r\n", b"\r\r\n"]


def _rare(draw: st.DrawFn, rare: int = RARE) -> bool:
    """True about one time in ``rare``. hypothesis draws the ends of an integer range far more
    often than the middle, so the window is in the middle (and 0, where it shrinks, is out)."""
    return 500 <= draw(st.integers(0, 999)) < 500 + 1000 // rare


def _piece(draw: st.DrawFn, valid: Sequence[bytes], bad: Sequence[bytes],
           rare: int = RARE) -> bytes:
    if _rare(draw, rare):
        return draw(st.sampled_from(bad))
    return draw(st.sampled_from(valid))


def _size_repr(draw: st.DrawFn, size: int) -> bytes:
    """A chunk size: its hex, or a mutation of it (prefixes, signs, separators, overlong)."""
    text = b"%x" % size
    if not _rare(draw, RARE_IN_CHUNKS):
        return draw(st.sampled_from([text, text.upper(), b"0" + text, b"000" + text]))
    return draw(st.sampled_from([
        b"0x" + text, b"+" + text, b"-" + text, b" " + text, text + b" ", b"_" + text,
        text[:1] + b"_" + text[1:], b"0" * 17 + text, b"0" * 40 + text, b"1" + b"0" * 16 + text,
        b"f" * 16, b"1" + b"0" * 15, text + b"g", b"", text + b"\x00", b"\t" + text]))


def _chunked_body(draw: st.DrawFn) -> bytes:
    out = []
    for _ in range(draw(st.integers(0, 3))):
        data = draw(st.binary(min_size=1, max_size=12))
        size = len(data)
        if _rare(draw, RARE_IN_CHUNKS):  # a size that lies by a byte or two
            size = max(0, size + draw(st.sampled_from([-2, -1, 1, 2])))
        out.append(_size_repr(draw, size)
                   + _piece(draw, EXTENSIONS, BAD_EXTENSIONS, RARE_IN_CHUNKS)
                   + _piece(draw, [b"\r\n"], LINE_ENDS, RARE_IN_CHUNKS) + data
                   + _piece(draw, [b"\r\n"], DATA_ENDS, RARE_IN_CHUNKS))
    last = _piece(draw, [b"0", b"000"], [b"00000000000000000000", b"0x0", b"+0", b"", b" 0"],
                  RARE_IN_CHUNKS)
    out.append(last + _piece(draw, EXTENSIONS, BAD_EXTENSIONS, RARE_IN_CHUNKS)
               + _piece(draw, [b"\r\n"], LINE_ENDS, RARE_IN_CHUNKS))
    for _ in range(draw(st.integers(0, 2))):  # trailer fields
        out.append(_field(draw, draw(st.sampled_from(NAMES)), VALUES, BAD_VALUES))
    out.append(_piece(draw, [b"\r\n"], LINE_ENDS))
    return b"".join(out)


def _field(draw: st.DrawFn, name: bytes, values: Sequence[bytes],
           bad_values: Sequence[bytes]) -> bytes:
    separator = _piece(draw, [b":", b": ", b":\t", b": \t"], SEPARATORS)
    value = _piece(draw, values, bad_values)
    trailing = draw(st.sampled_from([b"", b"", b"", b" ", b"\t "]))
    fold = b""
    if _rare(draw, RARE * 2):  # obs-fold: a continuation line
        fold = draw(st.sampled_from([b"\r\n ", b"\r\n\t", b"\n "])) + _piece(draw, VALUES,
                                                                              BAD_VALUES)
    return name + separator + value + trailing + fold + _piece(draw, [b"\r\n"], LINE_ENDS)


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    """One request, valid or near-valid (see the lists above), followed by ``NEXT``."""
    parts = [_piece(draw, [b"", b"\r\n"], [b"\r\n\r\n", b"\n", b"\r", b"\n\r\n"])]
    parts.append(_piece(draw, METHODS, BAD_METHODS) + _piece(draw, [b" "], SPACES)
                 + _piece(draw, TARGETS, BAD_TARGETS) + _piece(draw, [b" "], SPACES)
                 + _piece(draw, VERSIONS, BAD_VERSIONS) + _piece(draw, [b"\r\n"], LINE_ENDS))
    fields: list[bytes] = []
    for _ in range(draw(st.integers(0, 2))):
        fields.append(_field(draw, _piece(draw, NAMES, BAD_NAMES), VALUES, BAD_VALUES))
    hosts = draw(st.sampled_from([1, 1, 1, 1, 0, 2]))
    for _ in range(hosts):
        fields.append(_field(draw, draw(st.sampled_from([b"Host", b"host", b"HOST"])), HOSTS,
                             BAD_HOSTS))
    framing = draw(st.sampled_from(["none", "length", "length", "chunked", "chunked",
                                    "chunked", "both"]))
    body = b""
    lengths = draw(st.sampled_from([1, 1, 1, 1, 2]))
    if framing in ("length", "both"):
        values = [_piece(draw, CONTENT_LENGTHS, BAD_CONTENT_LENGTHS) for _ in range(lengths)]
        for value in values:
            name = draw(st.sampled_from([b"Content-Length", b"content-length"]))
            fields.append(_field(draw, name, [value], [value]))
        digits = values[0].strip()
        size = int(digits) if digits.isdigit() and len(digits) < 4 else 12
        body = draw(st.binary(min_size=size, max_size=size))
    if framing in ("chunked", "both"):
        for _ in range(lengths):
            fields.append(_field(draw, b"Transfer-Encoding", CODINGS, BAD_CODINGS))
        body = _chunked_body(draw)
    order = draw(st.permutations(range(len(fields))))
    parts += [fields[i] for i in order]
    parts.append(_piece(draw, [b"\r\n"], LINE_ENDS))
    parts.append(body)
    return b"".join(parts) + NEXT


@st.composite
def byte_edits(draw: st.DrawFn) -> bytes:
    """A valid-looking request from ``requests`` with one to three bytes inserted, replaced or
    deleted, anywhere: the mutations the lists above did not think of."""
    data = bytearray(draw(requests()))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data) - 1))
        byte = draw(st.sampled_from(b"\r\n\t \x00\x0b\x0c:;,=\"0aF+-_x\x7f\x80\xff"))
        action = draw(st.sampled_from(["insert", "replace", "delete"]))
        if action == "insert":
            data.insert(at, byte)
        elif action == "replace":
            data[at] = byte
        else:
            del data[at]
    return bytes(data)


REQUESTS = st.one_of(requests(), requests(), requests(), byte_edits())
