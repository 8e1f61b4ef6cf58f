"""Lesson 13: one WebSocket frame decoded byte by byte: FIN, RSV, opcode, MASK, the length in
its three forms, the masking key, and the payload unmasked.

Give the frame's bytes in hex, spaces allowed; by default RFC 6455 §5.7's example, a client's
masked text frame holding "Hello". A frame cut short (the header alone, say) is decoded as far
as it goes, so the long length forms can be shown without their payload.

Run: ``.venv/bin/python lessons/code/13-websocket/frame.py 81 85 37 fa 21 3d 7f 9f 4d 51 58``.
Spec: RFC 6455 §5.2 (the frame's layout), §5.3 (masking), §5.7 (the examples).
"""

from __future__ import annotations

import sys

OPCODES = {0x0: "continuation", 0x1: "text", 0x2: "binary", 0x8: "close", 0x9: "ping",
           0xA: "pong"}  # §5.2; 0x3-0x7 and 0xB-0xF are reserved


# --8<-- [start:decode]
def decode(frame: bytes) -> None:
    """Print each field of ``frame``, in the order the bytes give them."""
    first, second = frame[0], frame[1]
    fin, rsv, opcode = first >> 7, (first >> 4) & 0b111, first & 0b1111
    print(f"byte 0     {first:08b}  FIN={fin} RSV1-3={rsv:03b} "
          f"opcode={opcode:#x} ({OPCODES.get(opcode, 'reserved')})")
    masked, length = second >> 7, second & 0b111_1111
    print(f"byte 1     {second:08b}  MASK={masked} length={length}")
    at = 2
    if length == 126:  # the length is in the next 2 bytes
        length, at = int.from_bytes(frame[2:4], "big"), 4
        print(f"bytes 2-3  {frame[2:4].hex(' ')}  16-bit length: {length}")
    elif length == 127:  # in the next 8
        length, at = int.from_bytes(frame[2:10], "big"), 10
        print(f"bytes 2-9  {frame[2:10].hex(' ')}  64-bit length: {length}")
    key = b""
    if masked:  # every frame from a client; none from a server
        key, at = frame[at:at + 4], at + 4
        print(f"bytes {at - 4}-{at - 1}  {key.hex(' ')}  masking key")
    payload = frame[at:at + length]
    print(f"payload    {payload.hex(' ') or '-'}  ({len(payload)} of {length} bytes here)")
    if masked:  # byte i is XORed with key byte i % 4, both ways (§5.3)
        payload = bytes(byte ^ key[i % 4] for i, byte in enumerate(payload))
        print(f"unmasked   {payload.hex(' ')}")
    if opcode == 0x1 and len(payload) == length:
        print(f"as UTF-8   {payload.decode()!r}")
# --8<-- [end:decode]


if __name__ == "__main__":
    decode(bytes.fromhex(" ".join(sys.argv[1:]) or "81 85 37 fa 21 3d 7f 9f 4d 51 58"))
