"""permessage-deflate (RFC 7692) for ``toyservers.websocket``: negotiated, then each message
compressed or inflated whole, sans-IO.

A client offers the extension in ``Sec-WebSocket-Extensions``, each offer with parameters; the
server accepts one offer (answering the parameters it agrees to) or none (no compression).
Once agreed, the first frame of a compressed message has RSV1 set, and the message's payload,
all its frames joined, is raw DEFLATE (RFC 1951) ending in a sync flush whose last four bytes,
``00 00 ff ff``, the sender leaves off and the receiver puts back (§7.2.1, §7.2.2).

The parameters (§7.1), as ``negotiate`` answers them, the way uvicorn does (websockets'
``ServerPerMessageDeflateFactory(server_max_window_bits=12, client_max_window_bits=12,
compress_settings={"memLevel": 5})``: a 4 KiB window and less memory per connection):

- ``server_no_context_takeover`` / ``client_no_context_takeover``: that side starts each
  message with an empty window (a fresh zlib object). We grant either when asked, and ask
  neither: keeping the window compresses better.
- ``server_max_window_bits`` (8-15): the window we compress with: what the client asks, at
  most 12 (12 when it does not ask). zlib cannot keep a 256-byte window (asked for 8, it
  takes 9), so for 8 we deflate with Huffman coding alone: no back-reference at all, which any
  window inflates (websockets declines such an offer instead).
- ``client_max_window_bits`` (no value, or 8-15): the window the client may use; we answer it
  only when offered, with at most 12, and inflate with what we answered (15 otherwise; 9 for
  8, since a client on zlib deflates with 9 when asked for 8).

Deliberately left out: other extensions (``x-webkit-deflate-frame``), quoted parameter values
(§7.1 allows them; no client sends one), compression levels other than zlib's default.

Spec: RFC 7692 §5 (negotiation), §7 (permessage-deflate), §7.1 (parameters), §7.2
(compression and decompression).

Compare with: websockets/extensions/permessage_deflate.py, wsproto/extensions.py
(``PerMessageDeflate``).
"""

from __future__ import annotations

import zlib

NAME = b"permessage-deflate"
MAX_WINDOW_BITS = 12  # uvicorn's: a 4 KiB window instead of 32 KiB, for both directions
MEM_LEVEL = 5  # uvicorn's memLevel: about 8 KiB of deflate state instead of 128 KiB
TAIL = b"\x00\x00\xff\xff"  # the end of a sync flush, left off each message (§7.2.1)
_BITS = {str(bits).encode(): bits for bits in range(8, 16)}  # 1*DIGIT without leading zeros
_FLAGS = (b"server_no_context_takeover", b"client_no_context_takeover")


class PerMessageDeflate:
    """The agreed parameters of one connection, and its compressor and decompressor.

    ``compress(data)`` gives one message's payload; ``inflate(data, limit)`` gives what a piece
    of a received message inflates to, never more than ``limit + 1`` bytes (so a deflate bomb
    is stopped after ``limit``: the caller refuses a message past its size limit), and
    ``inflate(TAIL, limit)`` ends the message. zlib.error: the data is not valid DEFLATE.
    """

    __slots__ = ("server_no_context_takeover", "client_no_context_takeover", "server_bits",
                 "client_bits", "compressor", "decompressor")

    def __init__(self, server_no_context_takeover: bool = False,
                 client_no_context_takeover: bool = False, server_bits: int = 15,
                 client_bits: int = 15) -> None:
        self.server_no_context_takeover = server_no_context_takeover
        self.client_no_context_takeover = client_no_context_takeover
        self.server_bits, self.client_bits = server_bits, client_bits
        self.compressor = self._compressor()
        self.decompressor = self._decompressor()

    def _compressor(self) -> zlib._Compress:  # negative bits: raw DEFLATE, no zlib header
        if self.server_bits == 8:  # no back-references: see the module docstring
            return zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -9, MEM_LEVEL,
                                    zlib.Z_HUFFMAN_ONLY)
        return zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -self.server_bits,
                                MEM_LEVEL)

    def _decompressor(self) -> zlib._Decompress:
        return zlib.decompressobj(-max(self.client_bits, 9))

    def compress(self, data: bytes) -> bytes:
        """One message's payload: deflated, sync-flushed, its last four bytes left off."""
        compressor = self.compressor
        payload = compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)
        if self.server_no_context_takeover:
            self.compressor = self._compressor()
        return payload[:-4]

    def inflate(self, data: bytes | bytearray, limit: int, end: bool = False) -> bytes:
        """What ``data`` inflates to, at most ``limit + 1`` bytes; ``end``: ``data`` ends the
        message (the caller passes ``TAIL``), and the next one starts a fresh window if
        ``client_no_context_takeover`` was agreed. Raises zlib.error for invalid data."""
        out = self.decompressor.decompress(data, limit + 1)
        if end and self.client_no_context_takeover:
            self.decompressor = self._decompressor()
        return out

    def response(self) -> bytes:
        """The ``Sec-WebSocket-Extensions`` value that agrees to these parameters."""
        parts = [NAME]
        if self.server_no_context_takeover:
            parts.append(b"server_no_context_takeover")
        if self.client_no_context_takeover:
            parts.append(b"client_no_context_takeover")
        parts.append(b"server_max_window_bits=%d" % self.server_bits)
        if self.client_bits != 15:
            parts.append(b"client_max_window_bits=%d" % self.client_bits)
        return b"; ".join(parts)


def negotiate(offers: list[bytes]) -> PerMessageDeflate | None:
    """The first permessage-deflate offer of ``offers`` (the elements of the request's
    ``Sec-WebSocket-Extensions``, in order) we can accept, with the parameters we answer
    (``response()``); None when there is none. An offer with an unknown, repeated or invalid
    parameter is declined (RFC 7692 §5.1)."""
    for offer in offers:
        name, *params = [part.strip(b" \t") for part in offer.split(b";")]
        if name.lower() == NAME and (agreed := _accept(params)) is not None:
            return agreed
    return None


def _accept(params: list[bytes]) -> PerMessageDeflate | None:
    """The parameters we answer to one offer's ``params`` (``name[=value]`` each), or None."""
    seen: dict[bytes, bytes | None] = {}
    for param in params:
        name, equals, value = param.partition(b"=")
        name = name.strip(b" \t").lower()
        if name in seen:
            return None
        seen[name] = value.strip(b" \t") if equals else None
    if any(seen.get(flag, None) is not None for flag in _FLAGS) or \
            not set(seen) <= {*_FLAGS, b"server_max_window_bits", b"client_max_window_bits"}:
        return None  # a flag given a value, or a parameter we do not know
    server_bits, client_bits = MAX_WINDOW_BITS, 15
    if b"server_max_window_bits" in seen:
        asked = _BITS.get(seen[b"server_max_window_bits"] or b"")
        if asked is None:
            return None
        server_bits = min(asked, MAX_WINDOW_BITS)
    if b"client_max_window_bits" in seen:
        offered = seen[b"client_max_window_bits"]  # no value: the client can use any
        client_bits = min(15 if offered is None else _BITS.get(offered, 0), MAX_WINDOW_BITS)
        if not client_bits:
            return None
    return PerMessageDeflate(_FLAGS[0] in seen, _FLAGS[1] in seen, server_bits, client_bits)
