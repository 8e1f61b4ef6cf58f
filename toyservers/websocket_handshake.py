"""RFC 6455's opening handshake, server side, sans-IO: is an HTTP/1.1 request a WebSocket
handshake, a valid one, and what is the 101 that accepts it.

Every toy server on HTTP/1.1 checks a request asking ``Upgrade: websocket`` with this module
(``asgi_websocket.opening``), whichever engine then reads the frames (``websocket.py``'s or
wsproto's). Like ``http1_parser.py`` it takes values and gives values, and touches no socket:

- ``check_handshake``: is this HTTP/1.1 request an opening handshake (``Upgrade: websocket``),
  and a valid one (§4.2.1)? ``Handshake`` holds what it offers; ``HandshakeError`` carries
  the status to answer instead (toy-h2's extended CONNECT raises it too: RFC 8441);
- ``accept_key``: ``Sec-WebSocket-Accept``, the key and a GUID hashed with SHA-1, in base64;
- ``accept_response``: the bytes of the 101 (``websocket.Connection.accept`` sends them).

Deliberately left out: the client side (we never check ``Sec-WebSocket-Accept``), an
``Origin`` check (§10.2: a server may refuse origins it does not know; here the app can,
with ``websocket.close`` before accepting), and extensions other than permessage-deflate
(``websocket_deflate.py`` negotiates it).

Spec: RFC 6455 §1.3 (the GUID), §4.1-§4.2 (the handshake, client and server), §4.4 (the
version, 426); RFC 9110 §5.6.1 (the lists in the fields: ``http1.list_elements``).

Compare with: wsproto's handshake.py (``H11Handshake``: the same checks on h11's events),
websockets' server.py (``process_request``, ``accept``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import TYPE_CHECKING, NamedTuple

from toyservers import http1
from toyservers._types import Headers

if TYPE_CHECKING:
    from toyservers.websocket_deflate import PerMessageDeflate

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # §1.3: every server hashes the key with it
SWITCHING = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
VERSION_FIELD = b"sec-websocket-version: 13\r\n"  # §4.4: the version we speak, with a 426


class HandshakeError(Exception):
    """An opening handshake we refuse: answer ``status`` with ``fields`` (framed header lines,
    ``name: value\\r\\n``) and close. ``reason`` is for the debug log."""

    def __init__(self, status: int, reason: str, fields: bytes = b"") -> None:
        super().__init__(reason)
        self.status, self.reason, self.fields = status, reason, fields


class Handshake(NamedTuple):
    """A valid opening handshake: its key, the subprotocols and extensions offered, in order."""

    key: bytes
    subprotocols: list[str]
    extensions: list[bytes]


# --8<-- [start:check_handshake]
def check_handshake(method: str, headers: Headers) -> Handshake | None:
    """The opening handshake in an HTTP/1.1 request (``headers`` as the parser gives them:
    lowercased names), or None when it asks no ``Upgrade: websocket``: answer it as HTTP.

    §4.2.1 lists what a handshake holds; a request without it gets "an HTTP response with an
    appropriate error code (such as 400 Bad Request)" (HandshakeError): a method but GET, a
    body (Content-Length above 0, Transfer-Encoding), no ``upgrade`` in Connection, a key that
    is not 16 bytes in base64, no Sec-WebSocket-Version or two; another version than 13 gets
    426 (§4.4), both with ``Sec-WebSocket-Version: 13``.
    """
    fields: dict[bytes, list[bytes]] = {}
    for name, value in headers:
        fields.setdefault(name, []).append(value)
    if b"websocket" not in http1.list_elements(b",".join(fields.get(b"upgrade", []))):
        return None
    if method != "GET":
        raise HandshakeError(400, "a WebSocket handshake is a GET")
    if b"transfer-encoding" in fields or fields.get(b"content-length", [b"0"]) != [b"0"]:
        raise HandshakeError(400, "a WebSocket handshake has no body")
    if b"upgrade" not in http1.list_elements(b",".join(fields.get(b"connection", []))):
        raise HandshakeError(400, "Upgrade: websocket without Connection: upgrade")
    versions = fields.get(b"sec-websocket-version")
    if versions != [b"13"]:
        raise HandshakeError(426 if versions and len(versions) == 1 else 400,  # §4.1: once
                             f"Sec-WebSocket-Version {versions}", VERSION_FIELD)
    keys = fields.get(b"sec-websocket-key", [])
    try:
        if len(keys) != 1 or len(base64.b64decode(keys[0], validate=True)) != 16:
            raise ValueError(keys)
    except (ValueError, binascii.Error):
        raise HandshakeError(400, "missing or malformed Sec-WebSocket-Key") from None
    return Handshake(keys[0], elements(fields, b"sec-websocket-protocol"),
                     [e.encode() for e in elements(fields, b"sec-websocket-extensions")])
# --8<-- [end:check_handshake]


def elements(fields: dict[bytes, list[bytes]], name: bytes) -> list[str]:
    """The comma-separated elements of every ``name`` field, in order, case kept (subprotocol
    names are case-sensitive tokens: §4.1); toy-h2's ``check_connect`` reads them too."""
    values = b",".join(fields.get(name, [])).decode("latin-1").split(",")
    return [element.strip(" \t") for element in values if element.strip(" \t")]


def accept_key(key: bytes) -> bytes:
    """§4.2.2: ``Sec-WebSocket-Accept`` is base64(SHA-1(key + GUID)): proof that the server
    read this handshake, not a cached answer or an HTTP server that knows nothing of it."""
    return base64.b64encode(hashlib.sha1(key + GUID, usedforsecurity=False).digest())


def accept_response(key: bytes, subprotocol: str | None, deflate: PerMessageDeflate | None,
                    headers: Headers) -> bytes:
    """The 101 response (§4.2.2): ``Sec-WebSocket-Accept``, the ``subprotocol`` chosen (one
    the client offered, or None), the extension agreed, then ``headers`` (checked)."""
    lines = [SWITCHING, b"sec-websocket-accept: %s\r\n" % accept_key(key)]
    if subprotocol is not None:
        lines.append(b"sec-websocket-protocol: %s\r\n" % subprotocol.encode())
    if deflate is not None:
        lines.append(b"sec-websocket-extensions: %s\r\n" % deflate.response())
    lines += [b"%s: %s\r\n" % field for field in headers]
    return b"".join(lines) + b"\r\n"
