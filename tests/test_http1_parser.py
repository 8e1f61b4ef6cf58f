"""toyservers/http1_parser.py: the hand-written HTTP/1.1 request parser, without sockets."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import Any

import pytest

from toyservers import http1, http1_parser
from toyservers.http1 import HEAD_BYTES
from toyservers.http1_parser import (
    BadRequest,
    ChunkedDecoder,
    body_framing,
    check_partial_head,
    parse_fields,
    parse_request_head,
    split_head,
    take_head,
)

# --- parse_request_head (RFC 9112 §2.2, §3, §5) ------------------------------------------------


def test_parse_request_head_returns_method_target_version_and_lowercased_headers() -> None:
    head = b"POST /a%20b?x=1 HTTP/1.1\r\nHost: example.com\r\nX-Thing:  v a l \t\r\nX-Thing: 2"
    method, target, version, headers = parse_request_head(head)
    assert (method, target, version) == ("POST", b"/a%20b?x=1", "1.1")
    assert headers == [(b"host", b"example.com"), (b"x-thing", b"v a l"), (b"x-thing", b"2")]


@pytest.mark.parametrize(("version", "expected"), [
    (b"HTTP/1.0", "1.0"), (b"HTTP/1.1", "1.1"), (b"HTTP/1.2", "1.1"), (b"HTTP/1.9", "1.1"),
])
def test_any_http_1_minor_version_is_accepted(version: bytes, expected: str) -> None:
    assert parse_request_head(b"GET / " + version + b"\r\nHost: x")[2] == expected


def test_obs_text_is_allowed_in_field_values() -> None:
    headers = parse_request_head(b"GET / HTTP/1.1\r\nHost: x\r\nX-Name: caf\xc3\xa9")[3]
    assert headers[1] == (b"x-name", b"caf\xc3\xa9")


@pytest.mark.parametrize(("head", "status"), [
    (b"GET / HTTP/2.0\r\nHost: x", 505),
    (b"GET / HTTP/3.0\r\nHost: x", 505),
    (b"GET / HTTP/0.9\r\nHost: x", 505),
    (b"GET / HTTP/1.10\r\nHost: x", 400),
    (b"GET / HTTP/1\r\nHost: x", 400),
    (b"GET / http/1.1\r\nHost: x", 400),
    (b"GET / FOO\r\nHost: x", 400),
    (b"GET /\r\nHost: x", 400),
    (b"GET  / HTTP/1.1\r\nHost: x", 400),
    (b" GET / HTTP/1.1\r\nHost: x", 400),
    (b"GET / HTTP/1.1 \r\nHost: x", 400),
    (b"G(T / HTTP/1.1\r\nHost: x", 400),
    (b"GET /a\tb HTTP/1.1\r\nHost: x", 400),
    (b"GET /\xff HTTP/1.1\r\nHost: x", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x7fb", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb", 400),
    (b"GET / HTTP/1.1\r\nHost: x\nX-A: b", 400),
    (b"GET / HTTP/1.1\rHost: x", 400),
    (b"GET / HTTP/1.1\r\nHost : x", 400),
    (b"GET / HTTP/1.1\r\nHost\t: x", 400),
    (b"GET / HTTP/1.1\r\n Host: x", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX-A: b\r\n  folded", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX-A b", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\n: empty-name", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX(A): b", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX-\xc3\xa9: b", 400),
])
def test_malformed_heads_are_refused_with_the_right_status(head: bytes, status: int) -> None:
    with pytest.raises(BadRequest) as info:
        parse_request_head(head)
    assert info.value.status == status


def test_head_limits_give_414_and_431() -> None:
    long_line = b"GET /" + b"a" * 100 + b" HTTP/1.1\r\nHost: x"
    with pytest.raises(BadRequest) as info:
        parse_request_head(long_line, max_request_line=50)
    assert info.value.status == 414
    big_fields = b"GET / HTTP/1.1\r\nHost: x\r\nX-A: " + b"b" * 100
    with pytest.raises(BadRequest) as info:
        parse_request_head(big_fields, max_header_size=50)
    assert info.value.status == 431
    many = b"GET / HTTP/1.1\r\nHost: x" + b"\r\nX-A: b" * 5
    assert len(parse_request_head(many, max_headers=6)[3]) == 6
    with pytest.raises(BadRequest) as info:
        parse_request_head(many, max_headers=5)
    assert info.value.status == 431


@pytest.mark.parametrize(("buffer", "status"), [
    (b"GET /" + b"a" * 200, 414),
    (b"GET /" + b"a" * 200 + b" HTTP/1.1\r\n", 414),
    (b"GET / HTTP/1.1\r\nX-A: " + b"b" * 300, 431),
    (b"GET / HTTP/1.1" + b"\r\nX-A: b" * 20, 431),
    (b"GET / HTTP/1.1\nHost: x\n\n", 400),
    (b"GET /\x00", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\rX", 400),
])
def test_check_partial_head_refuses_early(buffer: bytes, status: int) -> None:
    with pytest.raises(BadRequest) as info:
        check_partial_head(buffer, max_request_line=100, max_header_size=200, max_headers=10)
    assert info.value.status == status


@pytest.mark.parametrize("buffer", [b"GET / HTTP/1.1\r", b"GET / HTTP/1.1\r\nHost: x\r\n\r",
                                    b"G", b"GET / HTTP/1.1\r\nX-A: " + b"b" * 150])
def test_check_partial_head_waits_for_more(buffer: bytes) -> None:
    check_partial_head(buffer, max_request_line=100, max_header_size=200, max_headers=10)


def test_take_head_cuts_a_whole_head_and_checks_an_unfinished_one() -> None:
    buffer = bytearray(b"\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\nbodyGET")
    assert take_head(buffer, 100, 200, 10) == b"GET / HTTP/1.1\r\nHost: x"
    assert buffer == b"bodyGET"  # the body and what follows stay for the caller
    unfinished = bytearray(b"\r\nGET / HTTP/1.1\r\nHost")
    assert take_head(unfinished, 100, 200, 10) is None
    assert unfinished == b"GET / HTTP/1.1\r\nHost"  # leading empty lines dropped
    with pytest.raises(BadRequest) as info:
        take_head(bytearray(b"GET /" + b"a" * 200), 100, 200, 10)
    assert info.value.status == 414


def test_split_head_gives_the_head_and_the_rest_or_the_unfinished_bytes() -> None:
    data = b"\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\nbodyGET"
    assert split_head(data, 100, 200, 10) == (b"GET / HTTP/1.1\r\nHost: x", b"bodyGET")
    assert split_head(b"\r\nGET / HTTP/1.1\r\nHost", 100, 200, 10) == (
        None, b"GET / HTTP/1.1\r\nHost")  # leading empty lines dropped
    assert split_head(b"\r\n\r", 100, 200, 10) == (None, b"\r")  # a CR awaiting its LF
    with pytest.raises(BadRequest) as info:
        split_head(b"\r\n\rGET / HTTP/1.1", 100, 200, 10)
    assert info.value.status == 400  # unfinished, with a bare CR after the empty line


def test_split_head_drops_many_empty_lines_in_one_pass() -> None:
    """A flood of CRLFs is dropped in one pass over the bytes: a copy per line would be
    quadratic (100,000 lines: 10 GB copied)."""
    start = time.perf_counter()
    assert split_head(b"\r\n" * 100_000 + b"GET", 100, 200, 10) == (None, b"GET")
    assert time.perf_counter() - start < 1.0


# --- body_framing (RFC 9112 §6, §9.3; RFC 9110 §10.1.1) --------------------------------------


def framing(version: str, *fields: tuple[bytes, bytes]) -> tuple[int | None, bool, bool, bool]:
    return body_framing(version, [(b"host", b"x"), *fields])[:4]


def test_framing_content_length_chunked_keep_alive_and_expect() -> None:
    assert framing("1.1") == (None, False, True, False)
    assert framing("1.1", (b"content-length", b"0042")) == (42, False, True, False)
    assert framing("1.1", (b"transfer-encoding", b"Chunked")) == (None, True, True, False)
    assert framing("1.1", (b"transfer-encoding", b", chunked,")) == (None, True, True, False)
    assert framing("1.1", (b"connection", b"Keep-Alive, Close")) == (None, False, False, False)
    assert framing("1.0") == (None, False, False, False)
    assert framing("1.0", (b"connection", b"keep-alive")) == (None, False, True, False)
    assert framing("1.1", (b"expect", b"100-Continue"))[3] is True
    assert framing("1.0", (b"expect", b"100-continue"))[3] is False
    assert body_framing("1.0", []) == (None, False, False, False, b"", False)


def test_framing_gives_the_upgrade_field_of_1_1_requests_only() -> None:
    """RFC 9110 §7.8: several Upgrade lines are one list; "A server MUST ignore an Upgrade
    header field that is received in an HTTP/1.0 request"."""
    fields = [(b"host", b"x"), (b"upgrade", b"websocket"), (b"upgrade", b"h2c")]
    assert body_framing("1.1", fields)[4] == b"websocket,h2c"
    assert body_framing("1.0", fields)[4] == b""
    assert body_framing("1.1", fields[:1])[4] == b""


