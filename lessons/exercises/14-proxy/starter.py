"""Exercise 14, starter: who is the client, behind a chain of proxies?

A server behind proxies sees the last proxy's address on its socket (the *peer*); each proxy
appends the address it saw to ``X-Forwarded-For``, so the header holds the chain, client
first: ``X-Forwarded-For: 203.0.113.9, 10.0.0.2``. But the client can send that header too,
with any address it likes in it, and a proxy like nginx appends to what came
(``$proxy_add_x_forwarded_for``). Only the entries your own proxies added can be believed.

YOUR TASK: write ``client_address`` below (look for "EXERCISE"): the peer itself unless it is
one of your proxies; otherwise walk ``X-Forwarded-For`` from the right, skipping your
proxies' addresses, and stop at the first address that is not one of them: that hop was
made by someone you do not run, so it is the client as far as you can know. When every
address is trusted, the left-most. ``trusted`` holds IPs and networks (``10.0.0.0/8``).
Check your work with ``make exercise N=14``; the checks include the spoofed headers of
lesson 14's Run it, and compare your answers with toyservers/proxy.py's.

Compare with: toyservers/proxy.py (``ProxyHeaders.client_of``), uvicorn's
``ProxyHeadersMiddleware``, werkzeug's ``ProxyFix`` (which counts hops instead).
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
    # EXERCISE: return peer when forwarded_for is None or the peer is not trusted
    # (is_trusted above). Otherwise split forwarded_for at the commas, strip each entry, and
    # walk the entries from the right: return the first that is not trusted; if all are,
    # return the left-most.
    raise NotImplementedError("exercise 14: write client_address() (the right-most "
                              "untrusted hop)")
# --8<-- [end:exercise]


if __name__ == "__main__":
    trusted = ["127.0.0.1"]
    for peer, header in [("127.0.0.1", "6.6.6.6, 127.0.0.2"), ("127.0.0.2", "6.6.6.6"),
                         ("127.0.0.1", "6.6.6.6, 127.0.0.1")]:
        print(f"peer {peer}, X-Forwarded-For: {header} -> "
              f"{client_address(peer, header, trusted)}")
