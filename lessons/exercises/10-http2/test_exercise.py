"""Checks for exercise 10 (credit follows what the app reads). Run: ``make exercise N=10``.

Tests ``starter.py`` by default; ``EXERCISE_IMPL=solution`` tests the reference solution.
No sockets: a client and a server ``H2Connection`` pass their bytes to each other in memory,
the server side dispatching DataReceived to ``RequestBody.feed`` and StreamEnded to ``end``,
and the app's reads are ``await body.receive()`` calls, so every window is checked exactly.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import h2.config
import h2.connection
import h2.events

IMPL = os.environ.get("EXERCISE_IMPL", "starter")
PATH = Path(__file__).with_name(f"{IMPL}.py")
WINDOW = 65535  # the initial window of RFC 9113 §6.9.2, stream and connection


def load() -> ModuleType:
    """Import ``starter.py`` or ``solution.py`` from this directory as a fresh module."""
    spec = importlib.util.spec_from_file_location(f"exercise_10_{IMPL}", PATH)
    assert spec is not None and spec.loader is not None, f"cannot import {PATH}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ex = load()


class Pair:
    """A client and a server connection joined in memory; stream 1 is a POST in progress."""

    def __init__(self) -> None:
        self.client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        self.client.initiate_connection()
        self.server.initiate_connection()
        self.body: Any = None
        self.sent = bytearray()
        self.client.send_headers(1, [(":method", "POST"), (":path", "/"), (":scheme", "http"),
                                     (":authority", "example")])
        self.exchange()

    def exchange(self) -> None:
        """Client bytes to the server (dispatched to the body), server bytes to the client."""
        for event in self.server.receive_data(self.client.data_to_send()):
            if isinstance(event, h2.events.RequestReceived):
                self.body = ex.RequestBody(self.server, event.stream_id)
            elif isinstance(event, h2.events.DataReceived):
                self.body.feed(event.data, event.flow_controlled_length)
            elif isinstance(event, h2.events.StreamEnded):
                self.body.end()
        self.client.receive_data(self.server.data_to_send())

    def send(self, total: int, *, end: bool = False) -> int:
        """The client sends what its window allows, up to ``total`` bytes; how many it sent."""
        sent = 0
        while sent < total and (window := self.client.local_flow_control_window(1)):
            size = min(window, total - sent, self.client.max_outbound_frame_size)
            piece = bytes([len(self.sent) % 251]) * size
            self.client.send_data(1, piece, end_stream=end and sent + size == total)
            self.sent += piece
            sent += size
        if end and total == 0:
            self.client.end_stream(1)
        self.exchange()
        return sent

    def read(self) -> dict[str, Any]:
        """The app's next ``receive()``, then the server's bytes go to the client."""
        message: dict[str, Any] = asyncio.run(asyncio.wait_for(self.body.receive(), 2.0))
        self.client.receive_data(self.server.data_to_send())
        assert message["type"] == "http.request", message
        return message


def test_an_app_that_reads_nothing_holds_the_client_to_one_window() -> None:
    pair = Pair()
    assert pair.send(1_000_000) == WINDOW
    assert pair.client.local_flow_control_window(1) == 0, (
        "the server gave credit back before the app read anything")
    assert pair.send(1_000_000) == 0  # still shut: nothing read, nothing granted


def test_reading_gives_the_credit_back() -> None:
    pair = Pair()
    pair.send(WINDOW)
    got = bytearray()
    while len(got) < WINDOW:
        message = pair.read()
        assert message["more_body"] is True
        got += message["body"]
    assert bytes(got) == bytes(pair.sent)
    # h2 batches WINDOW_UPDATEs (it waits for a quarter of the window's worth of
    # acknowledged bytes), so up to one 16 KB frame's credit may still be pending.
    assert pair.client.local_flow_control_window(1) >= WINDOW - 16384, (
        "after the app read everything, the client's window should be open again")


def test_the_body_arrives_whole_in_order_while_the_app_keeps_up() -> None:
    pair = Pair()
    total, got, more = 300_000, bytearray(), True
    left = total
    while more:
        if left:
            left -= pair.send(left, end=True)
        message = pair.read()
        got += message["body"]
        more = message["more_body"]
        assert len(pair.sent) - len(got) <= WINDOW, "more than one window buffered"
    assert left == 0 and bytes(got) == bytes(pair.sent) and len(got) == total


def test_receive_waits_for_data_then_ends_with_more_body_false() -> None:
    pair = Pair()

    async def scenario() -> list[dict[str, Any]]:
        first = asyncio.ensure_future(pair.body.receive())
        await asyncio.sleep(0)
        assert not first.done(), "receive() returned before any DATA arrived"
        pair.send(10, end=True)
        return [await asyncio.wait_for(first, 2.0)]

    messages = asyncio.run(scenario())
    assert messages[0]["body"] == bytes(pair.sent) and messages[0]["more_body"] is False


def test_an_empty_body_is_one_message() -> None:
    pair = Pair()
    pair.send(0, end=True)
    assert pair.read() == {"type": "http.request", "body": b"", "more_body": False}
