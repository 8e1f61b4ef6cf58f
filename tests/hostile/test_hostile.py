"""Hostile and broken input against every server, over raw sockets (issue 3).

``test_corpus`` sends each case of ``corpus.CASES`` on a fresh connection (plus a pipelined
``GET /next``) and checks the status, the ``Connection: close``, the close itself, and that
nothing smuggled behind a bad request is answered. The slow-client tests check the header and
body deadlines, the keep-alive idle close, and that a stalled client blocks nobody; the fuzz
test throws random and mutated bytes and checks the server survives.

Select one server with ``pytest tests/hostile -k toy-h11``; run it all against a server of
your own with ``--own-server 'COMMAND {port}'`` (``tests/support/own_server.py``: every test,
but an accepted case's body is not read as the echo app's JSON). Known differences (uvicorn's,
gunicorn's, and a toy server's gaps) are ``xfail(strict=True)`` from
``corpus.KNOWN_DIFFERENCES``, keyed by case name or, for the other tests, by test function name
(conftest.py applies the marks).
"""

from __future__ import annotations

import random
import time

import pytest

from tests.hostile import corpus
from tests.hostile.conftest import SERVERS
from tests.hostile.corpus import CASES, KNOWN_DIFFERENCES, NEXT, Case
from tests.hostile.wire import (
    Exchange,
    connect,
    exchange,
    read_until_close,
    send_all,
    split_responses,
    still_silent,
)
from tests.support.own_server import OWN
from tests.support.running import RunningServer

# A correct server answers every corpus case at once; one waiting for bytes that never come
# hits its own 1-second deadline well before this.
EXCHANGE_TIMEOUT = 3.0
# Slack on top of a server deadline before we call it a hang, seconds.
SLACK = 1.5


def _context(server: RunningServer, result: Exchange) -> str:
    return f"{server.name}: {result.describe()}\n--- server log ---\n{server.log_tail()}"


def assert_rejected(server: RunningServer, result: Exchange, expect: tuple[int, ...]) -> None:
    """One error response with a status in ``expect`` and ``Connection: close``, then a close."""
    where = _context(server, result)
    assert result.responses, f"no complete response\n{where}"
    first = result.responses[0]
    assert first.status in expect, f"status {first.status}, expected {expect}\n{where}"
    assert first.closes(), f"error response lacks 'Connection: close'\n{where}"
    assert len(result.responses) == 1 and not result.rest, (
        f"bytes after the error response: a request behind it was read\n{where}")
    assert result.closed, f"connection left open after the error\n{where}"


# --- the corpus --------------------------------------------------------------------------------


def test_corpus_is_well_formed() -> None:
    names = [case.name for case in CASES]
    assert len(names) == len(set(names)), "duplicate case names"
    assert len(CASES) >= 40
    assert all(name.startswith(("te_", "cl_", "chunk_", "line_", "field_", "host_", "limit_",
                                "ok_")) for name in names)
    assert all(not any(server in name for server in SERVERS) for name in names)
    tests = {name for name in globals() if name.startswith("test_")}
    for server, differences in KNOWN_DIFFERENCES.items():
        assert set(differences) <= set(names) | tests, f"{server}: an unknown case is listed"
    for case in CASES:
        assert case.source and case.why
        assert case.rejected == (case.name.startswith(("te_", "cl_", "chunk_", "line_",
                                                      "field_", "host_", "limit_")))


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_corpus(server: RunningServer, case: Case) -> None:
    result = exchange(server.address, case.raw + NEXT, EXCHANGE_TIMEOUT)
    assert server.alive(), f"{server.name} died\n{server.log_tail()}"
    if case.rejected:
        assert_rejected(server, result, case.expect)
        return
    where = _context(server, result)
    statuses = [r.status for r in result.responses]
    wanted = [200, 200] if case.then == "next" else [200]
    assert statuses == wanted, f"statuses {statuses}, expected {wanted}\n{where}"
    assert not result.rest, f"unparsed bytes after the responses\n{where}"
    assert result.closed, f"connection not closed after the last response\n{where}"
    if server.name == OWN:  # its app is not the echo app: the statuses are all we can read
        return
    echo = result.responses[0].json()
    for key, value in case.echo:
        if key == "header":
            assert isinstance(value, tuple)
            assert list(value) in echo["headers"], f"header {value} not in {echo['headers']}"
        else:
            assert echo[key] == value, f"{key}: {echo[key]!r}, expected {value!r}"
    if case.then == "next":
        assert result.responses[1].json()["path"] == "/next"


# --- slow clients --------------------------------------------------------------------------------

HALF_HEADERS = b"GET / HTTP/1.1\r\nHost: example.com\r\nX-Half: "


def test_stalled_headers_get_408_and_close(server: RunningServer) -> None:
    with connect(server.address, timeout=5.0) as sock:
        send_all(sock, HALF_HEADERS)
        result = read_until_close(sock, time.monotonic() + corpus.TIMEOUT_HEADERS + SLACK)
    assert_rejected(server, result, (408,))