@pytest.mark.parametrize(("fields", "status"), [
    ([(b"content-length", b"5"), (b"transfer-encoding", b"chunked")], 400),
    ([(b"transfer-encoding", b"chunked"), (b"content-length", b"5")], 400),
    ([(b"transfer-encoding", b"gzip")], 400),
    ([(b"transfer-encoding", b"chunked, gzip")], 400),
    ([(b"transfer-encoding", b"chunked"), (b"transfer-encoding", b"identity")], 400),
    ([(b"transfer-encoding", b"chunked, chunked")], 400),
    ([(b"transfer-encoding", b"chunked;x=1")], 400),
    ([(b"transfer-encoding", b"")], 400),
    ([(b"transfer-encoding", b"gzip, chunked")], 501),
    ([(b"transfer-encoding", b"foo, chunked")], 501),
    ([(b"content-length", b"5"), (b"content-length", b"5")], 400),
    ([(b"content-length", b"5, 6")], 400),
    ([(b"content-length", b"+5")], 400),
    ([(b"content-length", b"-5")], 400),
    ([(b"content-length", b"5 5")], 400),
    ([(b"content-length", b"0x5")], 400),
    ([(b"content-length", b"")], 400),
    ([(b"content-length", "５".encode())], 400),
    ([(b"content-length", b"9" * 30)], 400),
    ([(b"content-length", b"9223372036854775808")], 400),  # 2**63: an overflow (§6.3)
    ([(b"transfer-encoding", b"gzip"), (b"transfer-encoding", b"chunked")], 501),
    ([(b"transfer-encoding", b"chunked"), (b"transfer-encoding", b"chunked")], 400),
    ([(b"host", b"a:b")], 400),
    ([(b"host", b"y")], 400),
    ([(b"host", b"a b")], 400),
    ([(b"host", b"x/y")], 400),
])
def test_framing_refusals(fields: list[tuple[bytes, bytes]], status: int) -> None:
    with pytest.raises(BadRequest) as info:
        framing("1.1", *fields)
    assert info.value.status == status


