"""Slow clients: an idle keep-alive connection and a trickled header block must be cut.

Both are probed from background threads that start with the server (see conftest.py), so
these bounded waits overlap the rest of the suite; this module sorts last so that by the time
it runs the waits are mostly over. Servers' defaults differ (uvicorn: 5 s keep-alive; the toy
servers: 5 s keep-alive and 10 s for the header block): a server passes when it closes within
the bound.

Spec: RFC 9112 §9.3 and §9.5 (persistence, timeouts); issue 3 (slow clients).
"""

from __future__ import annotations

import pytest

from tests.conformance.conftest import (
    IDLE_BOUND,
    SLOW_HEADERS_BOUND,
    ConformanceServer,
    IdleResult,
    SlowHeadersResult,
)

feature = pytest.mark.feature


@feature("idle-timeout")
def test_idle_keep_alive_connection_is_closed(server: ConformanceServer) -> None:
    result: IdleResult = server.probes["idle"].result(IDLE_BOUND + 10.0)
    assert result.first_status == 200
    assert result.closed, f"idle connection still open after {IDLE_BOUND:g} s"


@feature("slow-headers")
def test_slow_header_block_is_cut_by_a_deadline(server: ConformanceServer) -> None:
    result: SlowHeadersResult = server.probes["slow-headers"].result(SLOW_HEADERS_BOUND + 10.0)
    assert result.closed, f"a header block trickled for {SLOW_HEADERS_BOUND:g} s was not cut"
    assert result.sent == b"" or result.sent.startswith(b"HTTP/1.1 408"), (
        f"unexpected answer to a slow header block: {result.sent[:60]!r}")
