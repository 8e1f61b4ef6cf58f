"""Lesson 13: a WebSocket client on a raw socket that prints every frame, both ways.

It speaks just enough RFC 6455 for one conversation with an echo server
(``apps/ws_echo.py``), one step at a time so the frames come in the same order every run:

1. the opening handshake: a GET with ``Upgrade: websocket``, the 101 back, its
   ``Sec-WebSocket-Accept`` checked;
2. "Hello" as one masked text frame (RFC 6455 §5.7's example bytes), and its echo;
3. "Hello" again in two fragments with a ping between them: the pong comes back at once,
   the echo once the message is whole;
4. a close frame with code 1000, the server's close frame back, and the server closes the
   TCP connection.

Each frame is printed as its bytes in hex, then what they say. A real client masks each frame
with 4 fresh random bytes (RFC 6455 §5.3) and sends a random key in the handshake; this one
uses fixed ones, so that its transcript is the same on every run.

Run: ``.venv/bin/python lessons/code/13-websocket/client.py 8000`` against an echo server on
port 8000 (toy-raw, uvicorn, hypercorn: ``apps.ws_echo:app``).
Spec: RFC 6455 §4.1 (the client's handshake), §5.2 (frames), §5.4 (fragmentation), §5.5
(control frames), §7 (closing).
"""

from __future__ import annotations

import base64
import hashlib
import socket
import sys

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
KEY = b"dGhlIHNhbXBsZSBub25jZQ=="  # RFC 6455 §1.3's example; a real client: 16 random bytes
MASK = bytes.fromhex("37fa213d")  # RFC 6455 §5.7's example; a real client: fresh per frame
NAMES = {0x0: "continuation", 0x1: "text", 0x2: "binary", 0x8: "close", 0x9: "ping",
         0xA: "pong"}


# --8<-- [start:frames]
def client_frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    """A masked frame, as every client frame must be (§5.1); payloads under 126 bytes."""
    masked = bytes(byte ^ MASK[i % 4] for i, byte in enumerate(payload))
    return bytes([(0x80 if fin else 0) | opcode, 0x80 | len(payload)]) + MASK + masked


def read_frame(sock: socket.socket) -> bytes:
    """One whole frame from the server (unmasked: §5.1), read to its last byte."""
    head = read_exactly(sock, 2)
    length = head[1] & 0x7F
    if length == 126:
        head += read_exactly(sock, 2)
        length = int.from_bytes(head[2:], "big")
    return head + read_exactly(sock, length)  # (an echo of ours is short: no 64-bit form)
# --8<-- [end:frames]


def read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"the server closed after {data!r}")
        data += chunk
    return data


def describe(frame: bytes) -> str:
    """What a frame's bytes say: FIN, opcode, masking, length and the payload."""
    fin, opcode, masked, length = frame[0] >> 7, frame[0] & 0x0F, frame[1] >> 7, frame[1] & 0x7F
    payload = frame[6:] if masked else frame[2:]
    if masked:
        payload = bytes(byte ^ frame[2 + i % 4] for i, byte in enumerate(payload))
    said = repr(payload.decode()) if opcode in (0x0, 0x1) else repr(payload)
    if opcode == 0x8 and payload:
        said = f"code {int.from_bytes(payload[:2], 'big')}, reason {payload[2:].decode()!r}"
    return (f"FIN={fin} {NAMES[opcode]}, {'masked' if masked else 'unmasked'}, {length} bytes: "
            f"{said}")


def show(arrow: str, frame: bytes) -> None:
    print(f"{arrow} {frame.hex(' ')}")
    print(f"    {describe(frame)}")


def send(sock: socket.socket, frame: bytes) -> None:
    show(">", frame)
    sock.sendall(frame)


def receive(sock: socket.socket) -> None:
    show("<", read_frame(sock))


def main(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        request = (b"GET /chat HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                   b"Connection: Upgrade\r\nSec-WebSocket-Key: " + KEY + b"\r\n"
                   b"Sec-WebSocket-Version: 13\r\n\r\n")
        sock.sendall(request)
        for line in request.decode().split("\r\n")[:-1]:
            print(f"> {line}")
        response = b""
        while b"\r\n\r\n" not in response:
            response += sock.recv(1)  # byte by byte: what follows the head is frames
        for line in response.decode().split("\r\n")[:-1]:
            print(f"< {line}")
        fields = dict(line.split(": ", 1) for line in response.decode().split("\r\n")[1:-2])
        fields = {name.lower(): value for name, value in fields.items()}
        accept = base64.b64encode(hashlib.sha1(KEY + GUID).digest()).decode()
        assert fields["sec-websocket-accept"] == accept, "not the answer to our key"

        send(sock, client_frame(0x1, b"Hello"))
        receive(sock)
        print("  (fragments, a ping between them)")
        send(sock, client_frame(0x1, b"Hel", fin=False))
        send(sock, client_frame(0x9, b"are you there?"))
        send(sock, client_frame(0x0, b"lo"))
        receive(sock)  # the pong: answered as soon as the ping is read
        receive(sock)  # the echo: once the message is whole
        send(sock, client_frame(0x8, (1000).to_bytes(2, "big") + b"bye"))
        receive(sock)
        print("  (the server closed the connection)" if sock.recv(1) == b"" else "  (open)")


if __name__ == "__main__":
    main(int(sys.argv[1]))
