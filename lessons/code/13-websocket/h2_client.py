"""Lesson 13: a WebSocket over HTTP/2 (RFC 8441), every frame printed both ways: HTTP/2's,
and the WebSocket frames inside its DATA, byte by byte.

The conversation, one step at a time so the frames come in the same order every run:

1. the preface and both SETTINGS: the server's says ``ENABLE_CONNECT_PROTOCOL = 1`` (§3);
2. the extended CONNECT on stream 1 (``:protocol websocket``, ``sec-websocket-version: 13``,
   no key: §5) and its ``:status 200``;
3. a masked text frame carrying "Hello", RFC 6455 §5.7's example bytes (key ``37 fa 21 3d``),
   and the server's echo, unmasked (§5.1: servers never mask);
4. our close frame (1000), the server's answer with END_STREAM (RFC 8441 §5: a FIN), then our
   END_STREAM and GOAWAY.

Run: ``.venv/bin/python lessons/code/13-websocket/h2_client.py 8000`` against a WebSocket
echo on toy-h2 (``toyserve apps.ws_echo:app --server toy-h2 --port 8000``); the transcript
test (``tests/test_h2_websocket.py``) runs it against one that sends no ``date`` field, so
every run prints the same bytes (``lessons/transcripts/13-rfc8441-frames.txt``).

Spec: RFC 8441 §3-§5; RFC 6455 §5.2 (frame layout), §5.3 (masking), §5.5.1 (close), §5.7
(examples); RFC 9113 §4.1, §6.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator

import h2.config
import h2.connection
import h2.events
import h2.settings
import hpack
import hyperframe.frame as hf

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
NAMES = {0x0: "DATA", 0x1: "HEADERS", 0x3: "RST_STREAM", 0x4: "SETTINGS", 0x6: "PING",
         0x7: "GOAWAY", 0x8: "WINDOW_UPDATE"}  # RFC 9113 §6
OPCODES = {0x0: "continuation", 0x1: "text", 0x2: "binary", 0x8: "close", 0x9: "ping",
           0xA: "pong"}  # RFC 6455 §5.2
KEY = bytes.fromhex("37fa213d")  # RFC 6455 §5.7's masking key
HELLO = bytes.fromhex("818537fa213d7f9f4d5158")  # §5.7: "A single-frame masked text message"


def unmask(payload: bytes, key: bytes) -> bytes:
    return bytes(byte ^ key[i % 4] for i, byte in enumerate(payload))  # RFC 6455 §5.3


def websocket_frames(data: bytes) -> Iterator[str]:
    """One line per WebSocket frame in ``data`` (whole frames: each DATA here holds whole
    ones): its bytes in hex, then FIN, the opcode, MASK, the length, the key, the payload."""
    while data:
        first, second = data[0], data[1]
        length, at = second & 0x7F, 2  # 126 and 127 announce a longer length: none here
        key = data[at:at + 4] if second & 0x80 else b""
        at += len(key)
        payload = data[at:at + length]
        yield f"        ws bytes: {data[:at + length].hex(' ')}"
        plain = unmask(payload, key) if key else payload
        yield (f"        FIN={first >> 7} opcode={first & 0x0F:#x} "
               f"({OPCODES.get(first & 0x0F, '?')}) MASK={second >> 7} length={length}"
               + (f" key={key.hex(' ')}" if key else "") + f" payload={plain!r}")
        data = data[at + length:]


class Printer:
    """Decodes one direction's bytes into frames and prints them (lesson 10's, and the
    WebSocket frames inside each DATA)."""

    def __init__(self, arrow: str) -> None:
        self.arrow, self.buffer, self.hpack = arrow, b"", hpack.Decoder()

    def feed(self, data: bytes) -> Iterator[bytes]:
        """Print each complete frame in ``data`` (and what came before), yield its bytes."""
        if data.startswith(PREFACE):
            print(f"{self.arrow} preface  {PREFACE!r}")
            data = data[len(PREFACE):]
        self.buffer += data
        while len(self.buffer) >= 9:
            frame, length = hf.Frame.parse_frame_header(memoryview(self.buffer[:9]))
            if len(self.buffer) < 9 + length:
                return
            frame.parse_body(memoryview(self.buffer[9:9 + length]))
            raw, self.buffer = self.buffer[:9 + length], self.buffer[9 + length:]
            self.show(frame, length)
            yield raw

    def show(self, frame: hf.Frame, length: int) -> None:
        flags = ",".join(sorted(frame.flags)) or "-"
        print(f"{self.arrow} {NAMES.get(frame.type or 0, '?'):<13} stream={frame.stream_id} "
              f"length={length} flags={flags}")
        if isinstance(frame, hf.SettingsFrame):
            for code, value in frame.settings.items():
                print(f"      {h2.settings.SettingCodes(code).name} = {value}")
        elif isinstance(frame, hf.HeadersFrame):
            for name, value in self.hpack.decode(frame.data, raw=True):
                print(f"      {name.decode()}: {value.decode()}")
        elif isinstance(frame, hf.DataFrame):
            for line in websocket_frames(frame.data):
                print(line)
        elif isinstance(frame, hf.WindowUpdateFrame):
            print(f"      increment = {frame.window_increment}")
        elif isinstance(frame, hf.GoAwayFrame):
            print(f"      last_stream_id = {frame.last_stream_id}, "
                  f"error_code = {frame.error_code}")


def main(port: int) -> None:
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    sent, received = Printer(">>> client"), Printer("<<< server")
    with socket.create_connection(("127.0.0.1", port), timeout=5.0) as sock:

        def write() -> None:
            data = conn.data_to_send()
            for _ in sent.feed(data):
                pass
            sock.sendall(data)

        def read_until(done: type) -> None:
            """Read and print until an event of type ``done`` arrives, one frame to h2 at a
            time, so what we answer is printed right after the frame that caused it."""
            finished = False
            while not finished:
                data = sock.recv(65536)
                if not data:
                    raise SystemExit("the server closed the connection")
                for frame in received.feed(data):
                    for event in conn.receive_data(frame):
                        if isinstance(event, h2.events.DataReceived):
                            conn.acknowledge_received_data(event.flow_controlled_length,
                                                           event.stream_id)
                        finished = finished or isinstance(event, done)
                    write()

        # --8<-- [start:conversation]
        conn.initiate_connection()
        write()
        read_until(h2.events.SettingsAcknowledged)  # the server's SETTINGS came, and its ACK
        conn.send_headers(1, [(":method", "CONNECT"), (":protocol", "websocket"),
                              (":scheme", "http"), (":path", "/chat"),
                              (":authority", "127.0.0.1"), ("sec-websocket-version", "13")])
        write()
        read_until(h2.events.ResponseReceived)
        conn.send_data(1, HELLO)
        write()
        read_until(h2.events.DataReceived)
        close = (1000).to_bytes(2, "big")
        conn.send_data(1, bytes([0x88, 0x80 | len(close)]) + KEY + unmask(close, KEY))
        write()
        read_until(h2.events.StreamEnded)
        conn.end_stream(1)
        conn.close_connection()
        write()
        # --8<-- [end:conversation]


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
