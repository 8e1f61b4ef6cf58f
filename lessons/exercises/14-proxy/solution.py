"""Exercise 14, reference solution: who is the client, behind a chain of proxies?

See ``starter.py`` for the task.
Run: ``.venv/bin/python lessons/exercises/14-proxy/solution.py``.
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
        return peer  # a header from someone we do not run says nothing
    hops = [hop.strip() for hop in forwarded_for.split(",") if hop.strip()]
    for hop in reversed(hops):
        if not is_trusted(hop, trusted):
            return hop  # the first hop our proxies did not make
    return hops[0] if hops else peer
# --8<-- [end:exercise]


if __name__ == "__main__":
    trusted = ["127.0.0.1"]
    for peer, header in [("127.0.0.1", "6.6.6.6, 127.0.0.2"), ("127.0.0.2", "6.6.6.6"),
                         ("127.0.0.1", "6.6.6.6, 127.0.0.1")]:
        print(f"peer {peer}, X-Forwarded-For: {header} -> "
              f"{client_address(peer, header, trusted)}")