def test_host_is_required_in_1_1_only_and_never_twice() -> None:
    with pytest.raises(BadRequest):
        body_framing("1.1", [])
    assert body_framing("1.0", [(b"host", b"[::1]:8000")])[2] is False
    with pytest.raises(BadRequest):
        body_framing("1.0", [(b"host", b"a"), (b"host", b"a")])
    with pytest.raises(BadRequest) as info:
        body_framing("1.0", [(b"transfer-encoding", b"chunked")])
    assert info.value.status == 400


# --- the fast paths give the answers of the checks they skip ----------------------------------


@pytest.fixture
def cold_caches() -> Iterator[None]:
    """Empty the caches of checked names and Host values, and restore them after the test."""
    names, hosts = dict(http1_parser._field_names), set(http1_parser._known_hosts)
    http1_parser._field_names.clear()
    http1_parser._known_hosts.clear()
    yield
    http1_parser._field_names.clear()
    http1_parser._field_names.update(names)
    http1_parser._known_hosts.clear()
    http1_parser._known_hosts.update(hosts)


def outcome(parse: Any, *args: Any) -> Any:
    try:
        return parse(*args)
    except BadRequest as exc:
        return exc.status, exc.reason


def test_head_marks_table_finds_what_deleting_head_bytes_leaves() -> None:
    for byte in range(256):
        for data in (bytes([byte]), b"a\r\n" + bytes([byte]) * 3 + b"\r\n"):
            marks = data.translate(http1_parser._HEAD_MARKS).count(0)
            assert marks == len(data.translate(None, HEAD_BYTES)), data


def test_known_methods_are_tokens_and_decode_to_themselves() -> None:
    for raw, name in http1_parser.METHODS.items():
        assert http1.is_token(raw) and raw.decode("ascii") == name


