"""The PROXY protocol (``toyservers.proxy_protocol``): both versions parsed byte by byte, then
``--proxy-protocol`` on every toy server (asyncio, anyio, and toy-wsgi's sync and gthread
workers): a trusted proxy's header names the client and the address it reached, an untrusted
one's or a malformed one closes the connection, none is plain HTTP.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

import pytest

from tests.support.running import HOST, running_server
from toyservers.proxy_protocol import (
    NO_HEADER,
    V2_SIGNATURE,
    ProxyHeader,
    ProxyHeaderError,
    parse,
    starts_header,
    take,
)
from toyservers.registry import SERVERS, get

V1 = b"PROXY TCP4 203.0.113.9 192.0.2.1 56324 443\r\n"


def v2(command: int = 1, family: int = 0x11, addresses: bytes | None = None,
       tlvs: bytes = b"") -> bytes:
    if addresses is None:
        addresses = struct.pack("!4s4sHH", socket.inet_aton("203.0.113.9"),
                                socket.inet_aton("192.0.2.1"), 56324, 443)
    body = addresses + tlvs
    return V2_SIGNATURE + bytes([0x20 | command, family]) + struct.pack("!H", len(body)) + body


def test_version_1_lines() -> None:
    assert parse(V1 + b"GET / HTTP/1.1\r\n") == ProxyHeader(
        1, ("203.0.113.9", 56324), ("192.0.2.1", 443), len(V1))
    six = b"PROXY TCP6 2001:db8::9 2001:db8::1 1 65535\r\n"
    assert parse(six) == ProxyHeader(1, ("2001:db8::9", 1), ("2001:db8::1", 65535), len(six))
    assert parse(b"PROXY UNKNOWN\r\n") == ProxyHeader(1, None, None, 15)
    assert parse(V1[:20]) is None  # not all here yet


@pytest.mark.parametrize("line", [
    b"PROXY TCP4 203.0.113.9 192.0.2.1 56324\r\n",  # a field missing
    b"PROXY TCP4 2001:db8::9 192.0.2.1 1 2\r\n",  # IPv6 said to be TCP4
    b"PROXY TCP4 203.0.113.9 192.0.2.1 056324 443\r\n",  # a leading zero
    b"PROXY TCP4 203.0.113.9 192.0.2.1 65536 443\r\n",
    b"PROXY UDP4 203.0.113.9 192.0.2.1 1 2\r\n",
    b"PROXY TCP4 203.0.113.9  192.0.2.1 1 2\r\n",  # two spaces
    b"PROXY " + b"9" * 120,  # no CRLF within 107 bytes
])
def test_version_1_refusals(line: bytes) -> None:
    with pytest.raises(ProxyHeaderError):
        parse(line)


def test_version_2_headers() -> None:
    header = v2(tlvs=b"\x04\x00\x01x")  # a TLV after the addresses is skipped
    assert parse(header + b"GET") == ProxyHeader(
        2, ("203.0.113.9", 56324), ("192.0.2.1", 443), len(header))
    six = v2(family=0x21, addresses=socket.inet_pton(socket.AF_INET6, "2001:db8::9")
             + socket.inet_pton(socket.AF_INET6, "2001:db8::1") + struct.pack("!HH", 7, 8))
    assert parse(six) == ProxyHeader(2, ("2001:db8::9", 7), ("2001:db8::1", 8), len(six))
    local = v2(command=0, family=0x00, addresses=b"")  # the proxy's own health check
    assert parse(local) == ProxyHeader(2, None, None, 16)
    assert parse(header[:15]) is None and parse(header[:-1]) is None


def test_version_2_refusals() -> None:
    with pytest.raises(ProxyHeaderError, match="version 1 is not 2"):
        parse(V2_SIGNATURE + b"\x11\x11\x00\x0c" + b"\0" * 12)
    with pytest.raises(ProxyHeaderError, match="unknown command"):
        parse(v2(command=2))
    with pytest.raises(ProxyHeaderError, match="cannot hold"):
        parse(v2(addresses=b"\0" * 8))
    with pytest.raises(ProxyHeaderError, match="more than"):
        parse(V2_SIGNATURE + b"\x21\x11\xff\xff")  # before 65 KB arrive


def test_telling_a_header_from_a_request() -> None:
    assert starts_header(b"PROXY TCP4") is True and starts_header(b"PRO") is None
    assert starts_header(b"POST / HTTP/1.1") is False and starts_header(b"GET") is False
    assert starts_header(b"\r\n\r\n\x00") is None  # RFC 9112 allows a CRLF before a request
    assert starts_header(b"\r\nGET / HTTP/1.1") is False
    assert starts_header(V2_SIGNATURE) is True


def test_take_is_the_one_policy_of_every_server() -> None:
    assert take(b"GET / HTTP/1.1\r\n", trusted=False) is NO_HEADER  # HTTP from the peer
    assert take(b"PROX", trusted=True) is None and take(b"\r\n", trusted=False) is None
    assert take(V1 + b"GET", trusted=True) == parse(V1)
    with pytest.raises(ProxyHeaderError, match="not trusted"):
        take(V1, trusted=False)
    with pytest.raises(ProxyHeaderError):
        take(b"PROXY TCP4 1.2.3.4 nope\r\n", trusted=True)


# --- through the servers -------------------------------------------------------------------

PROXYABLE = sorted(name for name, spec in SERVERS.items() if spec.kind == "toy"
                   and (spec.variant_of is None or name == "toy-wsgi-gthread"))
REQUEST = b"GET / HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n\r\n"


def exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection((HOST, port), timeout=10) as sock:
        sock.sendall(data)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


def refused(port: int, data: bytes) -> bool:
    """True when the server closes the connection without a byte of answer (a reset too:
    closing with the request unread makes the kernel send RST)."""
    try:
        return exchange(port, data) == b""
    except ConnectionResetError:
        return True


def seen(response: bytes) -> dict[str, Any]:
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), response[:300]
    data: dict[str, Any] = json.loads(body)
    return data


def serve(name: str, *flags: str) -> Any:
    app = "tests.support.proxy_app:" + ("wsgi_app" if get(name).interface == "wsgi" else "app")
    return running_server(name, lambda port: [*get(name).command(app, HOST, port),
                                              "--proxy-protocol", *flags])


@pytest.mark.parametrize("name", PROXYABLE)
def test_a_trusted_proxys_header_names_the_client(name: str) -> None:
    with serve(name) as server:
        proxied = seen(exchange(server.port, V1 + REQUEST))
        assert proxied["client"] == ["203.0.113.9", 56324]
        assert proxied["server"] == ["192.0.2.1", 443]  # the address the client reached
        # v2 sent in two pieces: the header split inside its addresses
        header = v2()
        with socket.create_connection((HOST, server.port), timeout=10) as sock:
            sock.sendall(header[:20])
            sock.sendall(header[20:] + REQUEST)
            out = b""
            while chunk := sock.recv(65536):
                out += chunk
        assert seen(out)["client"] == ["203.0.113.9", 56324]
        plain = seen(exchange(server.port, REQUEST))  # no header: HTTP from the peer itself
        assert plain["client"][0] == HOST
        assert refused(server.port, b"PROXY TCP4 1.2.3.4 nope\r\n" + REQUEST)


@pytest.mark.parametrize("name", PROXYABLE)
def test_an_untrusted_peer_cannot_say_who_it_is(name: str) -> None:
    with serve(name, "--forwarded-allow-ips", "10.9.9.9") as server:
        assert refused(server.port, V1 + REQUEST)  # closed, nothing answered
        assert seen(exchange(server.port, REQUEST))["client"][0] == HOST


def test_tls_says_it_is_not_supported(tmp_path: Any) -> None:
    import subprocess
    import sys
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    key.write_text(""), cert.write_text("")
    run = subprocess.run([sys.executable, "-m", "toyservers", "apps.asgi_user:app",
                          "--proxy-protocol", "--ssl-keyfile", str(key), "--ssl-certfile",
                          str(cert)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 2 and "comes before the TLS handshake" in run.stderr
