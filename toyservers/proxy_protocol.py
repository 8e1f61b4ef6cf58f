"""The PROXY protocol (HAProxy's ``send-proxy``): a load balancer that forwards TCP, not HTTP,
says who the client was in a header before the first byte of the client's own.

Specification: "The PROXY protocol, versions 1 & 2" (haproxy.org, doc/proxy-protocol.txt).

- **Version 1** is one text line of at most 107 bytes::

      PROXY TCP4 203.0.113.9 192.0.2.1 56324 443\\r\\n
      PROXY TCP6 2001:db8::9 2001:db8::1 56324 443\\r\\n
      PROXY UNKNOWN\\r\\n                       (the proxy does not know: keep the socket's)

- **Version 2** is binary: a 12-byte signature (``\\r\\n\\r\\n\\x00\\r\\nQUIT\\n``), a byte
  holding the version (2) and the command (``LOCAL`` 0: a health check of the proxy's own,
  keep the socket's address; ``PROXY`` 1), a byte holding the address family and transport,
  a 2-byte length, then the addresses (IPv4: 4 + 4 + 2 + 2 bytes; IPv6: 16 + 16 + 2 + 2;
  UNIX: 108 + 108) and optional TLVs, which are skipped.

:func:`parse` reads one header from the start of a connection's bytes, and :func:`take` holds
the servers' one policy (``--proxy-protocol``, gunicorn's name), which every server's reader
applies the same way (``toyservers._server.ProxyProtocolReader`` on asyncio,
``toyservers.anyio_serving.proxy_header`` on anyio, ``toyservers.blocking_serving.proxy_header``
on threads): a connection whose first bytes start a header is believed only from a trusted
peer (``--forwarded-allow-ips``) and closed otherwise; a header that does not parse closes the
connection; a connection that starts with anything else is HTTP from the peer itself.
Sans-IO: bytes in, a :class:`ProxyHeader` out.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

V1_PREFIX = b"PROXY "
V1_MAX = 107  # bytes, the CRLF included
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V2_MAX_LENGTH = 2048  # bytes of addresses and TLVs we accept (HAProxy sends far fewer)
V2_FAMILIES = {0x11: (4, "!4s4sHH"), 0x21: (16, "!16s16sHH")}  # TCP over IPv4, over IPv6
Address = tuple[str, int]


class ProxyHeaderError(ValueError):
    """The bytes start a PROXY header that is malformed: close the connection."""


@dataclass(frozen=True)
class ProxyHeader:
    """One parsed header.

    Attributes:
        version: 1 or 2 (0: :data:`NO_HEADER`).
        source, destination: the client's and the proxy's ``(host, port)``; None when the
            header does not say (``UNKNOWN``, ``LOCAL``, a UNIX or unspecified family): the
            socket's own addresses stand.
        length: the header's size in bytes; the client's bytes start after it.
    """

    version: int
    source: Address | None
    destination: Address | None
    length: int


def starts_header(data: bytes | bytearray) -> bool | None:
    """Whether ``data`` (a connection's first bytes) starts a PROXY header: True, False, or
    None while too few bytes have come to tell (a v2 signature starts with CRLF, which may
    also begin an HTTP request, RFC 9112 §2.2)."""
    for prefix in (V1_PREFIX, V2_SIGNATURE):
        shared = min(len(data), len(prefix))
        if data[:shared] == prefix[:shared]:
            return True if len(data) >= len(prefix) else None
    return False


#: What :func:`take` gives for a connection that starts with anything but a PROXY header.
NO_HEADER = ProxyHeader(0, None, None, 0)


def take(data: bytes | bytearray, trusted: bool) -> ProxyHeader | None:
    """The header a connection's first bytes ``data`` start with, from a peer that is
    ``trusted`` or not: :data:`NO_HEADER` when they start with anything else (HTTP from the
    peer itself); None while more bytes are needed to tell or to parse.

    Raises:
        ProxyHeaderError: a header from a peer that is not trusted, or a malformed one:
            close the connection.
    """
    starts = starts_header(data)
    if not starts:
        return None if starts is None else NO_HEADER
    if not trusted:
        raise ProxyHeaderError("a PROXY header from a peer that is not trusted")
    return parse(bytes(data))


def parse(data: bytes) -> ProxyHeader | None:
    """The header at the start of ``data``; None while more bytes are needed.

    Raises:
        ProxyHeaderError: the header is malformed, too long, or not a PROXY header.
    """
    if data.startswith(V2_SIGNATURE):
        return parse_v2(data)
    if data.startswith(V1_PREFIX):
        return parse_v1(data)
    raise ProxyHeaderError("not a PROXY protocol header")


def parse_v1(data: bytes) -> ProxyHeader | None:
    """A version 1 line (module docstring); None until its CRLF has come."""
    end = data.find(b"\r\n", 0, V1_MAX)
    if end < 0:
        if len(data) >= V1_MAX:
            raise ProxyHeaderError(f"a v1 header longer than {V1_MAX} bytes")
        return None
    fields = data[:end].decode("ascii", "replace").split(" ")
    if fields[1:2] == ["UNKNOWN"]:
        return ProxyHeader(1, None, None, end + 2)
    if len(fields) != 6 or fields[1] not in ("TCP4", "TCP6"):
        raise ProxyHeaderError("a v1 header is PROXY TCP4|TCP6 src dst sport dport")
    version = 4 if fields[1] == "TCP4" else 6
    source = v1_address(fields[2], fields[4], version)
    destination = v1_address(fields[3], fields[5], version)
    return ProxyHeader(1, source, destination, end + 2)


def v1_address(host: str, port: str, version: int) -> Address:
    """``(host, port)`` of one v1 address of IP ``version``, checked."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise ProxyHeaderError(f"{host!r} is not an IP address") from None
    if ip.version != version:
        raise ProxyHeaderError(f"{host} is not an IPv{version} address")
    if not port.isdigit() or (len(port) > 1 and port[0] == "0") or int(port) > 65535:
        raise ProxyHeaderError(f"{port!r} is not a port")
    return str(ip), int(port)


def parse_v2(data: bytes) -> ProxyHeader | None:
    """A version 2 header (module docstring); None until all its bytes have come."""
    if len(data) < 16:
        return None
    version_command, family, length = struct.unpack("!BBH", data[12:16])
    if version_command >> 4 != 2:
        raise ProxyHeaderError(f"version {version_command >> 4} is not 2")
    command = version_command & 0x0F
    if command > 1:
        raise ProxyHeaderError(f"unknown command {command}")
    if length > V2_MAX_LENGTH:
        raise ProxyHeaderError(f"{length} bytes of addresses: more than {V2_MAX_LENGTH}")
    if len(data) < 16 + length:
        return None
    known = V2_FAMILIES.get(family)
    if command == 0 or known is None:  # LOCAL, or a family without an IP (UNIX, UNSPEC)
        return ProxyHeader(2, None, None, 16 + length)
    size, layout = known
    if length < 2 * size + 4:
        raise ProxyHeaderError(f"{length} bytes cannot hold two IPv{size // 4} addresses")
    src, dst, sport, dport = struct.unpack(layout, data[16:16 + 2 * size + 4])
    return ProxyHeader(2, (str(ipaddress.ip_address(src)), sport),
                       (str(ipaddress.ip_address(dst)), dport), 16 + length)
