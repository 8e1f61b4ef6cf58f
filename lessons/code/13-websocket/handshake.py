"""Lesson 13: the WebSocket opening handshake by hand: ``Sec-WebSocket-Accept`` from a key.

A client asks to leave HTTP with a GET that says ``Upgrade: websocket`` and carries
``Sec-WebSocket-Key``, 16 random bytes in base64 (a fresh nonce per connection). A server that
agrees answers ``101 Switching Protocols`` with ``Sec-WebSocket-Accept``: the key, as the
client sent it (the base64 text, not the 16 bytes), followed by a GUID that every WebSocket
server knows, hashed with SHA-1 and put in base64. The client checks the answer; an HTTP
server, or a cache, that knows nothing of WebSocket cannot produce it.

Run: ``.venv/bin/python lessons/code/13-websocket/handshake.py`` prints the computation for
the key of RFC 6455 §1.3's example; give another key as an argument to compute its answer.
Spec: RFC 6455 §1.3 (the example), §4.1 (the client's request), §4.2.2 (the server's answer).
"""

from __future__ import annotations

import base64
import hashlib
import sys

# --8<-- [start:accept]
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 §1.3: the same for every server


def accept_key(key: bytes) -> bytes:
    """The ``Sec-WebSocket-Accept`` value for the ``Sec-WebSocket-Key`` value ``key``."""
    digest = hashlib.sha1(key + GUID).digest()  # 20 bytes
    return base64.b64encode(digest)  # 28 characters of base64
# --8<-- [end:accept]


def main(key: bytes) -> None:
    print(f"Sec-WebSocket-Key:    {key.decode()}")
    print(f"  decoded:            {base64.b64decode(key).hex(' ')} "
          f"({len(base64.b64decode(key))} bytes)")
    print(f"key + GUID:           {(key + GUID).decode()}")
    print(f"SHA-1 of that:        {hashlib.sha1(key + GUID).hexdigest()}")
    print(f"Sec-WebSocket-Accept: {accept_key(key).decode()}")


if __name__ == "__main__":
    main(sys.argv[1].encode() if len(sys.argv) > 1 else b"dGhlIHNhbXBsZSBub25jZQ==")
