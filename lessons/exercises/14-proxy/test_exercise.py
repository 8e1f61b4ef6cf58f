"""Checks for exercise 14 (who is the client behind proxies). Run: ``make exercise N=14``.

Tests ``starter.py`` by default; ``EXERCISE_IMPL=solution`` tests the reference solution.
Every case is also answered by toyservers/proxy.py, the rule every toy server applies, so
the checks hold the exercise to the real code.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from toyservers.proxy import ProxyHeaders

IMPL = os.environ.get("EXERCISE_IMPL", "starter")
PATH = Path(__file__).with_name(f"{IMPL}.py")
spec = importlib.util.spec_from_file_location(f"exercise14_{IMPL}", PATH)
assert spec is not None and spec.loader is not None
exercise = importlib.util.module_from_spec(spec)
spec.loader.exec_module(exercise)

# (peer, X-Forwarded-For, trusted, the client)
CASES = [  # ids: what each case is
    ("127.0.0.1", "203.0.113.9", ["127.0.0.1"], "203.0.113.9"),
    ("127.0.0.1", "203.0.113.9, 10.0.0.2", ["127.0.0.1", "10.0.0.0/8"], "203.0.113.9"),
    ("127.0.0.1", "10.0.0.3, 10.0.0.2", ["127.0.0.1", "10.0.0.0/8"], "10.0.0.3"),
    ("198.51.100.7", "203.0.113.9", ["127.0.0.1"], "198.51.100.7"),
    ("127.0.0.1", None, ["127.0.0.1"], "127.0.0.1"),
]
SPOOFED = [
    # lesson 14's Run it: curl from 127.0.0.2 sends "6.6.6.6", nginx appends 127.0.0.2
    ("127.0.0.1", "6.6.6.6, 127.0.0.2", ["127.0.0.1"], "127.0.0.2"),
    ("127.0.0.1", "6.6.6.6,203.0.113.9", ["127.0.0.1"], "203.0.113.9"),
    ("127.0.0.1", "6.6.6.6, 1.2.3.4, 203.0.113.9, 10.0.0.2", ["127.0.0.1", "10.0.0.0/8"],
     "203.0.113.9"),
]


def toyservers_client(peer: str, header: str | None, trusted: list[str]) -> str:
    """What toyservers/proxy.py makes of the same request."""
    headers = [] if header is None else [(b"x-forwarded-for", header.encode())]
    forwarded = ProxyHeaders(",".join(trusted)).resolve((peer, 1234), headers)
    return forwarded.client[0] if forwarded and forwarded.client else peer


@pytest.mark.parametrize(("peer", "header", "trusted", "client"), CASES,
                         ids=["one-proxy", "two-proxies", "all-trusted", "untrusted-peer",
                              "no-header"])
def test_the_client_is_the_right_most_untrusted_hop(peer: str, header: str | None,
                                                    trusted: list[str], client: str) -> None:
    assert toyservers_client(peer, header, trusted) == client  # the rule itself
    got = exercise.client_address(peer, header, trusted)
    assert got == client, f"peer {peer}, X-Forwarded-For {header!r}: {got}, not {client}"


@pytest.mark.parametrize(("peer", "header", "trusted", "client"), SPOOFED,
                         ids=["run-it", "no-space", "long-chain"])
def test_a_spoofed_header_does_not_make_the_client(peer: str, header: str, trusted: list[str],
                                                   client: str) -> None:
    assert toyservers_client(peer, header, trusted) == client
    got = exercise.client_address(peer, header, trusted)
    assert got == client, (f"the client wrote {header.split(',')[0]!r} itself: the answer is "
                           f"the right-most hop your proxies did not make, {client}, not {got}")
