"""Behind a reverse proxy: who the client was, and over which scheme and host it came.

A proxy in front of the server (nginx, HAProxy, a cloud load balancer) opens its own
connection to us, so the socket's peer is the proxy, and a TLS connection it terminated
arrives as plain HTTP. It says what it saw in request headers: the de facto
``X-Forwarded-For``/``-Proto``/``-Host``/``-Port`` or the standard ``Forwarded`` (RFC 7239).
Anyone can send those headers, so they are believed only from a peer in the trusted set
(``--forwarded-allow-ips``: IPs and CIDRs, or ``*``; default ``127.0.0.1``, from
``FORWARDED_ALLOW_IPS`` when set), as uvicorn does.

The rules, each with its test (tests/test_proxy.py):

- The client is the right-most address in the chain that is not trusted: each proxy appends
  the address it saw, so walking from the right skips our own proxies and stops at the first
  hop we did not run; when every hop is trusted, the left-most. Its port is the one given
  (``[2001:db8::1]:4711``), else 0.
- With ``Forwarded``, the scheme (``proto=``) and host (``host=``) come from the same element
  as that client: they describe the connection that client made. Obfuscated (``_hidden``) and
  ``unknown`` nodes are kept as the client's name, as the proxy wrote them: they are not
  addresses, so they are never trusted and stop the walk.
- With ``X-Forwarded-*``, the right-most value of ``-Proto``, ``-Host`` and ``-Port`` (the one
  our nearest proxy set). ``Forwarded`` wins when both are present and it parses.
- A scheme is taken only if it is ``http`` or ``https`` (``ws``/``wss`` for a WebSocket); a
  port only if it is a number from 1 to 65535; a malformed ``Forwarded`` is ignored whole.
  Nothing here raises on bad input: an untrusted peer, or a header we cannot read, changes
  nothing.

Sans-IO: it reads header values and returns what to change; :func:`toyservers.asgi.http_scope`
and :func:`toyservers.wsgi.build_environ` apply it (``scope["client"]``, ``scope["scheme"]``,
the ``host`` header and ``scope["server"]``; ``REMOTE_ADDR``, ``wsgi.url_scheme``,
``HTTP_HOST``, ``SERVER_PORT``).

Compare with: uvicorn/middleware/proxy_headers.py (X-Forwarded-For and -Proto only),
hypercorn/middleware/proxy_fix.py, werkzeug's ProxyFix.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import MutableMapping
from typing import Any, NamedTuple

#: The variable uvicorn reads for ``--forwarded-allow-ips``'s default.
ENV = "FORWARDED_ALLOW_IPS"
DEFAULT_TRUSTED = "127.0.0.1"
NAMES = frozenset({b"forwarded", b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host",
                   b"x-forwarded-port"})
SCHEMES = {"http": "http", "https": "https", "ws": "http", "wss": "https"}
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
# RFC 7239 §4: forwarded-pair = token "=" value; value = token / quoted-string (RFC 9110 §5.6)
TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
PAIR = re.compile(rf'\s*({TOKEN})=({TOKEN}|"(?:[^"\\]|\\.)*")\s*')
# RFC 7239 §6.3: an obfuscated node name; "unknown" is the other name that is not an address
OBFUSCATED = re.compile(r"_[A-Za-z0-9._-]+")
# RFC 9110 §7.2: Host = uri-host [ ":" port ] (RFC 3986 reg-name, IPv4 or [IPv6])
HOST = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=%-]+(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?")
Address = tuple[str, int]


class Trusted:
    """The peers whose forwarding headers are believed: ``"127.0.0.1, 10.0.0.0/8"``, or ``"*"``.

    An entry that is neither an IP nor a network is kept as a literal name (a peer whose
    address is not an IP).
    """

    def __init__(self, spec: str) -> None:
        items = [item.strip() for item in spec.split(",") if item.strip()]
        self.everyone = "*" in items
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        self.literals: set[str] = set()
        for item in items:
            try:
                self.networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                self.literals.add(item)
    def __contains__(self, host: str | None) -> bool:
        if self.everyone:
            return True
        if not host:
            return False
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return host in self.literals
        return any(ip in network for network in self.networks)


def trusted_peers(spec: str | None) -> Trusted:
    """The trusted set ``--forwarded-allow-ips`` names; None: ``FORWARDED_ALLOW_IPS`` when
    set, else :data:`DEFAULT_TRUSTED` (uvicorn's rule)."""
    return Trusted(spec if spec is not None else os.environ.get(ENV, DEFAULT_TRUSTED))


class Forwarded(NamedTuple):
    """What the trusted headers change: the client, scheme, host and port the client used
    (None: unchanged)."""

    client: Address | None
    scheme: str | None
    host: str | None
    port: int | None


def node(text: str) -> Address | None:
    """A node (RFC 7239 §6) or an ``X-Forwarded-For`` entry as ``(host, port)``: ``1.2.3.4``,
    ``1.2.3.4:80``, ``[::1]:80``, ``::1``, ``_hidden``, ``unknown`` (port 0 when absent);
    None when it is none of those (a malformed entry)."""
    text = text.strip()
    host, port = text, "0"
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else "0" if not rest else "x"
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    if not port.isdigit() or int(port) > 65535:
        return None
    if host == "unknown" or OBFUSCATED.fullmatch(host):
        return host, int(port)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return None
    return host, int(port)


def port_of(text: str | None) -> int | None:
    """``text`` as a TCP port (1-65535), else None."""
    if text is None or not text.strip().isdigit():
        return None
    port = int(text)
    return port if 0 < port < 65536 else None


def parse_forwarded(values: list[str]) -> list[dict[str, str]] | None:
    """The elements of ``Forwarded`` header values, left to right, each ``{name: value}``
    with names lower-cased and quoted values unquoted; None when any part is malformed."""
    elements = []
    for value in values:
        for element in split_outside_quotes(value, ","):
            pairs: dict[str, str] = {}
            for pair in split_outside_quotes(element, ";"):
                if not pair.strip():
                    continue
                match = PAIR.fullmatch(pair)
                if match is None:
                    return None
                name, raw = match.group(1).lower(), match.group(2)
                if raw.startswith('"'):
                    raw = re.sub(r"\\(.)", r"\1", raw[1:-1])
                pairs[name] = raw
            elements.append(pairs)
    return elements


def split_outside_quotes(text: str, separator: str) -> list[str]:
    """``text`` split at ``separator``, except inside a quoted-string."""
    parts, start, quoted, escaped = [], 0, False, False
    for index, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return parts


class ProxyHeaders:
    """The proxy-header rules of one server (module docstring), for its trusted set
    (a :class:`Trusted`, or the ``--forwarded-allow-ips`` text to build one from).

    ``resolve(peer, headers)`` is called once per request with the socket's peer and the
    request's header fields; it returns None when nothing changes.
    """

    def __init__(self, trusted: Trusted | str | None = None) -> None:
        self.trusted = trusted if isinstance(trusted, Trusted) else trusted_peers(trusted)
        self.peers: dict[str, bool] = {}  # peer address -> trusted, asked once per address

    def resolve(self, peer: Address | None, headers: list[tuple[bytes, bytes]]
                ) -> Forwarded | None:
        """What the forwarding headers in ``headers`` (lower-case names) change, when
        ``peer`` is trusted; None otherwise or when they change nothing.

        This runs for every request (uvicorn's middleware does too): with a plain dict for
        the peer's trust and a set of header names it costs toy-httptools 2.6k instructions
        per request when there is nothing to do (112.3k against 109.7k with
        ``--no-proxy-headers``, under callgrind); an ``lru_cache`` and a ``startswith`` per
        header cost 6.5k."""
        if peer is None:
            return None
        trusted = self.peers.get(peer[0])
        if trusted is None:
            if len(self.peers) > 4096:  # a bound, against many peers
                self.peers.clear()
            trusted = self.peers[peer[0]] = peer[0] in self.trusted
        if not trusted:
            return None
        found: dict[bytes, list[str]] | None = None
        for name, value in headers:
            if name in NAMES:
                found = found if found is not None else {}
                found.setdefault(name, []).append(value.decode("latin-1"))
        if found is None:
            return None
        if b"forwarded" in found:
            elements = parse_forwarded(found[b"forwarded"])
            forwarded = self.from_forwarded(elements) if elements else None
            if forwarded is not None:
                return forwarded
        return self.from_x_forwarded(found)

    # --8<-- [start:client_of]
    def client_of(self, nodes: list[Address]) -> int:
        """Which of ``nodes`` (left to right) is the client: the right-most untrusted one, or
        the left-most when all are trusted."""
        for index in range(len(nodes) - 1, -1, -1):
            if nodes[index][0] not in self.trusted:
                return index
        return 0
    # --8<-- [end:client_of]

    def from_forwarded(self, elements: list[dict[str, str]]) -> Forwarded | None:
        """The client's element of RFC 7239 ``Forwarded`` and what it says; None when a
        ``for=`` is malformed."""
        nodes = [node(e.get("for", "unknown")) for e in elements]
        if None in nodes:
            return None
        index = self.client_of([n for n in nodes if n is not None])
        element = elements[index]
        host = valid_host(element.get("host"))
        return Forwarded(nodes[index] if "for" in element else None,
                         SCHEMES.get(element.get("proto", "").lower()), host, None)

    def from_x_forwarded(self, found: dict[bytes, list[str]]) -> Forwarded | None:
        """What ``X-Forwarded-For``/``-Proto``/``-Host``/``-Port`` say (module docstring);
        None when the chain holds a malformed entry and nothing else is said."""
        def last(name: bytes) -> str | None:
            values = [v.strip() for value in found.get(name, []) for v in value.split(",")]
            return values[-1] if values and values[-1] else None

        entries = [v for value in found.get(b"x-forwarded-for", []) for v in value.split(",")]
        nodes = [node(entry) for entry in entries if entry.strip()]
        client = None
        if nodes and None not in nodes:
            chain = [n for n in nodes if n is not None]
            client = chain[self.client_of(chain)]
        forwarded = Forwarded(client, SCHEMES.get((last(b"x-forwarded-proto") or "").lower()),
                              valid_host(last(b"x-forwarded-host")),
                              port_of(last(b"x-forwarded-port")))
        return forwarded if forwarded != (None, None, None, None) else None


def valid_host(text: str | None) -> str | None:
    """``text`` when it is a valid ``Host`` value (RFC 9110 §7.2), else None."""
    return text if text and HOST.fullmatch(text) else None


def host_port(host: str) -> tuple[str, int | None]:
    """A ``Host`` value split into its name and port (None when absent)."""
    if host.startswith("["):
        name, _, rest = host.partition("]")
        return name + "]", port_of(rest[1:]) if rest.startswith(":") else None
    name, _, port = host.partition(":")
    return name, port_of(port) if port else None


def apply_to_scope(scope: MutableMapping[str, Any], headers: list[tuple[bytes, bytes]],
                   forwarded: Forwarded) -> None:
    """Change an ASGI ``scope`` as ``forwarded`` says: ``client``, ``scheme`` (``ws``/``wss``
    for a WebSocket), the ``host`` header in ``headers`` (the scope's list, replaced by a new
    one) and ``server`` (the scheme's default port when the host names none)."""
    if forwarded.client is not None:
        scope["client"] = forwarded.client
    if forwarded.scheme is not None:
        scope["scheme"] = scheme_for(str(scope["type"]), forwarded.scheme)
    host = new_host(headers, forwarded)
    if host is not None:
        scope["headers"] = [(n, v) for n, v in headers if n != b"host"] + [(b"host",
                                                                            host.encode())]
        name, port = host_port(host)
        scope["server"] = (name, port or DEFAULT_PORTS[str(scope["scheme"])])


def apply_to_environ(environ: MutableMapping[str, Any], headers: list[tuple[bytes, bytes]],
                     forwarded: Forwarded) -> None:
    """Change a WSGI ``environ`` as ``forwarded`` says: ``REMOTE_ADDR``/``REMOTE_PORT``,
    ``wsgi.url_scheme``, ``HTTP_HOST``, ``SERVER_NAME`` and ``SERVER_PORT`` (PEP 3333's URL
    reconstruction reads them in that order)."""
    if forwarded.client is not None:
        environ["REMOTE_ADDR"], environ["REMOTE_PORT"] = forwarded.client[0], str(
            forwarded.client[1])
    if forwarded.scheme is not None:
        environ["wsgi.url_scheme"] = forwarded.scheme
    host = new_host(headers, forwarded)
    if host is not None:
        name, port = host_port(host)
        environ["HTTP_HOST"], environ["SERVER_NAME"] = host, name
        environ["SERVER_PORT"] = str(port or DEFAULT_PORTS[environ["wsgi.url_scheme"]])


def new_host(headers: list[tuple[bytes, bytes]], forwarded: Forwarded) -> str | None:
    """The ``Host`` the client used, from ``forwarded``'s host and port and the request's
    own ``host`` header; None when neither says anything new."""
    if forwarded.host is None and forwarded.port is None:
        return None
    host = forwarded.host or next((v.decode("latin-1") for n, v in headers if n == b"host"), "")
    if forwarded.port is not None and host:
        host = f"{host_port(host)[0]}:{forwarded.port}"
    return host or None


def scheme_for(scope_type: str, scheme: str) -> str:
    """The ASGI scheme of a ``scope_type`` scope reached over ``scheme`` (http/https):
    ``ws``/``wss`` for a WebSocket."""
    return scheme.replace("http", "ws") if scope_type == "websocket" else scheme
