"""RFC 6455 from scratch: the WebSocket framing, server side, sans-IO.

toy-raw and toy-httptools speak WebSocket with this module (``--ws toyservers``), after the
opening handshake (``websocket_handshake.py``). Like ``http1_parser.py`` it takes bytes and
gives values, and touches no socket, clock or event loop:

- ``Connection``: the handshake's 101 (``accept``), then bytes in and events out
  (``Message``, ``Ping``, ``Pong``, ``Close``), and the bytes of what we send.
  ``ProtocolError`` carries the close code for what a client did wrong (§7.1.7: "Fail the
  WebSocket Connection").

Theory of operation. After the 101, each side sends frames (§5.2)::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-+-+-+-------+-+-------------+-------------------------------+
    |F|R|R|R| opcode|M| Payload len |    Extended payload length    |
    |I|S|S|S|  (4)  |A|     (7)     |             (16/64)           |
    |N|V|V|V|       |S|             |   (if payload len==126/127)   |
    | |1|2|3|       |K|             |                               |
    +-+-+-+-+-------+-+-------------+ - - - - - - - - - - - - - - - +
    |     Extended payload length continued, if payload len == 127  |
    + - - - - - - - - - - - - - - - +-------------------------------+
    |                               | Masking-key, if MASK set to 1 |
    +-------------------------------+-------------------------------+
    | Masking-key (continued)       |          Payload Data         |
    +-------------------------------- - - - - - - - - - - - - - - - +

A message is one data frame (text or binary) or several: the first gives the type, the others
are continuations, and the last has FIN set. Control frames (close, ping, pong) are whole (FIN,
at most 125 bytes) and may come between the fragments of a message. A client masks every
payload byte with its 4-byte key (XOR, the key repeating: §5.3), so that a page's script cannot
choose the bytes a proxy sees. ``next_event()`` reads a frame's header once all of it is here
(2 to 14 bytes), then its payload as it comes: a data frame's bytes are unmasked, inflated and
checked as UTF-8 on arrival, so a bad byte fails the connection at once, and a message over
``max_size`` is refused from the header announcing it (1009), before a byte of it is kept.
What clients send most, a message in one frame read all at once, takes one step
(``take_whole_message``: the header, the unmasking and one UTF-8 decode), and leaves the rest
(fragments, control frames, frames to fail, a frame still coming) to the general path.

Deliberately left out: the client side (we never mask, nor check ``Sec-WebSocket-Accept``),
extensions other than permessage-deflate (``websocket_deflate.py``), sending a message in
fragments (each leaves in one frame), and WebSocket over HTTP/2 (RFC 8441).

Spec: RFC 6455 §5.1-§5.5 (framing, masking, fragmentation, control frames), §5.8
(extensibility: RSV bits), §7 (closing, status codes), §8.1 (UTF-8), §10.4 (limits); RFC 7692
(``websocket_deflate.py``); the IANA WebSocket Close Code registry.

Compare with: wsproto's frame_protocol.py (the same jobs as classes and generators),
websockets' frames.py and protocol.py.
"""

from __future__ import annotations

import codecs
import struct
import zlib
from dataclasses import dataclass
from typing import Any, NamedTuple

from toyservers._types import Headers
from toyservers.websocket_deflate import TAIL, PerMessageDeflate, negotiate
from toyservers.websocket_handshake import Handshake, accept_response

CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA  # §5.2
OPCODES = frozenset({CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG})  # the others: reserved
FIN, RSV1, RSV2_RSV3, MASK = 0x80, 0x40, 0x30, 0x80
MAX_CONTROL_PAYLOAD = 125  # bytes a control frame (close, ping, pong) may carry (§5.5)
# Close codes (§7.4.1; 1012 and 1013 from the IANA registry)
NORMAL, GOING_AWAY, PROTOCOL_ERROR, NO_STATUS, ABNORMAL = 1000, 1001, 1002, 1005, 1006
INVALID_DATA, POLICY, TOO_BIG, INTERNAL_ERROR, RESTART = 1007, 1008, 1009, 1011, 1012
MAX_SIZE = 16 * 1024 * 1024  # largest message, bytes (uvicorn's --ws-max-size: 16 MiB)
# Empty fragments a message may have: each carries nothing and costs a parse (about 3 us: a
# 256 KiB read of them held the loop 127 ms), so past this many they are a flood (1008).
MAX_EMPTY_FRAGMENTS = 1000


