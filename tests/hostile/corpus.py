"""The hostile-input corpus: raw requests, the answer each must get, and where the rule comes from.

Every case is one byte string written to a fresh connection in a single ``sendall``, followed by
``NEXT`` (a well-formed pipelined ``GET /next`` carrying ``Connection: close``). What must happen:

- A rejected case (first status >= 400): exactly one response, its status one of ``expect``,
  carrying ``Connection: close``; then the server closes. Nothing after the bad request is read,
  so ``NEXT`` and any request smuggled inside the bad one are never answered (RFC 9112 §6.3:
  the server "MUST respond with a 400 (Bad Request) status code and then close the connection"
  when it cannot tell where the message ends).
- An accepted case: the echo app's 200 for the request (``echo`` lists fields it must report),
  then, when ``then == "next"``, a 200 for ``/next`` and a close; when ``then == "close"``
  (HTTP/1.0 without keep-alive) a close with ``NEXT`` unanswered.

The servers run with the small limits and short deadlines below (``launch.py`` builds the toy
servers' Config from them). Where uvicorn or gunicorn, the references, answer otherwise than the
RFC or our contract (``UVICORN_DIFFERS``, ``GUNICORN_DIFFERS``), where WSGI cannot carry what is
checked (``WSGI_LIMITS``), or a toy server inherits a gap from its parser (``TOY_GAPS``),
the case is listed in ``KNOWN_DIFFERENCES``: the tests mark exactly those
``xfail(strict=True)``, so the table documents the differences and a release that changes one
makes the suite fail until the table is updated.

Sources are cited per case: RFC 9112 (HTTP/1.1 messaging), RFC 9110 (HTTP semantics) and the
request-smuggling advisories of waitress, gunicorn, h11, llhttp (Node.js) and others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# --- limits and deadlines the servers run with -----------------------------------------------

MAX_REQUEST_LINE = 8 * 1024  # bytes; longer request line -> 414 (toyservers Config default)
MAX_HEADER_SIZE = 16 * 1024  # bytes; larger header block -> 431 (Config default)
MAX_HEADERS = 100  # fields; more -> 431 (Config default)
MAX_BODY_SIZE = 4096  # bytes; larger body -> 413 (set by launch.py; default is no limit)
TIMEOUT_HEADERS = 1.0  # seconds from a request's first byte to the end of its header block
TIMEOUT_BODY = 1.0  # seconds of silence allowed while a body arrives
TIMEOUT_KEEP_ALIVE = 1  # seconds idle between requests (uvicorn's flag takes an integer)

# --- byte building blocks --------------------------------------------------------------------

HOST = b"Host: example.com\r\n"
POST = b"POST / HTTP/1.1\r\n" + HOST
GET = b"GET / HTTP/1.1\r\n" + HOST
CHUNKED = POST + b"Transfer-Encoding: chunked\r\n\r\n"
# A complete request hidden where a lenient parser would see the start of the next message.
SMUGGLED = b"GET /smuggled HTTP/1.1\r\n" + HOST + b"\r\n"
# Appended to every case: answered only when the case is accepted and the connection kept.
NEXT = b"GET /next HTTP/1.1\r\n" + HOST + b"Connection: close\r\n\r\n"

Then = Literal["close", "next"]


@dataclass(frozen=True)
class Case:
    """One raw request and the answer it must get.

    Attributes:
        name: test id (snake_case, unique); prefixes group the cases: ``te_``, ``cl_``,
            ``chunk_``, ``line_``, ``field_``, ``host_``, ``limit_`` (rejected) and ``ok_``
            (valid but unusual, must be accepted).
        raw: the bytes sent (``NEXT`` is appended by the test).
        expect: acceptable statuses of the first response (one unless the rules allow two).
        source: the RFC section and/or advisory the case comes from.
        why: what goes wrong if a server gets it wrong, in one line.
        then: for accepted cases, ``"next"`` (``NEXT`` is answered) or ``"close"``.
        echo: for accepted cases, ``(field, value)`` pairs the echo app's JSON must show;
            ``("header", (name, value))`` means that pair is among the request headers.
    """

    name: str
    raw: bytes
    expect: tuple[int, ...]
    source: str
    why: str
    then: Then = "next"
    echo: tuple[tuple[str, object], ...] = ()

    @property
    def rejected(self) -> bool:
        """True when the request must be refused (every acceptable status is 4xx/5xx)."""
        return min(self.expect) >= 400


def _reject(name: str, raw: bytes, status: int | tuple[int, ...], source: str, why: str) -> Case:
    expect = status if isinstance(status, tuple) else (status,)
    return Case(name, raw, expect, source, why)


def _accept(name: str, raw: bytes, source: str, why: str, *, then: Then = "next",
            echo: tuple[tuple[str, object], ...] = ()) -> Case:
    return Case(name, raw, (200,), source, why, then, echo)


def _many_fields(count: int) -> bytes:
    return b"".join(b"X-Field-%d: v\r\n" % i for i in range(count))


CASES: list[Case] = [
    # --- message framing: Transfer-Encoding and Content-Length (RFC 9112 §6) ------------------
    _reject("te_and_cl", POST + b"Transfer-Encoding: chunked\r\nContent-Length: 48\r\n\r\n"
            b"0\r\n\r\n" + SMUGGLED, 400,
            "RFC 9112 §6.1 (TE and CL together), §6.3 rule 3; gunicorn TE+CL fix (20.0.1)",
            "a proxy framing by Content-Length and a server framing by chunked disagree"),
    _reject("cl_and_te", POST + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"0\r\n\r\n" + SMUGGLED, 400,
            "RFC 9112 §6.1, §6.3 rule 3 (order of the two fields does not matter)",
            "classic CL.TE desync: the bytes after the 4-byte body become a second request"),
    _reject("te_chunked_not_final", POST + b"Transfer-Encoding: chunked, gzip\r\n\r\n"
            b"0\r\n\r\n" + SMUGGLED, 400,
            "RFC 9112 §6.3 rule 4: chunked must be the final coding of a request, else 400",
            "the body length cannot be known, so the end of the message cannot be found"),
    _reject("te_gzip_only", POST + b"Transfer-Encoding: gzip\r\n\r\n" + SMUGGLED, 400,
            "RFC 9112 §6.3 rule 4; gunicorn CVE-2024-6827 (a non-chunked TE fell back to CL)",
            "with no chunked coding there is no way to find where the request ends"),
    _reject("te_repeated_lines", POST + b"Transfer-Encoding: chunked\r\n"
            b"Transfer-Encoding: identity\r\n\r\n0\r\n\r\n" + SMUGGLED, 400,
            "RFC 9110 §5.3 (repeated lines form one list: 'chunked, identity'), RFC 9112 §6.3"
            " rule 4; gunicorn CVE-2024-1135 (conflicting TE lines treated as chunked)",
            "a server reading only the first line uses chunked while a proxy uses the last"),
    _reject("te_chunked_twice", POST + b"Transfer-Encoding: chunked, chunked\r\n\r\n"
            b"0\r\n\r\n" + SMUGGLED, 400,
            "RFC 9112 §6.1: a sender must not apply chunked more than once",
            "one decoder unwraps once and another twice: they end the body in different places"),
    _reject("te_unknown_coding", POST + b"Transfer-Encoding: foo, chunked\r\n\r\n0\r\n\r\n",
            501, "RFC 9112 §6.1: a transfer coding the server does not understand -> 501",
            "the server cannot decode the body it would hand to the app"),
    _reject("te_gzip_then_chunked", POST + b"Transfer-Encoding: gzip, chunked\r\n\r\n"
            b"0\r\n\r\n", 501,
            "RFC 9112 §6.1 (501 for an unimplemented coding); waitress CVE-2019-16786",
            "passing gzip-coded bytes to the app as if plain, or ignoring the coding"),
    _reject("te_space_before_colon", POST + b"Transfer-Encoding : chunked\r\n\r\n"
            b"0\r\n\r\n" + SMUGGLED, 400,
            "RFC 9112 §5.1: whitespace between field name and colon MUST get 400;"
            " llhttp CVE-2021-22959",
            "one hop reads 'Transfer-Encoding', another ignores the field: framing splits"),
    _reject("te_obs_fold", POST + b"Transfer-Encoding: identity\r\n chunked\r\n\r\n"
            b"0\r\n\r\n" + SMUGGLED, 400,
            "RFC 9112 §5.2 (obs-fold); llhttp CVE-2022-32215 (multi-line Transfer-Encoding)",
            "folded TE value read as 'identity' by one hop and 'chunked' by another"),
    _reject("te_vertical_tab", POST + b"Transfer-Encoding:\x0bchunked\r\n\r\n0\r\n\r\n"
            + SMUGGLED, 400,
            "RFC 9110 §5.5 (field values exclude CTLs); waitress CVE-2019-16789",
            "unusual whitespace stripped by one parser and rejected by another"),
    # --- Content-Length = 1*DIGIT (RFC 9110 §8.6; RFC 9112 §6.3 rule 5) -----------------------
    _reject("cl_plus_sign", POST + b"Content-Length: +5\r\n\r\nhello", 400,
            "RFC 9110 §8.6; waitress CVE-2022-24761 (int() accepted '+10')",
            "a sign is not a digit: a stricter proxy sees a different length"),
    _reject("cl_negative", POST + b"Content-Length: -1\r\n\r\n" + SMUGGLED, 400,
            "RFC 9110 §8.6; RFC 9112 §6.3 rule 5 (invalid Content-Length -> 400 and close)",
            "a negative length can turn into 'read until EOF' or a huge unsigned number"),
    _reject("cl_hex", POST + b"Content-Length: 0x5\r\n\r\nhello", 400,
            "RFC 9110 §8.6; waitress CVE-2022-24761 (int(x, 0) read '0x01' as 1)",
            "hex accepted by one parser, refused or read as 0 by another"),
    _reject("cl_space_inside", POST + b"Content-Length: 1 0\r\n\r\n0123456789", 400,
            "RFC 9110 §8.6; RFC 9112 §6.3 rule 5",
            "'1 0' read as 1, 10 or 0 depending on the parser"),
    _reject("cl_underscore", POST + b"Content-Length: 1_0\r\n\r\n0123456789", 400,
            "RFC 9110 §8.6 (Python's int() accepts '1_0'; a hand parser must not)",
            "a digit separator only Python understands"),
    _reject("cl_non_ascii_digit", POST + b"Content-Length: \xd9\xa5\r\n\r\nhello", 400,
            "RFC 9110 §8.6 (DIGIT is ASCII 0-9); the contract: non-ASCII digits -> 400",
            "int() accepts Arabic-Indic digits once the value is decoded as UTF-8"),
    _reject("cl_fraction", POST + b"Content-Length: 5.0\r\n\r\nhello", 400,
            "RFC 9110 §8.6", "a decimal point is not a digit"),
    _reject("cl_empty", POST + b"Content-Length:\r\n\r\n" + SMUGGLED, 400,
            "RFC 9110 §8.6 (1*DIGIT: at least one digit)",
            "empty read as 0 by one hop and as invalid by another"),
    _reject("cl_overflow", POST + b"Content-Length: 184467440737095516160\r\n\r\nhello",
            (400, 413), "RFC 9110 §8.6 (guard against integer overflow); llhttp overflow"
            " checks; 413 is also right since it exceeds max_body_size",
            "a 64-bit parser wraps the value to a small length"),
    _reject("cl_duplicate_differing", POST + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n"
            b"hello!", 400,
            "RFC 9110 §8.6, RFC 9112 §6.3 rule 5; waitress CVE-2019-16792",
            "one hop uses the first value, another the last"),
    _reject("cl_list_differing", POST + b"Content-Length: 5, 6\r\n\r\nhello!", 400,
            "RFC 9112 §6.3 rule 5 (a list of differing values is invalid)",
            "same as two lines, folded into one"),
    _reject("cl_duplicate_identical", POST + b"Content-Length: 5\r\nContent-Length: 5\r\n\r\n"
            b"hello", 400,
            "the contract (duplicate Content-Length -> 400; RFC 9110 §8.6 allows either)",
            "we refuse any repeated framing field rather than judge which repeats are harmless"),
    # --- chunked coding (RFC 9112 §7.1: chunk = chunk-size [ext] CRLF data CRLF) -------------
    _reject("chunk_size_0x", CHUNKED + b"0x5\r\nhello\r\n0\r\n\r\n", 400,
            "RFC 9112 §7.1 (chunk-size = 1*HEXDIG); waitress CVE-2022-24761",
            "int(x, 16) accepts a '0x' prefix, other parsers stop at the 'x'"),
    _reject("chunk_size_plus", CHUNKED + b"+5\r\nhello\r\n0\r\n\r\n", 400,
            "RFC 9112 §7.1; waitress CVE-2022-24761, protocol-http1 CVE-2023-38697",
            "a sign accepted by int() but by no strict parser"),
    _reject("chunk_size_underscore", CHUNKED + b"0_5\r\nhello\r\n0\r\n\r\n", 400,
            "RFC 9112 §7.1 (int('0_5', 16) == 5 in Python)",
            "a digit separator only Python understands"),
    _reject("chunk_size_junk", CHUNKED + b"5zz\r\nhello\r\n0\r\n\r\n", 400,
            "RFC 9112 §7.1 (only ';' may follow the size); Apache Traffic Server #10580",
            "non-hex bytes after the size ignored and forwarded as-is"),
    _reject("chunk_size_leading_space", CHUNKED + b" 5\r\nhello\r\n0\r\n\r\n", 400,
            "RFC 9112 §7.1 (the chunk line starts with a hex digit)",
            "whitespace skipped by one decoder and fatal to another"),
    _reject("chunk_size_empty", CHUNKED + b"\r\nhello\r\n0\r\n\r\n", 400,
            "RFC 9112 §7.1 (at least one hex digit)",
            "an empty size read as 0 ends the body early; the rest becomes a request"),
    _reject("chunk_size_overflow", CHUNKED + b"10000000000000000000005\r\nhello\r\n0\r\n\r\n",
            (400, 413), "RFC 9112 §7.1 (guard against overflow of chunk-size);"
            " 413 is also right since it exceeds max_body_size",
            "a size wrapping to 5 in 64 bits makes the chunk look tiny"),
    _reject("chunk_data_no_crlf", CHUNKED + b"5\r\nhelloXX0\r\n\r\n" + SMUGGLED, 400,
            "RFC 9112 §7.1; h11 GHSA-vqfr-h8mv-ghfj / CVE-2025-43859 (any two bytes were"
            " taken as the CRLF after chunk data)",
            "the two bytes after the data are skipped unchecked, hiding a desync"),
    _reject("chunk_data_bare_lf", CHUNKED + b"5\r\nhello\n0\r\n\r\n" + SMUGGLED, 400,
            "RFC 9112 §7.1 (CRLF after chunk data; RFC errata 7633: no bare LF in chunks)",
            "a bare LF taken as a line end shifts the chunk boundaries by one byte"),
    _reject("chunk_data_longer_than_size", CHUNKED + b"3\r\nhello\r\n0\r\n\r\n" + SMUGGLED, 400,
            "RFC 9112 §7.1 (chunk-data is exactly chunk-size octets, then CRLF)",
            "'lo' after the 3 data bytes read as the next chunk size by a lenient parser"),
    _reject("chunk_line_bare_lf", CHUNKED + b"5\nhello\r\n0\r\n\r\n" + SMUGGLED, 400,
            "RFC 9112 §7.1; Go net/http CVE-2025-22871 (bare LF ended the chunk-size line)",
            "a proxy that takes the LF as part of an extension sees a different body"),
    _reject("chunk_ext_bare_lf", CHUNKED + b"5;ext\nhello\r\n0\r\n\r\n" + SMUGGLED, 400,
            "RFC 9112 §7.1.1; ASP.NET Kestrel CVE-2025-55315 (LF inside a chunk extension)",
            "one hop ends the size line at the LF, another at the next CRLF"),
    _reject("chunk_ext_ctl", CHUNKED + b"5;a=\x01b\r\nhello\r\n0\r\n\r\n", 400,
            "RFC 9112 §7.1.1 (chunk-ext is tokens and quoted-strings); waitress"
            " CVE-2022-24761 (extensions were dropped unchecked)",
            "control bytes in a discarded extension pass through unvalidated"),
    _reject("chunk_trailer_is_a_request", CHUNKED + b"5\r\nhello\r\n0\r\n" + SMUGGLED, 400,
            "RFC 9112 §7.1.2 (trailer-section is field lines, then CRLF)",
            "a missing final CRLF makes a request line appear inside the trailers"),
    # --- request line (RFC 9112 §2.2, §2.3, §3) ------------------------------------------------
    _reject("line_nul", b"GET /\x00 HTTP/1.1\r\n" + HOST + b"\r\n", 400,
            "RFC 9112 §3.2 (request-target grammar has no NUL); RFC 9110 §5.5",
            "a NUL truncates the target in C code downstream"),
    _reject("line_bare_cr", b"GET / HTTP/1.1\r" + HOST + b"\r\n", 400,
            "RFC 9112 §2.2 (bare CR: reject or replace by SP); llhttp CVE-2023-30589",
            "a bare CR accepted as a line end by one hop only"),
    _reject("line_bare_lf", b"GET / HTTP/1.1\n" + HOST + b"\r\n", 400,
            "the contract (RFC 9112 §2.2 lets a recipient accept a bare LF; we do not);"
            " waitress GHSA-pg36-wpm5-g57p",
            "LF-only lines parsed differently by a CRLF-strict proxy"),
    _reject("line_leading_space", b" GET / HTTP/1.1\r\n" + HOST + b"\r\n", 400,
            "RFC 9112 §3 (the request-line starts with the method token)",
            "leading whitespace shifts every field of the request line"),
    _reject("line_trailing_space", b"GET / HTTP/1.1 \r\n" + HOST + b"\r\n", 400,
            "RFC 9112 §3 (the version is followed directly by CRLF)",
            "a lenient split reads the version as 'HTTP/1.1 ' or drops a fourth word"),
    _reject("line_bad_method", b"G(T / HTTP/1.1\r\n" + HOST + b"\r\n", 400,
            "RFC 9110 §9.1 (method = token; '(' is a delimiter)",
            "delimiters in the method confuse routing and logging"),
    _reject("line_space_in_target", b"GET /a b HTTP/1.1\r\n" + HOST + b"\r\n", 400,
            "RFC 9112 §3 (exactly method SP target SP version); §3.2",
            "'b HTTP/1.1' misread as the version, or 'HTTP/1.1' as part of the path"),
    _reject("line_ctl_in_target", b"GET /a\x1bb HTTP/1.1\r\n" + HOST + b"\r\n", 400,
            "RFC 9112 §3.2 (request-target is URI characters); RFC 3986",
            "escape bytes reaching logs and terminals"),
    _reject("line_no_version", b"GET /\r\n" + HOST + b"\r\n", 400,
            "RFC 9112 §3 (HTTP-version is required; HTTP/0.9 is not supported)",
            "an HTTP/0.9 reading would answer with a bare body and no status line"),
    _reject("line_version_garbage", b"GET / HTTP/1.x\r\n" + HOST + b"\r\n", 400,
            "RFC 9112 §2.3 (HTTP-version = 'HTTP/' DIGIT '.' DIGIT)",
            "a malformed version is not an unsupported one: 400, not 505"),
    _reject("line_version_lowercase", b"GET / http/1.1\r\n" + HOST + b"\r\n", 400,
            "RFC 9112 §2.3 (HTTP-name is case-sensitive)",
            "lenient version parsing hides a non-HTTP client"),
    _reject("line_http2", b"GET / HTTP/2.0\r\n" + HOST + b"\r\n", 505,
            "RFC 9110 §15.6.6 (505: major version not supported); RFC 9110 §2.5",
            "an HTTP/1 parser must not guess at another major version's framing"),
    _reject("line_http3", b"GET / HTTP/3.0\r\n" + HOST + b"\r\n", 505,
            "RFC 9110 §15.6.6", "same as HTTP/2.0"),
    _reject("line_h2_preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", (400, 505),
            "RFC 9113 §3.4 (prior-knowledge HTTP/2 preface) on an HTTP/1-only port;"
            " RFC 9110 §15.6.6", "the client speaks another protocol: refuse it clearly"),
    _reject("line_tls_handshake", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03"
            + bytes(range(32)) + b"\r\n\r\n", 400,
            "RFC 9112 §3 (an invalid request-line gets 400)",
            "a TLS ClientHello sent to a plain-HTTP port must not hang or crash the server"),
    _reject("limit_request_line", b"GET /" + b"a" * (MAX_REQUEST_LINE + 100)
            + b" HTTP/1.1\r\n" + HOST + b"\r\n", 414,
            "RFC 9112 §3 (a target longer than the server will parse -> 414); RFC 9110"
            " §15.5.15; Config.max_request_line",
            "unbounded request lines are a memory exhaustion vector"),
    # --- field lines (RFC 9112 §5, RFC 9110 §5) ------------------------------------------------
    _reject("field_space_before_colon", POST + b"Content-Length : 5\r\n\r\nhello", 400,
            "RFC 9112 §5.1 (whitespace before the colon MUST get 400); llhttp CVE-2021-22959",
            "'Content-Length ' taken as Content-Length by one hop, ignored by another"),
    _reject("field_tab_before_colon", POST + b"Content-Length\t: 5\r\n\r\nhello", 400,
            "RFC 9112 §5.1 (no whitespace, HTAB included, before the colon)",
            "the same desync as a space, with a character some parsers forget"),
    _reject("field_obs_fold", GET + b"X-Folded: a\r\n b\r\n\r\n", 400,
            "RFC 9112 §5.2 (obs-fold: reject with 400, or unfold; the contract rejects)",
            "folded lines read as one field by one hop and as two by another"),
    _reject("field_ws_before_first", b"GET / HTTP/1.1\r\n X-Pad: 1\r\n" + HOST + b"\r\n", 400,
            "RFC 9112 §2.2 (whitespace between start-line and first field)",
            "a first field hidden from one parser and visible to another"),
    # --8<-- [start:field_values]
    _reject("field_nul_in_value", GET + b"X-Nul: a\x00b\r\n\r\n", 400,
            "RFC 9110 §5.5 (NUL in a field value: reject or replace by SP)",
            "C strings end at NUL: the value differs across hops"),
    _reject("field_bare_cr_in_value", GET + b"X-Cr: a\rb\r\n\r\n", 400,
            "RFC 9110 §5.5, RFC 9112 §2.2; llhttp CVE-2023-30589 (CR alone ended a field)",
            "a bare CR starts a new field for one parser only"),
    _reject("field_bare_lf", POST + b"Content-Length: 48\r\nX-Header: x\nContent-Length: 0\r\n"
            b"\r\n" + SMUGGLED, 400,
            "RFC 9112 §2.2 (the contract: CRLF only); waitress GHSA-pg36-wpm5-g57p"
            " / CVE-2019-16785 (this exact shape)",
            "a hidden second Content-Length after a bare LF"),
    _reject("field_ctl_in_value", GET + b"X-Ctl: a\x01b\r\n\r\n", 400,
            "RFC 9110 §5.5 (field-vchar = VCHAR / obs-text; CTLs are invalid)",
            "control bytes in values reach logs and downstream headers"),
    _reject("field_del_in_value", GET + b"X-Del: a\x7fb\r\n\r\n", 400,
            "RFC 9110 §5.5 (DEL is neither VCHAR nor obs-text)", "same as other CTLs"),
    # --8<-- [end:field_values]
    _reject("field_bad_name_char", GET + b"X(Bad): 1\r\n\r\n", 400,
            "RFC 9110 §5.1 (field-name = token; '(' is a delimiter)",
            "names with delimiters are parsed differently across hops"),
    _reject("field_non_ascii_name", GET + b"X-Caf\xc3\xa9: 1\r\n\r\n", 400,
            "RFC 9110 §5.1 (token is ASCII)", "name normalisation differs across hops"),
    _reject("field_empty_name", GET + b": nothing\r\n\r\n", 400,
            "RFC 9110 §5.1 (token is at least one character)",
            "an empty name is a parsing hole"),
    _reject("field_no_colon", GET + b"NoColonHere\r\n\r\n", 400,
            "RFC 9112 §5 (field-line = field-name ':' OWS field-value OWS)",
            "a line without colon skipped by one hop, rejected by another"),
    _reject("host_missing", b"GET / HTTP/1.1\r\nX-No-Host: 1\r\n\r\n", 400,
            "RFC 9112 §3.2: a server MUST answer 400 to an HTTP/1.1 request without Host",
            "virtual-host routing with no host"),
    _reject("host_repeated", GET + b"Host: evil.example\r\n\r\n", 400,
            "RFC 9112 §3.2: more than one Host field line MUST get 400",
            "one hop routes by the first Host, another by the last"),
    _reject("limit_header_block", GET + b"X-Big: " + b"a" * (MAX_HEADER_SIZE + 1024)
            + b"\r\n\r\n", 431,
            "RFC 6585 §5 (431 Request Header Fields Too Large); Config.max_header_size",
            "unbounded header blocks are a memory exhaustion vector"),
    _reject("limit_header_count", GET + _many_fields(MAX_HEADERS + 20) + b"\r\n", 431,
            "RFC 6585 §5; Config.max_headers",
            "many small fields cost a dict entry each (hash-flooding, CPU)"),
    _reject("limit_body_declared", POST + b"Content-Length: %d\r\n\r\n" % (MAX_BODY_SIZE + 1)
            + b"x" * 16, 413,
            "RFC 9110 §15.5.14 (413 Content Too Large); Config.max_body_size",
            "the declared length alone shows the body is too large: refuse before reading"),
    _reject("limit_body_chunked", CHUNKED + b"%x\r\n" % (MAX_BODY_SIZE // 2 + 8)
            + b"y" * (MAX_BODY_SIZE // 2 + 8) + b"\r\n" + b"%x\r\n" % (MAX_BODY_SIZE // 2 + 8)
            + b"y" * (MAX_BODY_SIZE // 2 + 8) + b"\r\n0\r\n\r\n", 413,
            "RFC 9110 §15.5.14; Config.max_body_size (counted as chunks arrive)",
            "a chunked body has no declared size: the limit must be enforced while reading"),
    # --- valid but unusual: must be accepted (a server must not be over-strict) ----------------
    _accept("ok_chunk_extensions", CHUNKED + b'5;name=value;flag\r\nhello\r\n'
            b'6;q="a b"\r\n world\r\n0;last\r\n\r\n',
            "RFC 9112 §7.1.1 (a recipient MUST ignore unrecognized chunk extensions)",
            "extensions, including a quoted value, are legal and ignored",
            echo=(("body", "hello world"),)),
    _accept("ok_chunk_trailers", CHUNKED + b"5\r\nhello\r\n0\r\nX-Checksum: abc\r\n"
            b"X-Other: 1\r\n\r\n",
            "RFC 9112 §7.1.2 (trailer section after the last chunk)",
            "trailer fields must be consumed, not read as the next request",
            echo=(("body", "hello"),)),
    _accept("ok_chunk_size_zeros_upper", CHUNKED + b"000A\r\n0123456789\r\n000\r\n\r\n",
            "RFC 9112 §7.1 (chunk-size = 1*HEXDIG, any case; last-chunk = 1*'0')",
            "leading zeros and upper-case hex are valid", echo=(("body", "0123456789"),)),
    _accept("ok_te_case_insensitive", POST + b"Transfer-Encoding: Chunked\r\n\r\n"
            b"5\r\nhello\r\n0\r\n\r\n",
            "RFC 9112 §7 (transfer-coding names are case-insensitive)",
            "'Chunked' is chunked", echo=(("body", "hello"),)),
    _accept("ok_cl_leading_zeros", POST + b"Content-Length: 005\r\n\r\nhello",
            "RFC 9110 §8.6 (1*DIGIT: leading zeros are digits)",
            "'005' is five", echo=(("body", "hello"),)),
    _accept("ok_cl_ows", POST + b"Content-Length: \t5 \r\n\r\nhello",
            "RFC 9112 §5.1 (OWS around a field value is not part of it); RFC 9110 §8.6",
            "whitespace around the digits is framing-neutral", echo=(("body", "hello"),)),
    _accept("ok_te_ows", POST + b"Transfer-Encoding:  chunked \t\r\n\r\n5\r\nhello\r\n"
            b"0\r\n\r\n", "RFC 9112 §5.1 (OWS around a field value); RFC 9112 §7",
            "' chunked ' is chunked", echo=(("body", "hello"),)),
    _accept("ok_get_with_body", GET + b"Content-Length: 5\r\n\r\nhello",
            "RFC 9110 §9.3.1 (GET content has no semantics) with RFC 9112 §6.3 (still framed"
            " by Content-Length)", "ignoring the length would parse 'hello' as a request",
            echo=(("method", "GET"), ("body", "hello"))),
    _accept("ok_http10_no_host", b"GET /old HTTP/1.0\r\n\r\n",
            "RFC 9112 §3.2 (Host is required in HTTP/1.1 only); §9.3 (1.0 closes by default)",
            "an HTTP/1.0 request without Host is valid, and the connection then closes",
            then="close", echo=(("path", "/old"),)),
    _accept("ok_http10_keep_alive", b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
            "RFC 9112 §9.3 and Appendix C.2.2 (HTTP/1.0 keep-alive)",
            "a 1.0 client asking for keep-alive gets its next request answered"),
    _accept("ok_http11_minor_2", b"GET / HTTP/1.2\r\n" + HOST + b"\r\n",
            "RFC 9110 §2.5 (a higher minor version is handled as the highest supported)",
            "1.2 is 1.x: answer it as 1.1, 505 is only for another major version"),
    _accept("ok_absolute_form", b"GET http://example.com/abs/path?q=1 HTTP/1.1\r\n" + HOST
            + b"\r\n", "RFC 9112 §3.2.2 (a server MUST accept the absolute-form)",
            "path and query come from the absolute URI",
            echo=(("path", "/abs/path"), ("query_string", "q=1"))),
    _accept("ok_asterisk_form", b"OPTIONS * HTTP/1.1\r\n" + HOST + b"\r\n",
            "RFC 9112 §3.2.4 (asterisk-form for server-wide OPTIONS)",
            "'*' is a valid target for OPTIONS", echo=(("method", "OPTIONS"),)),
    _accept("ok_percent_encoded_path", b"GET /a%20b%2Fc?x=%41 HTTP/1.1\r\n" + HOST + b"\r\n",
            "RFC 3986 §2.1; ASGI HTTP scope (path decoded, raw_path as sent)",
            "percent-encoding is decoded once for path and kept in raw_path",
            echo=(("path", "/a b/c"), ("raw_path", "/a%20b%2Fc"), ("query_string", "x=%41"))),
    _accept("ok_leading_empty_line", b"\r\n" + GET + b"\r\n",
            "RFC 9112 §2.2 (a server SHOULD ignore at least one empty line before the"
            " request-line)", "some clients send a stray CRLF after a POST body"),
    _accept("ok_obs_text_value", GET + b"X-Latin: caf\xe9\r\n\r\n",
            "RFC 9110 §5.5 (field-vchar includes obs-text %x80-FF)",
            "bytes >= 0x80 in a value are allowed and passed through as bytes",
            echo=(("header", ("x-latin", "caf\xe9")),)),
    _accept("ok_tab_in_value", GET + b"X-Tab: a\tb\r\n\r\n",
            "RFC 9110 §5.5 (SP and HTAB are allowed inside a field value)",
            "HTAB is whitespace, not a control to reject", echo=(("header", ("x-tab", "a\tb")),)),
    _accept("ok_ows_around_value", GET + b"X-Ows: \t padded \t\r\n\r\n",
            "RFC 9112 §5.1 (OWS before and after the value is not part of it)",
            "the app sees the value without surrounding whitespace",
            echo=(("header", ("x-ows", "padded")),)),
    _accept("ok_empty_value", GET + b"X-Empty:\r\n\r\n",
            "RFC 9110 §5.5 (field-value may be empty)", "an empty value is valid",
            echo=(("header", ("x-empty", "")),)),
    _accept("ok_tchar_name", GET + b"X-!#$%&'*+.^_`|~: ok\r\n\r\n",
            "RFC 9110 §5.6.2 (tchar includes these symbols)",
            "every tchar is legal in a field name",
            echo=(("header", ("x-!#$%&'*+.^_`|~", "ok")),)),
    _accept("ok_header_names_lowercased", GET + b"X-MiXeD-CaSe: v\r\n\r\n",
            "RFC 9110 §5.1 (names are case-insensitive); ASGI (names lowercased)",
            "the app always sees lower-case names", echo=(("header", ("x-mixed-case", "v")),)),
    _accept("ok_long_target_under_limit", b"GET /" + b"a" * (MAX_REQUEST_LINE - 200)
            + b" HTTP/1.1\r\n" + HOST + b"\r\n", "Config.max_request_line (8 KiB)",
            "a request line just under the limit is served"),
    _accept("ok_many_fields_under_limit", GET + _many_fields(MAX_HEADERS - 10) + b"\r\n",
            "Config.max_headers (100)", "a header count just under the limit is served"),
    _accept("ok_body_at_limit", POST + b"Content-Length: %d\r\n\r\n" % MAX_BODY_SIZE
            + b"z" * MAX_BODY_SIZE, "Config.max_body_size",
            "a body of exactly the limit is served", echo=(("body", "z" * MAX_BODY_SIZE),)),
]

# --- where uvicorn (httptools + uvloop, the reference) differs --------------------------------
# case or test name -> what uvicorn answers instead. Each is xfail(strict=True) for uvicorn.
UVICORN_DIFFERS: dict[str, str] = {
    "te_unknown_coding": "200: llhttp frames by the final 'chunked' and ignores 'foo' (want 501)",
    "te_gzip_then_chunked": "200: the gzip coding is ignored, coded bytes reach the app"
                            " (want 501)",
    "line_no_version": "200: 'GET /' is served as an HTTP/0.9-style request (want 400)",
    "line_http2": "200: an HTTP/2.0 request line is served as HTTP/1.1 (want 505)",
    "line_http3": "400 'Invalid HTTP request received.' (want 505)",
    "limit_request_line": "200: no request-line limit (want 414)",
    "host_missing": "200: Host is not required for HTTP/1.1 (want 400)",
    "host_repeated": "200: both Host lines reach the app (want 400)",
    "limit_header_block": "200: no header-size limit (want 431)",
    "limit_header_count": "200: no header-count limit (want 431)",
    "limit_body_declared": "no answer: no body limit, waits for the declared body (want 413)",
    "limit_body_chunked": "200: no body limit (want 413)",
    "ok_http10_keep_alive": "200 with 'Connection: close': HTTP/1.0 keep-alive is not"
                            " honoured (want the next request answered)",
    "ok_http11_minor_2": "400: llhttp refuses HTTP/1.2 (want 200, served as 1.1)",
    "ok_ows_around_value": "200 but the app sees 'padded \\t': trailing OWS is kept"
                           " (RFC 9112 §5.1 excludes it)",
    "ok_te_ows": "400: llhttp refuses an HTAB after 'chunked' (trailing OWS, valid; want 200)",
    "test_stalled_headers_get_408_and_close": "no header deadline: the connection waits"
                                              " forever (want 408 and close)",
    "test_trickled_headers_hit_the_whole_block_deadline": "no header deadline: a slowloris"
                                                          " client is never cut (want 408)",
    "test_stalled_body_gets_408_and_close": "no body deadline: waits forever (want 408 and"
                                            " close)",
}


# --- where a toy server knowingly differs ------------------------------------------------------
# Gaps a toy server inherits from its parser and cannot close without weakening it.
TOY_GAPS: dict[str, dict[str, str]] = {
    "toy-h11": {
        "ok_http10_keep_alive": "200 then close: h11 ends every HTTP/1.0 exchange with a close"
                                " and has no public switch for 1.0 keep-alive (RFC 9112 §9.3"
                                " lets a server close; want the next request answered)",
        # h11 refuses every Transfer-Encoding but one 'chunked' line while it parses the
        # head, with 501, before the server sees the values (refused and closed all the same)
        "te_chunked_not_final": "501 and close: h11 answers 501 to any coding but a lone"
                                " 'chunked' (RFC 9112 §6.3 rule 4 wants 400)",
        "te_gzip_only": "501 and close: h11 answers 501 to any coding but 'chunked' (want 400)",
        "te_repeated_lines": "501 and close: h11 answers 501 to a repeated Transfer-Encoding"
                             " line (want 400)",
        "te_chunked_twice": "501 and close: h11 answers 501 to 'chunked, chunked' (want 400)",
        "te_obs_fold": "501 and close: h11 unfolds the line (RFC 9112 §5.2 allows it), then"
                       " refuses 'identity chunked' with 501 (want 400)",
        # h11 normalises these while it parses: the server only sees the result
        "field_obs_fold": "200: h11 replaces obs-fold by SP, which RFC 9112 §5.2 allows (the"
                          " contract rejects it with 400)",
        "line_bare_lf": "200: h11 takes a bare LF as a line end, which RFC 9112 §2.2 allows"
                        " (the contract rejects it with 400)",
        "cl_duplicate_identical": "200: h11 merges identical Content-Length lines, which RFC"
                                  " 9110 §8.6 allows (the contract rejects them with 400)",
        "chunk_ext_ctl": "200: h11 drops chunk extensions unread (its grammar is ';.*'), so a"
                         " control byte in one is never seen (RFC 9112 §7.1.1 wants 400)",
    },
    "toy-httptools": {
        "ok_te_ows": "400: llhttp refuses an HTAB after 'chunked'; its lenient"
                     " transfer-encoding flag would accept it but also lets a non-final"
                     " 'chunked' through, which reopens request smuggling (want 200)",
    },
}

# --- where gunicorn (gthread worker, the WSGI reference) differs --------------------------------
GUNICORN_DIFFERS: dict[str, str] = {
    "te_gzip_then_chunked": "200: the gzip coding is ignored, coded bytes reach the app"
                            " (want 501)",
    "cl_overflow": "no answer: Python's int takes the 21-digit length and no body limit refuses"
                   " it, so gunicorn waits for the body (want 400 or 413)",
    "chunk_size_overflow": "no answer: the huge chunk size is taken and waited for, no body"
                           " limit (want 400 or 413)",
    "line_http2": "400 'Invalid HTTP Version' (want 505)",
    "line_http3": "400 'Invalid HTTP Version' (want 505)",
    "host_missing": "200: Host is not required for HTTP/1.1 (want 400)",
    "limit_body_declared": "no answer: no body limit, waits for the declared body (want 413)",
    "limit_body_chunked": "200: no body limit (want 413)",
    "test_stalled_headers_get_408_and_close": "no header deadline: the connection waits until"
                                              " the worker timeout (want 408 and close)",
    "test_trickled_headers_hit_the_whole_block_deadline": "no header deadline: a slowloris"
                                                          " client is not cut (want 408)",
    "test_stalled_body_gets_408_and_close": "no body deadline: waits (want 408 and close)",
}

# --- what no WSGI server can pass on -----------------------------------------------------------
# PEP 3333 hands the app CGI-style keys (HTTP_X_USER for X-User), where '-' and '_' are one
# character: a name with '_' would pass for its '-' twin, so toy-wsgi and gunicorn drop it.
WSGI_LIMITS: dict[str, str] = {
    "ok_tchar_name": "200 without the field: a name holding '_' is dropped from the environ"
                     " (PEP 3333 keys cannot tell '_' from '-'; want it echoed)",
}
# toy-anyio feeds the same h11 (on asyncio and on trio): h11's decisions, the same gaps.
TOY_GAPS["toy-anyio"] = TOY_GAPS["toy-anyio-trio"] = TOY_GAPS["toy-h11"]
TOY_GAPS["toy-wsgi"] = WSGI_LIMITS
# The sync worker answers one request per connection (gunicorn's sync worker too): every
# response says Connection: close, and a stalled client holds the only thread.
TOY_GAPS["toy-wsgi-sync"] = {
    **WSGI_LIMITS,
    **{case.name: "200 with 'Connection: close', NEXT unanswered: the sync worker keeps no"
                  " connection alive (want the next request answered)"
       for case in CASES if not case.rejected and case.then == "next"},
    "test_stalled_clients_do_not_block_others": "the stalled clients are answered (408) before"
                                                " the other one: one thread serves them in turn",
}

KNOWN_DIFFERENCES: dict[str, dict[str, str]] = {
    "uvicorn": UVICORN_DIFFERS, "gunicorn": {**GUNICORN_DIFFERS, **WSGI_LIMITS}, **TOY_GAPS}
"""server -> case or test name -> what that server answers instead (each a strict xfail)."""


def case_names() -> list[str]:
    """All case names, in corpus order (for documentation and sanity checks)."""
    return [case.name for case in CASES]
