"""Lesson 10: talk HTTP/2 to a server and print every frame, both ways, decoded.

The client side is h2 (``client_side=True``); the printing side reads the same bytes again
with hyperframe (frames) and two HPACK decoders, one per direction, so the header blocks are
shown as the fields they carry and as the bytes they cost. The conversation, one step at a
time so the frames come in the same order every run:

1. the preface: the magic string and our SETTINGS; wait for the server's SETTINGS and ACK;
2. ``GET /`` on stream 1, read to its end;
3. ``POST /echo`` with a 20-byte body on stream 3, read to its end (its five fields take
   13 bytes, one more than stream 1's four: HPACK's dynamic table remembers what stream 1
   sent);
4. GOAWAY, and close.

Run: ``.venv/bin/python lessons/code/10-http2/frames.py 8000`` against a server on port 8000
(the step 1 server, toy-h2, hypercorn). ``date`` values are printed as they come;
``:authority`` leaves the port out, so the transcript is the same on every run.
Spec: RFC 9113 §3.4 (preface), §4.1 (frame layout), §6 (frame types); RFC 7541 (HPACK).
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
NAMES = {0x0: "DATA", 0x1: "HEADERS", 0x2: "PRIORITY", 0x3: "RST_STREAM", 0x4: "SETTINGS",
         0x5: "PUSH_PROMISE", 0x6: "PING", 0x7: "GOAWAY", 0x8: "WINDOW_UPDATE",
         0x9: "CONTINUATION"}  # RFC 9113 §6


# --8<-- [start:describe]
class Printer:
    """Decodes one direction's bytes into frames and prints one line (or a few) per frame."""

    def __init__(self, arrow: str) -> None:
        self.arrow = arrow
        self.buffer = b""
        self.hpack = hpack.Decoder()  # each direction has its own dynamic table

    def feed(self, data: bytes) -> Iterator[bytes]:
        """Print each complete frame in ``data`` (and what came before) and yield its bytes."""
        if data.startswith(PREFACE):
            print(f"{self.arrow} preface  {PREFACE!r}")
            data = data[len(PREFACE):]
        self.buffer += data
        while len(self.buffer) >= 9:  # every frame starts with a 9-byte header
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
            print(f"      {frame.data!r}")
        elif isinstance(frame, hf.WindowUpdateFrame):
            print(f"      increment = {frame.window_increment}")
        elif isinstance(frame, hf.GoAwayFrame):
            print(f"      last_stream_id = {frame.last_stream_id}, "
                  f"error_code = {frame.error_code}")
# --8<-- [end:describe]


def main(port: int) -> None:
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    sent, received = Printer(">>> client"), Printer("<<< server")
    with socket.create_connection(("127.0.0.1", port), timeout=5.0) as sock:

        def write() -> None:
            data = conn.data_to_send()
            for _ in sent.feed(data):
                pass
            sock.sendall(data)

        def read_until(done: type, stream_id: int | None = None) -> None:
            """Read and print until an event of type ``done`` (for ``stream_id``) arrives.
            Frames go to h2 one at a time, so what we answer (an ACK, a WINDOW_UPDATE) is
            printed right after the frame that caused it, however the bytes were cut."""
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
                        finished = finished or (isinstance(event, done) and getattr(
                            event, "stream_id", None) == stream_id)
                    write()

        conn.initiate_connection()
        write()
        read_until(h2.events.SettingsAcknowledged)
        authority = "127.0.0.1"  # the same bytes on every run, whatever the port
        conn.send_headers(1, [(":method", "GET"), (":scheme", "http"), (":path", "/"),
                              (":authority", authority)], end_stream=True)
        write()
        read_until(h2.events.StreamEnded, 1)
        body = b'{"hello": "http/2"}\n'
        conn.send_headers(3, [(":method", "POST"), (":scheme", "http"), (":path", "/echo"),
                              (":authority", authority), ("content-length", str(len(body)))])
        conn.send_data(3, body, end_stream=True)
        write()
        read_until(h2.events.StreamEnded, 3)
        conn.close_connection()
        write()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