def valid_close_code(code: int) -> bool:
    """May a close frame carry ``code``? §7.4.2: 1000-2999 are the registry's (1004 reserved;
    1005, 1006 and 1015 never sent; 1016 and up unassigned), 3000-4999 libraries' and apps'."""
    return 1000 <= code <= 1003 or 1007 <= code <= 1014 or 3000 <= code <= 4999


# --- frames (§5) ----------------------------------------------------------------------------------


# --8<-- [start:unmask]
XOR_TABLES = [bytes([byte ^ k for byte in range(256)]) for k in range(256)]  # [k][b] is b ^ k


def unmask(data: bytearray, key: bytes | bytearray, offset: int = 0) -> bytearray:
    """XOR ``data`` in place with ``key`` repeated (§5.3), ``data`` starting ``offset`` bytes
    into the payload, and return it: bytes 0, 4, 8... take key byte 0, and so on, so four slices
    are each XORed with one byte by ``bytes.translate``'s C loop. timeit, 256 KiB (asyncio's
    largest read): 0.4 ms; as two ints XORed 0.8-3 ms (the conversions grow faster than the
    size); a Python loop 37 ms. At 1 KiB, ints cost 1.5x the instructions (callgrind)."""
    for i in range(4):
        data[i::4] = data[i::4].translate(XOR_TABLES[key[(offset + i) % 4]])
    return data
# --8<-- [end:unmask]


HEAD_7, HEAD_16, HEAD_64 = struct.Struct("!BB"), struct.Struct("!BBH"), struct.Struct("!BBQ")


def frame(opcode: int, payload: bytes, rsv1: bool = False) -> bytes:
    """One whole frame from the server (§5.2: FIN set, unmasked: §5.1, servers never mask),
    its length in the fewest bytes (7 bits, then 16, then 64): the header packed by one
    ``struct.Struct`` (for 1 KiB, 40 % fewer instructions than ``bytes()`` and ``to_bytes``)."""
    first = FIN | (RSV1 if rsv1 else 0) | opcode
    size = len(payload)
    if size < 126:
        return HEAD_7.pack(first, size) + payload
    if size < 65536:
        return HEAD_16.pack(first, 126, size) + payload
    return HEAD_64.pack(first, 127, size) + payload


class ProtocolError(Exception):
    """What the client sent fails the connection (§7.1.7): close with ``code`` (1002 a protocol
    error, 1007 invalid UTF-8 or DEFLATE data, 1009 a message over the size limit)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


@dataclass(slots=True)
class Message:
    """A whole message: ``str`` for a text one, ``bytes`` for a binary one. (A class, not a
    NamedTuple as the others: one is made per message, in 1.8k instructions, not 3k.)"""

    data: str | bytes


class Ping(NamedTuple):
    payload: bytes  # answer it with a pong carrying the same bytes (§5.5.2)


class Pong(NamedTuple):
    payload: bytes


class Close(NamedTuple):
    """The client's close frame: its code (1005 when it gave none: §7.1.5) and reason."""

    code: int
    reason: str


Event = Message | Ping | Pong | Close


def close_event(payload: bytes) -> Close:
    """A close frame's payload (§5.5.1): [2-byte code [UTF-8 reason]]. ProtocolError: 1002 for
    one byte or a code no frame may carry, 1007 for a reason that is not UTF-8."""
    if not payload:
        return Close(NO_STATUS, "")
    code = int.from_bytes(payload[:2], "big")
    if len(payload) == 1 or not valid_close_code(code):
        raise ProtocolError(PROTOCOL_ERROR, f"close code {payload[:2]!r}")
    try:
        return Close(code, payload[2:].decode("utf-8"))
    except UnicodeDecodeError:
        raise ProtocolError(INVALID_DATA, "a close reason that is not UTF-8") from None


