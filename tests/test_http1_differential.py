"""Differential fuzzing: our HTTP/1.1 parser, h11 and llhttp read the same bytes alike.

Requests, valid and near-valid, come from hypothesis (``tests/support/differential.py``: the
request line, the field grammar and the chunk grammar mutated, plus stray bytes anywhere),
each followed by a pipelined request. Each parser's reading (refused, incomplete, or the
request with its method, target, version, headers, body and the bytes it took) must be ours,
unless a declared difference (``KNOWN_DIFFERENCES``, each with its RFC clause) explains it.

The run here is short and fixed (a seed: the same cases on every machine); the long
one is ``.venv/bin/python scripts/fuzz_http1.py --examples 200000``.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, Phase, find, given, seed, settings

from tests.support import differential
from tests.support.differential import (
    KNOWN_DIFFERENCES,
    NEXT,
    READERS,
    REQUESTS,
    classify,
    describe,
    explained_by,
    read_ours,
)
from toyservers import http1

# A fixed seed, no example database: the same cases on every machine and every run.
SHORT_RUN = settings(max_examples=4000, deadline=None, database=None,
                     suppress_health_check=[HealthCheck.too_slow])


@seed(20251127)
@SHORT_RUN
@given(REQUESTS)
def test_parsers_agree_or_differ_only_as_declared(data: bytes) -> None:
    ours, theirs, findings = classify(data)
    assert not findings, "\n".join(
        [f"input: {data!r}", f"ours: {describe(ours)}"]
        + [f"{name}: {describe(theirs[name])}" for name in findings])


# One input per declared difference: each is a real disagreement, and the difference that
# explains it is that one (a rewrite that stopped matching would leave the case unexplained).
EXAMPLES: dict[str, bytes] = {
    "h11 reads a bare LF as a line end": b"GET / HTTP/1.1\nHost: a\n\n",
    "h11 unfolds obs-fold": b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n",
    "h11 merges identical Content-Length values":
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi",
    "h11 refuses an empty line before the request line": b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
    "h11 lowercases Transfer-Encoding":
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
    "llhttp keeps trailing OWS in a field value": b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b \r\n\r\n",
    "llhttp refuses a value its trailing OWS made invalid":
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\t\r\n\r\n0\r\n\r\n",
    "llhttp skips any CR and LF before the request line": b"\r\rGET / HTTP/1.1\r\nHost: a\r\n\r\n",
    "llhttp takes a run of SP for one in the request line": b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
    "llhttp knows only its own list of methods": b"FROB / HTTP/1.1\r\nHost: a\r\n\r\n",
    "h11 does not read chunk extensions":
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2;a=\x01\r\nhi\r\n"
        b"0\r\n\r\n",
    "h11 lets control bytes through in trailer values":
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: \x7f\r\n\r\n",
    "h11 allows whitespace after a chunk size":
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2 \r\nhi\r\n0\r\n\r\n",
    "h11 waits for a chunk size past 64 bits":
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1" + b"0" * 17 + b"\r\n",
    "h11 refuses a chunk size of more than 20 digits":
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" + b"0" * 40
        + b"2\r\nhi\r\n0\r\n\r\n",
    "h11 refuses empty list elements beside 'chunked'":
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked,\r\n\r\n0\r\n\r\n",
    "llhttp refuses empty list elements beside 'chunked'":
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked,\r\n\r\n0\r\n\r\n",
    "h11 refuses BWS in a chunk extension":
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2 ; a = b\r\nhi\r\n"
        b"0\r\n\r\n",
    "llhttp refuses BWS in a chunk extension":
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\t;a\r\nhi\r\n0\r\n\r\n",
    "we refuse an unfinished head h11 still waits on": b"GET / HTTP/1.1\r\nHost: a\x00",
    "llhttp accepts an empty chunk-extension value":
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2;a=\r\nhi\r\n0\r\n\r\n",
}


def test_every_declared_difference_has_an_example_and_a_clause() -> None:
    assert sorted(EXAMPLES) == sorted(d.name for d in KNOWN_DIFFERENCES)
    for difference in KNOWN_DIFFERENCES:
        assert re.search(r"RFC 911[02] §\d", difference.clause), difference.name


@pytest.mark.parametrize("difference", KNOWN_DIFFERENCES, ids=lambda d: d.name)
def test_a_declared_difference_explains_its_example_and_only_that(
        difference: differential.Difference) -> None:
    data = EXAMPLES[difference.name]
    ours, theirs = read_ours(data), READERS[difference.parser](data)
    assert ours != theirs, f"no longer a difference: {describe(ours)}"
    assert explained_by(difference.parser, data, ours, theirs) == [difference.name]


@pytest.mark.parametrize("data", [
    # the same requests, each with one more thing wrong that no difference covers
    b"GET / HTTP/1.1\nHost: a\nContent-Length: 2\n\nhiGET",  # bare LF, and a body: framing
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nhi!",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5zz\r\nhello\r\n0\r\n\r\n",
])
def test_a_disagreement_outside_the_declared_ones_is_a_finding(
        data: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """Declared differences are narrow: a parser made lenient in a way no entry declares
    (here ours, taking a bare LF, any Content-Length line, junk after a chunk size) is
    reported."""
    lenient_chunk_line = re.compile(rb"([0-9A-Fa-f]{1,16}).*")
    monkeypatch.setattr(http1, "CHUNK_LINE", lenient_chunk_line)

    def lenient_ours(data: bytes) -> differential.Reading:
        data = re.sub(rb"(?<!\r)\n", b"\r\n", data)  # bare LF taken as a line end
        data = re.sub(rb"Content-Length: 3\r\n", b"", data)  # the first Content-Length wins
        return read_ours(data)

    monkeypatch.setattr(differential, "read_ours", lenient_ours)
    assert classify(data + NEXT)[2]


def test_the_fuzzer_finds_a_planted_chunk_size_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    """The generated requests reach a bug of the kind that smuggles requests (Apache Traffic
    Server #10580: bytes after the chunk size ignored): the property above would fail."""
    monkeypatch.setattr(http1, "CHUNK_LINE", re.compile(rb"([0-9A-Fa-f]{1,16})[^\r\n]*"))
    found = find(REQUESTS, lambda data: bool(classify(data)[2]),
                 settings=settings(max_examples=3000, deadline=None, database=None,
                                   derandomize=True, phases=[Phase.generate]))
    assert classify(found)[2]


def test_toy_h11_checks_the_host_of_a_chunked_request() -> None:
    """Found by this fuzzer: ``h11_checks.request_status`` returned after the
    Transfer-Encoding check, so toy-h11 served a chunked request whose Host was invalid (RFC
    9112 §3.2: a server "MUST respond with a 400 ... to any request message that contains
    ... a Host header field with an invalid field value"); ours and llhttp's checks refuse it."""
    data = b"POST / HTTP/1.1\r\nHost: exa mple.com\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    assert read_ours(data).verdict == READERS["h11"](data).verdict == "refused"
    assert READERS["llhttp"](data).verdict == "refused"
