"""A raw WebSocket client for the conformance suite: the handshake and frames written by hand.

The ``websockets`` library is the suite's everyday client; this one exists for what a library
refuses to send or hides: a control frame between two fragments, a frame header announcing
more than the server allows, a compressed frame built with zlib, and the exact close code and
ping payload that came back. Frames are built and read by this module alone (no wsproto), so
a server that uses wsproto is not checked against wsproto. Every read has a deadline.

Spec: RFC 6455 §4.1 (the client's opening handshake: ``Sec-WebSocket-Key``, the accept value
from the GUID and SHA-1), §5.2 (the frame: FIN, RSV1-3, opcode, MASK, 7/16/64-bit length),
§5.3 (client frames are masked), §5.4 (fragmentation), §5.5 (control frames), §7.4 (close
codes); RFC 7692 §7.2 (permessage-deflate: a raw DEFLATE stream, the final ``00 00 ff ff``
removed, RSV1 on the first frame of a compressed message).
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import struct
import time
import zlib
from dataclasses import dataclass

from tests.conformance.support import HOST, IO_TIMEOUT, Connection, Response

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 §1.3
CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
RSV1 = 0x40
DEFLATE_TAIL = b"\x00\x00\xff\xff"


def accept_value(key: bytes) -> str:
    """The ``Sec-WebSocket-Accept`` a server must answer ``key`` with (RFC 6455 §4.2.2)."""
    return base64.b64encode(hashlib.sha1(key + GUID).digest()).decode("ascii")


def frame(opcode: int, payload: bytes = b"", *, fin: bool = True, rsv: int = 0,
          length: int | None = None, mask: bytes | None = None) -> bytes:
    """One masked client frame (``mask``: 4 bytes, random by default); ``length`` announces
    another payload length than the real one (to claim more than is sent)."""
    size = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | rsv | opcode])
    if size < 126:
        head += bytes([0x80 | size])
    elif size < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack("!H", size)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", size)
    key = os.urandom(4) if mask is None else mask
    return head + key + apply_mask(payload, key)


def apply_mask(payload: bytes, key: bytes) -> bytes:
    """``payload`` XOR the 4-byte ``key`` repeated (RFC 6455 §5.3), as one big-int XOR."""
    if not payload:
        return b""
    stream = (key * (len(payload) // 4 + 1))[:len(payload)]
    masked = int.from_bytes(payload, "big") ^ int.from_bytes(stream, "big")
    return masked.to_bytes(len(payload), "big")


def close_payload(code: int, reason: str = "") -> bytes:
    return struct.pack("!H", code) + reason.encode("utf-8")


def deflate(data: bytes) -> bytes:
    """``data`` as permessage-deflate sends it: raw DEFLATE, the final empty block's tail cut."""
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    out = compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)
    return out[:-4] if out.endswith(DEFLATE_TAIL) else out


@dataclass
class Frame:
    """One frame the server sent (servers never mask, RFC 6455 §5.1)."""

    fin: bool
    rsv: int
    opcode: int
    payload: bytes

    @property
    def close_code(self) -> int | None:
        """A Close frame's status code (None: a Close without one, or not a Close)."""
        return struct.unpack("!H", self.payload[:2])[0] if len(self.payload) >= 2 else None

    @property
    def close_reason(self) -> str:
        return self.payload[2:].decode("utf-8", errors="replace")


class RawWebSocket:
    """One WebSocket connection to 127.0.0.1:``port``, opened with a handwritten handshake.

    ``response`` is the server's answer to the handshake: 101 when the WebSocket is open (its
    ``Sec-WebSocket-Accept`` checked), anything else when the server refused it. Raises
    AssertionError when the server sends no response at all.
    """

    def __init__(self, port: int, path: str = "/ws", *,
                 headers: list[tuple[str, str]] | None = None, timeout: float = IO_TIMEOUT
                 ) -> None:
        self.http = Connection(port, timeout=timeout)
        self.sock: socket.socket = self.http.sock
        key = base64.b64encode(os.urandom(16))
        lines = [f"GET {path} HTTP/1.1", f"Host: {HOST}:{port}", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {key.decode()}",
                 "Sec-WebSocket-Version: 13", *(f"{k}: {v}" for k, v in headers or [])]
        self.http.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        response = self.http.read_head()
        assert response is not None, "the server closed the connection without answering"
        self.response: Response = response
        if response.status == 101:
            assert response.header("sec-websocket-accept") == accept_value(key), response

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> RawWebSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, opcode: int, payload: bytes = b"", *, fin: bool = True,
                   rsv: int = 0) -> None:
        self.send(frame(opcode, payload, fin=fin, rsv=rsv))

    def read_frame(self) -> Frame:
        """The next frame; EOFError when the connection ends first, TimeoutError after the
        socket's timeout."""
        first, second = self.http.read_exactly(2)
        size = second & 0x7F
        if size == 126:
            size = struct.unpack("!H", self.http.read_exactly(2))[0]
        elif size == 127:
            size = struct.unpack("!Q", self.http.read_exactly(8))[0]
        key = self.http.read_exactly(4) if second & 0x80 else b""
        payload = self.http.read_exactly(size)
        if key:
            payload = apply_mask(payload, key)
        return Frame(bool(first & 0x80), first & 0x70, first & 0x0F, payload)

    def read_message(self, *, answer_pings: bool = True) -> tuple[int, bytes, list[Frame]]:
        """The next data message, its fragments joined (a compressed one inflated):
        ``(opcode, payload, control frames seen on the way)``. AssertionError on a Close."""
        controls: list[Frame] = []
        first: Frame | None = None
        parts: list[bytes] = []
        while True:
            got = self.read_frame()
            if got.opcode >= CLOSE:
                assert got.opcode != CLOSE, f"closed {got.close_code} {got.close_reason!r}"
                controls.append(got)
                if got.opcode == PING and answer_pings:
                    self.send_frame(PONG, got.payload)
                continue
            first = first or got
            parts.append(got.payload)
            if got.fin:
                break
        payload = b"".join(parts)
        if first.rsv & RSV1:
            payload = zlib.decompressobj(wbits=-zlib.MAX_WBITS).decompress(payload + DEFLATE_TAIL)
        return first.opcode, payload, controls

    def read_close(self, timeout: float = IO_TIMEOUT) -> Frame | None:
        """Read (and drop data frames) until the server's Close frame; None when the
        connection ends without one or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                got = self.read_frame()
            except (EOFError, TimeoutError, ConnectionError):
                return None
            if got.opcode == CLOSE:
                return got
        return None