def random_field_lines(seed: int, count: int) -> list[bytes]:
    rng = random.Random(seed)
    pieces = [b"Host", b"host", b"X-A", b"x(a)", b"", b":", b": ", b" ", b"\t", b"v a l",
              b"caf\xc3\xa9", b"Content-Length", b"\xc3\xa9", b"a:b"]
    return [b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 4))) for _ in range(count)]


def test_known_field_names_give_the_answers_of_the_check(cold_caches: None) -> None:
    lines = random_field_lines(seed=9112, count=3000)
    checked = [outcome(parse_fields, [line]) for line in lines]  # the first sight of each name
    assert len(http1_parser._field_names) > 5
    assert [outcome(parse_fields, [line]) for line in lines] == checked  # now from the cache
    for line in (b"Host", b"X-A", b" Host: x"):  # a known name is no excuse for a bad line
        assert outcome(parse_fields, [line])[0] == 400


def test_known_hosts_give_the_answers_of_the_check(cold_caches: None) -> None:
    cases = [[], [b"x"], [b"a b"], [b"x", b"x"], [b"[::1]:80"], [b"x/y"], [b"x:80"], [b"x"]]
    for version in ("1.1", "1.0"):
        cold = [outcome(body_framing, version, [(b"host", h) for h in hosts]) for hosts in cases]
        warm = [outcome(body_framing, version, [(b"host", h) for h in hosts]) for hosts in cases]
        assert warm == cold
        assert http1_parser._known_hosts == {b"x", b"[::1]:80", b"x:80"}


# --- ChunkedDecoder (RFC 9112 §7.1) ------------------------------------------------------------

CHUNKED = (b"5;name=value;q=\"a \\\" b\" ; flag\r\nhello\r\n"
           b"1A\r\n" + b"x" * 26 + b"\r\n"
           b"000\r\nX-Trailer: yes\r\nX-Other:  1\r\n\r\nNEXT")


def test_chunked_decoder_whole_buffer_with_extensions_and_trailers() -> None:
    decoder = ChunkedDecoder()
    buffer = bytearray(CHUNKED)
    assert decoder.feed(buffer) == b"hello" + b"x" * 26
    assert decoder.done
    assert buffer == b"NEXT"  # the next request's bytes are left alone


def test_chunked_decoder_one_byte_at_a_time_gives_the_same_body() -> None:
    decoder = ChunkedDecoder()
    buffer = bytearray()
    out = b""
    for byte in CHUNKED:
        buffer.append(byte)
        out += decoder.feed(buffer)
        if decoder.done:
            break
    assert out == b"hello" + b"x" * 26
    assert decoder.done and buffer == b""


@pytest.mark.parametrize("body", [
    b"5\nhello\r\n0\r\n\r\n",  # bare LF after the size
    b"5\r\nhelloX\r\n0\r\n\r\n",  # no CRLF after the data
    b"5\r\nhello\n0\r\n\r\n",  # bare LF after the data
    b"5\r\nhello\r\r\n",  # CR not followed by LF
    b"-5\r\nhello\r\n0\r\n\r\n",
    b"0x5\r\nhello\r\n0\r\n\r\n",
    b" 5\r\nhello\r\n0\r\n\r\n",
    b"5 \r\nhello\r\n0\r\n\r\n",  # whitespace is allowed only before ';'
    b"\r\nhello\r\n0\r\n\r\n",
    b"g\r\n",
    b"1" * 17 + b"\r\n",  # more than 64 bits
    b"5;\r\nhello\r\n0\r\n\r\n",
    b"5;a=\r\nhello\r\n0\r\n\r\n",
    b"5;a=\"unterminated\r\nhello\r\n0\r\n\r\n",
    b"5;a b\r\nhello\r\n0\r\n\r\n",
    b"5;a=b\x00\r\nhello\r\n0\r\n\r\n",
    b"5\r\nhello\r\n0\r\nBad Trailer: x\r\n\r\n",
    b"5\r\nhello\r\n0\r\n folded\r\n\r\n",
    b"5\r\nhello\r\n0\r\nX: a\rb\r\n\r\n",
    b"5\r\nhello\r\n0\r\n\n",
    b"5" + b";a=b" * 2000 + b"\r\n",
])
def test_chunked_decoder_refuses_malformed_framing(body: bytes) -> None:
    with pytest.raises(BadRequest) as info:
        ChunkedDecoder().feed(bytearray(body))
    assert info.value.status == 400