# --8<-- [start:whole_message]
def take_whole_message(buffer: bytearray, max_size: int) -> Message | None:
    """Take a message in one frame off the start of ``buffer``, if all of it is here: the frame
    clients send most (FIN, text or binary, no RSV bit, masked, a 7- or 16-bit length, at most
    ``max_size`` bytes), read in one step. None, taking nothing, for any other: the general
    path reads it (and fails it, if it must). ProtocolError: 1007, text that is not UTF-8."""
    size = len(buffer)
    first = buffer[0] if size >= 6 else 0  # 6: the smallest masked frame
    if first != FIN | TEXT and first != FIN | BINARY:
        return None
    length, start = buffer[1] ^ MASK, 2  # below 126 only if MASK was set
    if length == 126 and size >= 8:
        length, start = int.from_bytes(buffer[2:4], "big"), 4
        if length < 126:  # not in the fewest bytes (§5.2): the general path fails it
            return None
    elif length >= 126:
        return None
    end = start + 4 + length
    if end > size or length > max_size:
        return None
    data = unmask(buffer[start + 4:end], buffer[start:start + 4])
    del buffer[:end]
    if first == FIN | BINARY:
        return Message(bytes(data))
    try:  # §8.1: the whole message is here, so one strict decode checks it
        return Message(data.decode())
    except UnicodeDecodeError as exc:
        raise ProtocolError(INVALID_DATA, f"invalid UTF-8: {exc.reason}") from None
# --8<-- [end:whole_message]


def inflate(deflate: PerMessageDeflate, data: bytes | bytearray, room: int, last: bool
            ) -> bytes:
    """RFC 7692 §7.2.2: what a piece of a compressed message inflates to, the sync flush's tail
    put back after the last frame (``last``). ProtocolError: 1007 for invalid data, 1009 past
    ``room`` bytes, however little came in (a deflate bomb)."""
    try:
        out = deflate.inflate(data, room)
        if last and len(out) <= room:
            out += deflate.inflate(TAIL, room - len(out), end=True)
    except zlib.error as exc:
        raise ProtocolError(INVALID_DATA, f"invalid DEFLATE data: {exc}") from None
    if len(out) > room:
        raise ProtocolError(TOO_BIG, "a message inflating past the size limit")
    return out


# --- the connection (§5-§7) ----------------------------------------------------------------------


