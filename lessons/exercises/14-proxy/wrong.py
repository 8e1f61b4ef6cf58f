"""Exercise 14, a plausible wrong answer: the left-most address is the client.

``X-Forwarded-For`` lists the chain client first, so its first entry reads as the obvious
answer, and it is right whenever nobody lies. But the first entry is whatever the client
wrote: nginx appends to the header that came (``$proxy_add_x_forwarded_for``), so a client
that sends ``X-Forwarded-For: 6.6.6.6`` is 6.6.6.6 to this server, whatever its real address.
Only the entries your own proxies added can be believed, and they are on the right.
``EXERCISE_IMPL=wrong make exercise N=14`` shows what a student who wrote it reads;
``tests/test_exercises.py`` checks that it fails with this hint:

Fails: test_a_spoofed_header_does_not_make_the_client[run-it]: AssertionError: the client wrote
"""

from __future__ import annotations

import ipaddress


def is_trusted(address: str, trusted: list[str]) -> bool:
    """Whether ``address`` (an IP, or anything else: never trusted) is in one of the
    ``trusted`` IPs or networks."""
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError:
        return False
    return any(ip in ipaddress.ip_network(network, strict=False) for network in trusted)


# --8<-- [start:exercise]
def client_address(peer: str, forwarded_for: str | None, trusted: list[str]) -> str:
    """The client's address: ``peer`` (the socket's) unless it is trusted, else the
    right-most untrusted entry of ``forwarded_for`` (``X-Forwarded-For``'s value, entries
    separated by commas), else its left-most; ``peer`` when there is no header."""
    if forwarded_for is None or not is_trusted(peer, trusted):
        return peer
    return forwarded_for.split(",")[0].strip()  # "the first address is the client"
# --8<-- [end:exercise]


if __name__ == "__main__":
    trusted = ["127.0.0.1"]
    for peer, header in [("127.0.0.1", "6.6.6.6, 127.0.0.2"), ("127.0.0.2", "6.6.6.6"),
                         ("127.0.0.1", "6.6.6.6, 127.0.0.1")]:
        print(f"peer {peer}, X-Forwarded-For: {header} -> "
              f"{client_address(peer, header, trusted)}")
