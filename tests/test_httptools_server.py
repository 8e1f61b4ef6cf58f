"""toy-httptools (toyservers/httptools_server.py): what is its own.

The behaviour it shares with the other toy servers is tested once for all three in
test_protocols.py (protocol level) and test_toy_servers_e2e.py (end to end). Here, on the
shared protocol harness: what llhttp decides on its own.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.echo_app import app as echo_app
from tests.support.protocol_harness import Harness, statuses


@pytest.fixture
def toy_server() -> str:
    return "toy-httptools"


# --- the protocol on the shared harness ----------------------------------------------------------


def test_llhttp_refuses_a_method_it_does_not_know_with_501(connect: Callable[..., Harness]
                                                           ) -> None:
    """llhttp parses a fixed list of methods; any other token is refused (RFC 9110 §9.1: 501
    for a method the server does not recognise). toy-raw and toy-h11 hand it to the app."""
    h = connect(echo_app)
    out = h.feed(b"BREW / HTTP/1.1\r\nHost: t\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n")
    assert statuses(out) == [501] and b"connection: close" in out and h.closed