def test_trickled_headers_hit_the_whole_block_deadline(server: RunningServer) -> None:
    """Slowloris: one byte at a time keeps the connection busy but must not reset the deadline."""
    block = HALF_HEADERS + b"v" * 200 + b"\r\n\r\n"
    deadline = time.monotonic() + corpus.TIMEOUT_HEADERS + SLACK
    received = b""
    with connect(server.address, timeout=5.0) as sock:
        for i in range(len(block)):
            send_all(sock, block[i:i + 1])
            # Pace the trickle by waiting for an answer: at most 0.1 s per byte, so the block
            # would take about 20 s to complete; the server's 1 s deadline must cut it first.
            step = read_until_close(sock, min(deadline, time.monotonic() + 0.1))
            received += step.data
            if step.data or step.closed or time.monotonic() >= deadline:
                break
        if not step.closed:
            step = read_until_close(sock, deadline)
            received += step.data
    responses, rest = split_responses(received)
    assert_rejected(server, Exchange(received, step.closed, step.reset, responses, rest),
                    (408,))


def test_stalled_body_gets_408_and_close(server: RunningServer) -> None:
    with connect(server.address, timeout=5.0) as sock:
        send_all(sock, corpus.POST + b"Content-Length: 10\r\n\r\nabc")
        result = read_until_close(sock, time.monotonic() + corpus.TIMEOUT_BODY + SLACK)
    assert_rejected(server, result, (408,))


def test_idle_keep_alive_connection_closes_silently(server: RunningServer) -> None:
    with connect(server.address, timeout=5.0) as sock:
        send_all(sock, corpus.GET + b"\r\n")
        first = read_until_close(sock, time.monotonic() + EXCHANGE_TIMEOUT, stop_after=1)
        assert [r.status for r in first.responses] == [200], first.describe()
        assert not first.closed, "closed right after the response: keep-alive expected"
        idle = read_until_close(sock, time.monotonic() + corpus.TIMEOUT_KEEP_ALIVE + SLACK)
    assert idle.closed, f"idle connection not closed\n{idle.describe()}"
    assert idle.data == b"", f"bytes sent on an idle close (must be silent): {idle.data!r}"


def test_stalled_clients_do_not_block_others(server: RunningServer) -> None:
    stalled = [connect(server.address, timeout=5.0) for _ in range(3)]
    try:
        send_all(stalled[0], HALF_HEADERS)
        send_all(stalled[1], corpus.POST + b"Content-Length: 10\r\n\r\nabc")
        send_all(stalled[2], b"G")
        result = exchange(server.address, corpus.GET + b"Connection: close\r\n\r\n",
                          EXCHANGE_TIMEOUT)
        # Ordering, not speed: the other client was served while all three were still waiting.
        silent = [still_silent(sock) for sock in stalled]
    finally:
        for sock in stalled:
            sock.close()
    assert [r.status for r in result.responses] == [200], result.describe()
    assert all(silent), f"a stalled client was answered before the others were served: {silent}"


# --- fuzz ----------------------------------------------------------------------------------------

VALID_HEAD = b"GET /fuzz?x=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nX-Y: z\r\n\r\n"


def fuzz_payloads(seed: int, count: int) -> list[bytes]:
    """``count`` payloads: random bytes ending the header block, and mutated valid heads.

    Every payload ends with an empty line (then ``NEXT`` for the mutated ones), so no server
    has a reason to wait for more bytes: each must answer or close at once.
    """
    rng = random.Random(seed)
    payloads = []
    for i in range(count):
        if i % 2 == 0:
            payloads.append(rng.randbytes(rng.randint(1, 300)) + b"\r\n\r\n")
            continue
        head = bytearray(VALID_HEAD[:-4])
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(head))
            action = rng.choice(("flip", "insert", "delete"))
            if action == "flip":
                head[at] = rng.randrange(256)
            elif action == "insert":
                head.insert(at, rng.randrange(256))
            else:
                del head[at]
        payloads.append(bytes(head) + b"\r\n\r\n" + NEXT)
    return payloads


def test_random_and_mutated_bytes_never_hang_or_kill_the_server(server: RunningServer) -> None:
    for payload in fuzz_payloads(seed=20240603, count=30):
        result = exchange(server.address, payload, EXCHANGE_TIMEOUT)
        where = f"payload {payload!r}\n{_context(server, result)}"
        assert result.closed, f"connection neither answered nor closed\n{where}"
        assert all(r.status == 200 or 400 <= r.status < 600 for r in result.responses), where
        assert server.alive(), where
    result = exchange(server.address, corpus.GET + b"Connection: close\r\n\r\n",
                      EXCHANGE_TIMEOUT)
    assert [r.status for r in result.responses] == [200], result.describe()