class Connection:
    """One WebSocket connection, server side: the 101, then frames both ways (sans-IO).

    ``accept(subprotocol, headers)`` gives the 101 response (agreeing on permessage-deflate
    when ``deflate`` and the client offers it); ``receive_data(data)`` keeps what came;
    ``next_event()`` gives the next ``Event`` (None until more comes, and for good after a
    ``Close``) or raises ProtocolError; ``send_message``, ``send_ping``, ``send_pong`` and
    ``send_close`` give the bytes to write. ``max_size``: the largest message, bytes (after
    inflating). ``close_sent``: we sent our close frame (§7.1.2).
    """

    def __init__(self, handshake: Handshake, max_size: int = MAX_SIZE,
                 deflate: bool = True) -> None:
        self.handshake, self.max_size, self.offer_deflate = handshake, max_size, deflate
        self.deflate: PerMessageDeflate | None = None  # agreed by accept()
        self.buffer = bytearray()
        self.closed = False  # a close frame came, or we failed: nothing more is read
        self.close_sent = False
        # The frame being read: its header, and how much payload is still to come.
        self.in_frame = self.fin = False
        self.opcode = self.remaining = self.offset = 0
        self.key = b""
        # The message being read: its type, the pieces so far and their size.
        self.message: int | None = None  # TEXT or BINARY, None between messages
        self.compressed = False  # its first frame had RSV1: permessage-deflate
        self.parts: list[Any] = []  # str pieces of a text message, bytes of a binary one
        self.size = self.empty = 0  # its bytes so far (inflated), its empty fragments so far
        self.decoder = codecs.getincrementaldecoder("utf-8")()

    def accept(self, subprotocol: str | None, headers: Headers) -> bytes:
        """The 101 (``accept_response``), permessage-deflate agreed if offered and wanted."""
        if self.offer_deflate:
            self.deflate = negotiate(self.handshake.extensions)
        return accept_response(self.handshake.key, subprotocol, self.deflate, headers)

    def receive_data(self, data: bytes) -> None:
        if not self.closed:  # §5.5.1: after a close frame, nothing the client sends counts
            self.buffer += data

    def next_event(self) -> Event | None:
        """The next event in the bytes received, or None until more come (see the class)."""
        if self.closed or not self.buffer:  # nothing can come of no bytes
            return None
        try:
            if not self.in_frame and self.message is None:
                whole = take_whole_message(self.buffer, self.max_size)  # the common case
                if whole is not None:
                    return whole
            while not self.closed:
                if not self.in_frame and not self._read_header():
                    return None
                if self.opcode >= CLOSE:  # a control frame is handled whole
                    if len(self.buffer) < self.remaining:
                        return None
                    self.in_frame = False
                    return self._control(bytes(self._take(self.remaining)))
                event = self._read_data()
                if event is not None or self.in_frame:
                    return event
            return None
        except ProtocolError:
            self.closed = True
            raise

    def _take(self, size: int) -> bytearray:
        """The next ``size`` bytes of payload (all here), unmasked."""
        data = unmask(self.buffer[:size], self.key, self.offset)
        del self.buffer[:size]
        self.offset += size
        self.remaining -= size
        return data

    # --8<-- [start:read_header]
    def _read_header(self) -> bool:
        """Read a frame header if all of it is here, checked (§5.2); False until it is."""
        buffer = self.buffer
        if len(buffer) < 2:
            return False
        first, second = buffer[0], buffer[1]
        opcode, length = first & 0x0F, second & 0x7F
        if not second & MASK:  # §5.1: a server "MUST close the connection" on an unmasked frame
            raise ProtocolError(PROTOCOL_ERROR, "an unmasked client frame")
        if opcode not in OPCODES:
            raise ProtocolError(PROTOCOL_ERROR, f"reserved opcode {opcode:#x}")
        if opcode >= CLOSE and (not first & FIN or length > MAX_CONTROL_PAYLOAD):
            raise ProtocolError(PROTOCOL_ERROR, "a fragmented or oversized control frame")
        start = 2 + (2 if length == 126 else 8 if length == 127 else 0)  # the masking key's
        if len(buffer) < start + 4:
            return False
        if length == 126:  # §5.2: "the minimal number of bytes MUST be used"
            length = int.from_bytes(buffer[2:4], "big")
            if length < 126:
                raise ProtocolError(PROTOCOL_ERROR, "a 16-bit length below 126")
        elif length == 127:
            length = int.from_bytes(buffer[2:10], "big")
            if length < 65536 or length >> 63:  # and "the most significant bit MUST be 0"
                raise ProtocolError(PROTOCOL_ERROR, "a 64-bit length below 65536 or past 2**63")
        if first & RSV2_RSV3 or first & RSV1 and (  # §5.2: "MUST be 0 unless an extension ..."
                self.deflate is None or opcode != TEXT and opcode != BINARY):
            raise ProtocolError(PROTOCOL_ERROR, "an RSV bit no extension defines")
        if opcode < CLOSE:
            self._start_data(opcode, length, first)
        self.in_frame, self.fin, self.opcode = True, bool(first & FIN), opcode
        self.remaining, self.offset, self.key = length, 0, bytes(buffer[start:start + 4])
        del buffer[:start + 4]
        return True

    def _start_data(self, opcode: int, length: int, first: int) -> None:
        """A data frame: a message starts (text, binary) or goes on (continuation), §5.4; its
        size is checked against ``max_size`` before a byte of it is kept (§10.4), and its empty
        fragments against ``MAX_EMPTY_FRAGMENTS``."""
        if (opcode == CONTINUATION) != (self.message is not None):
            raise ProtocolError(PROTOCOL_ERROR, "a continuation outside a message"
                                if opcode == CONTINUATION else "a message inside a message")
        if self.size + length > self.max_size:
            raise ProtocolError(TOO_BIG, f"a message over {self.max_size} bytes")
        if opcode != CONTINUATION:
            self.message, self.compressed = opcode, bool(first & RSV1)
            self.parts, self.empty = [], 0
        if not length and not first & FIN:  # an empty fragment, not the last one
            self.empty += 1
            if self.empty > MAX_EMPTY_FRAGMENTS:
                raise ProtocolError(POLICY, "a flood of empty fragments")
    # --8<-- [end:read_header]

    # --8<-- [start:read_data]
    def _read_data(self) -> Message | None:
        """Unmask, inflate and check what has come of a data frame's payload; the Message once
        the last frame of one has all come."""
        data = self._take(min(self.remaining, len(self.buffer))) if self.remaining else b""
        last = not self.remaining and self.fin
        if self.compressed and self.deflate is not None:  # (compressed: deflate was agreed)
            data = inflate(self.deflate, data, self.max_size - self.size, last)
        if self.message == TEXT:
            try:  # §8.1: fail as soon as the bytes cannot be UTF-8, not at the message's end
                text = self.decoder.decode(data, last)
                pending = self.decoder.getstate()[0]  # CPython waits on ED A0-BF (surrogates)
                if len(pending) > 1 and pending[0] == 0xED and pending[1] > 0x9F:
                    raise UnicodeDecodeError("utf-8", pending, 0, 2, "a surrogate")
            except UnicodeDecodeError as exc:
                raise ProtocolError(INVALID_DATA, f"invalid UTF-8: {exc.reason}") from None
            self.parts.append(text)
        else:
            self.parts.append(data)
        self.size += len(data)
        if self.remaining:
            return None
        self.in_frame = False
        if not self.fin:
            return None
        message = "".join(self.parts) if self.message == TEXT else b"".join(self.parts)
        self.message, self.parts, self.size = None, [], 0
        return Message(message)
    # --8<-- [end:read_data]

    def _control(self, payload: bytes) -> Event:
        """§5.5: a ping, a pong, or the close frame (``close_event``): nothing is read after."""
        if self.opcode == PING:
            return Ping(payload)
        if self.opcode == PONG:
            return Pong(payload)
        self.closed = True
        return close_event(payload)

    # --- what we send ---

    def send_message(self, data: str | bytes) -> bytes:
        """A whole message in one frame: text for ``str``, binary for ``bytes``, deflated when
        permessage-deflate was agreed."""
        opcode, payload = (TEXT, data.encode()) if isinstance(data, str) else (BINARY, data)
        if self.deflate is not None:
            return frame(opcode, self.deflate.compress(payload), rsv1=True)
        return frame(opcode, payload)

    def send_ping(self, payload: bytes = b"") -> bytes:
        return frame(PING, payload[:MAX_CONTROL_PAYLOAD])

    def send_pong(self, payload: bytes = b"") -> bytes:
        return frame(PONG, payload[:MAX_CONTROL_PAYLOAD])

    def send_close(self, code: int | None = NORMAL, reason: str = "") -> bytes:
        """Our close frame (§5.5.1), ``code`` None for none; ``reason`` cut to fit 125 bytes,
        at a character's start. ValueError for a code no close frame may carry."""
        if code is not None and not valid_close_code(code):
            raise ValueError(f"close code {code} may not be sent (RFC 6455 §7.4)")
        self.close_sent = True
        if code is None:
            return frame(CLOSE, b"")
        reason_bytes = reason.encode()[:MAX_CONTROL_PAYLOAD - 2]
        reason_bytes = reason_bytes.decode(errors="ignore").encode()  # no half a character
        return frame(CLOSE, code.to_bytes(2, "big") + reason_bytes)
