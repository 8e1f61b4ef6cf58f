"""Exercise 10, solution: make a slow app back-pressure the client by holding WINDOW_UPDATE.

The lesson's step 1 server gives flow-control credit back the moment a DATA frame arrives, so
a client can keep sending while the app reads nothing, and the server buffers it all. HTTP/2
gives a server a better lever than TCP's: credit (RFC 9113 §6.9). Give it back only for the
bytes the app has taken with ``receive()``, and a slow app holds the client to one window.

``RequestBody`` sits between one stream's DATA frames and the app: the connection calls
``feed()`` for each ``DataReceived`` event and ``end()`` at ``StreamEnded``; the app awaits
``receive()``. After each call the server writes ``conn.data_to_send()``, which carries any
WINDOW_UPDATE that h2 decided to send.

YOUR TASK: write ``feed`` and ``receive`` below (look for "EXERCISE"). Check your work with
``make exercise N=10``; the test talks to your class through two ``H2Connection`` objects in
memory, no sockets. Run ``.venv/bin/python lessons/exercises/10-http2/solution.py`` to see a
client held to its window.

Spec: RFC 9113 §6.9 (flow control), §6.9.1 (the flow-control window); ASGI HTTP spec
(``http.request`` with ``more_body``); h2's docs, "Flow control" (``acknowledge_received_data``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import h2.config
import h2.connection
import h2.events


# --8<-- [start:solution]
class RequestBody:
    """One stream's request body, on its way from DATA frames to the app's ``receive()``."""

    def __init__(self, conn: h2.connection.H2Connection, stream_id: int) -> None:
        self.conn = conn
        self.stream_id = stream_id
        self.chunks: deque[tuple[bytes, int]] = deque()  # (data, flow-controlled length)
        self.ended = False
        self.arrived = asyncio.Event()  # set when a chunk or the end arrives

    def feed(self, data: bytes, flow_controlled_length: int) -> None:
        """A DATA frame's ``event.data`` and ``event.flow_controlled_length`` (bytes, padding
        included) arrived: keep them for the app. Give no credit back here."""
        self.chunks.append((data, flow_controlled_length))
        self.arrived.set()

    def end(self) -> None:
        """The client ended the stream (END_STREAM): no more DATA will come."""
        self.ended = True
        self.arrived.set()

    async def receive(self) -> dict[str, Any]:
        """The next ``http.request`` message, once a chunk (or the end) is there.

        Give back the credit for that chunk now, stream and connection both:
        ``self.conn.acknowledge_received_data(length, self.stream_id)``. ``more_body`` is
        False only with the last chunk after ``end()`` (or an empty body at the end).
        """
        while not self.chunks and not self.ended:
            self.arrived.clear()
            await self.arrived.wait()
        if not self.chunks:
            return {"type": "http.request", "body": b"", "more_body": False}
        data, length = self.chunks.popleft()
        # The credit goes back now, as the app takes the bytes: a slow app leaves the
        # client's window shut, and the client waits (h2 sends the WINDOW_UPDATE once
        # enough is acknowledged, not for every byte).
        self.conn.acknowledge_received_data(length, self.stream_id)
        return {"type": "http.request", "body": data,
                "more_body": bool(self.chunks) or not self.ended}
# --8<-- [end:solution]


def demo() -> None:
    """A client tries to send 1 MB to an app that has not read yet, then reads one chunk."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    client.initiate_connection()
    server.initiate_connection()
    bodies: dict[int, RequestBody] = {}

    def to_server() -> None:
        for event in server.receive_data(client.data_to_send()):
            if isinstance(event, h2.events.RequestReceived):
                bodies[event.stream_id] = RequestBody(server, event.stream_id)
            elif isinstance(event, h2.events.DataReceived):
                bodies[event.stream_id].feed(event.data or b"",
                                             event.flow_controlled_length or 0)

    def send_what_the_window_allows(left: int) -> int:
        while left and (window := client.local_flow_control_window(1)):
            size = min(window, left, client.max_outbound_frame_size)
            client.send_data(1, b"x" * size)
            left -= size
        to_server()
        client.receive_data(server.data_to_send())
        return left

    client.send_headers(1, [(":method", "POST"), (":path", "/"), (":scheme", "http"),
                            (":authority", "example")])
    left = send_what_the_window_allows(1_000_000)
    print(f"sent {1_000_000 - left:,} of 1,000,000 bytes; window now "
          f"{client.local_flow_control_window(1):,}")
    message = asyncio.run(bodies[1].receive())
    client.receive_data(server.data_to_send())
    print(f"the app read {len(message['body']):,} bytes; window now "
          f"{client.local_flow_control_window(1):,}")


if __name__ == "__main__":
    demo()