def test_chunked_decoder_stops_at_its_limit_and_goes_on_later() -> None:
    decoder = ChunkedDecoder()
    buffer = bytearray(b"1\r\nx\r\n" * 100 + b"0\r\n\r\nNEXT")
    assert decoder.feed(buffer, limit=10) == b"x" * 10
    assert len(buffer) == 90 * 6 + 9  # the rest waits in the buffer
    assert decoder.feed(buffer) == b"x" * 90 and decoder.done and buffer == b"NEXT"


class CountingBuffer(bytearray):
    """A bytearray that counts how often the front is cut off it."""

    cuts = 0

    def __delitem__(self, key: Any) -> None:
        self.cuts += 1
        super().__delitem__(key)


def test_chunked_decoder_cuts_the_buffer_once_per_feed() -> None:
    """Finding 4: a ``del`` (and a regex) per chunk line made tiny chunks stall the loop
    (300k one-byte chunks: 1.5 s of CPU); an offset walks the buffer, cut once at the end."""
    buffer = CountingBuffer(b"1\r\nx\r\n" * 10_000 + b"3;ext=1\r\nabc\r\n0\r\n\r\nNEXT")
    assert ChunkedDecoder().feed(buffer, limit=10**6) == b"x" * 10_000 + b"abc"
    assert buffer.cuts == 1 and buffer == b"NEXT"


def test_chunked_decoder_takes_tiny_chunks_fast() -> None:
    buffer = bytearray(b"1\r\nx\r\n" * 200_000)
    start = time.perf_counter()
    assert len(ChunkedDecoder().feed(buffer, limit=10**6)) == 200_000
    assert time.perf_counter() - start < 2.0  # ~0.25 s here, 0.7 s before


def test_chunk_line_over_the_limit_in_one_read_is_refused() -> None:
    line = b"5;" + b"a=b;" * 1100 + b"a=b\r\nhello\r\n0\r\n\r\n"
    with pytest.raises(BadRequest) as info:
        ChunkedDecoder().feed(bytearray(line))
    assert info.value.status == 400
    assert ChunkedDecoder(max_line=5000).feed(bytearray(line)) == b"hello"


def test_chunked_decoder_limits_the_trailer_section() -> None:
    body = b"0\r\n" + b"X-A: b\r\n" * 5 + b"\r\n"
    ChunkedDecoder(max_trailers=5).feed(bytearray(body))
    with pytest.raises(BadRequest) as info:
        ChunkedDecoder(max_trailers=4).feed(bytearray(body))
    assert info.value.status == 431


@pytest.mark.parametrize(("size", "body"), [
    (b"0" * 17 + b"5", b"hello"),  # 18 digits, the value 5
    (b"0" * 40 + b"5;ext=1", b"hello"),
    (b"0" * 16 + b"F" * 16, None),  # 2**64 - 1 after the zeros: too large to send, not refused
])
def test_leading_zeros_do_not_count_against_the_chunk_size_limit(
        size: bytes, body: bytes | None) -> None:
    """Differential fuzzing (tests/test_http1_differential.py) found us refusing a chunk size
    of more than 16 hex digits even when its value was small: RFC 9112 §7.1 has chunk-size =
    1*HEXDIG, leading zeros included, and asks only that a recipient "anticipate potentially
    large hexadecimal numerals and prevent parsing errors due to integer conversion
    overflows"; h11 and llhttp read the value. Sixteen significant digits still bound it."""
    decoder = ChunkedDecoder()
    if body is None:
        buffer = bytearray(size + b"\r\nabc")
        assert decoder.feed(buffer) == b"abc" and decoder.remaining == 2**64 - 1 - 3
        return
    buffer = bytearray(size + b"\r\n" + body + b"\r\n" + b"0" * 20 + b"\r\n\r\nNEXT")
    assert decoder.feed(buffer) == body and decoder.done and buffer == b"NEXT"


@pytest.mark.parametrize("size", [b"1" + b"0" * 16, b"0" * 3 + b"1" + b"0" * 16, b"0" * 5000])
def test_chunk_sizes_past_64_bits_or_the_line_limit_are_still_refused(size: bytes) -> None:
    with pytest.raises(BadRequest) as info:
        ChunkedDecoder().feed(bytearray(size + b"\r\nhello\r\n0\r\n\r\n"))
    assert info.value.status == 400
