"""Checks for exercise 3b (flow control on the way in). Run: ``make exercise N=3b``.

Tests ``starter.py`` by default; ``EXERCISE_IMPL=solution`` tests the reference solution.
The ``Inbox`` is driven first with a fake transport (each check deterministic), then the
upload server runs for real and a 4 MB body is sent to its slow app.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from bench.process import ServerProcess, free_port

IMPL = os.environ.get("EXERCISE_IMPL", "starter")
PATH = Path(__file__).with_name(f"{IMPL}.py")
MAX_READ = 256 * 1024  # the most asyncio's socket transport reads in one go, bytes


def load() -> ModuleType:
    """Import ``starter.py`` or ``solution.py`` from this directory as a fresh module."""
    spec = importlib.util.spec_from_file_location(f"exercise_03b_{IMPL}", PATH)
    assert spec is not None and spec.loader is not None, f"cannot import {PATH}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class FakeTransport:
    """Counts pause_reading and resume_reading calls, like a transport that obeys them."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.closing = False

    def pause_reading(self) -> None:
        self.calls.append("pause_reading")

    def resume_reading(self) -> None:
        self.calls.append("resume_reading")

    def is_closing(self) -> bool:
        return self.closing


def inbox() -> tuple[Any, FakeTransport]:
    transport = FakeTransport()
    return load().Inbox(transport), transport


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=5))


def test_below_the_limit_reading_goes_on() -> None:
    box, transport = inbox()
    box.feed(b"a" * 1000)
    box.feed(b"b" * 1000)
    assert bytes(box.buffer) == b"a" * 1000 + b"b" * 1000, "feed() keeps every byte, in order"
    assert transport.calls == [], "2000 bytes is under HIGH_WATER_LIMIT: do not pause yet"


def test_past_the_limit_reading_pauses_once() -> None:
    box, transport = inbox()
    limit = load().HIGH_WATER_LIMIT
    box.feed(b"x" * limit)
    assert transport.calls == [], "exactly HIGH_WATER_LIMIT bytes is not over the limit"
    box.feed(b"x")
    box.feed(b"x" * 5000)
    assert transport.calls == ["pause_reading"], "pause once, not on every feed past the limit"
    assert box.paused is True


def test_read_takes_everything_and_resumes_reading() -> None:
    box, transport = inbox()
    box.feed(b"x" * 100_000)
    assert run(box.read()) == b"x" * 100_000, "read() returns every buffered byte"
    assert len(box.buffer) == 0, "what read() returned is no longer buffered"
    assert transport.calls == ["pause_reading", "resume_reading"]
    assert box.paused is False, "after resume_reading(), self.paused must say so"
    box.feed(b"y")
    assert run(box.read()) == b"y"
    assert transport.calls == ["pause_reading", "resume_reading"], "resume only if paused"


def test_after_a_resume_the_next_flood_pauses_again() -> None:
    box, transport = inbox()
    flood = b"x" * (load().HIGH_WATER_LIMIT + 1)
    box.feed(flood)
    run(box.read())
    box.feed(flood)
    assert transport.calls == ["pause_reading", "resume_reading", "pause_reading"], (
        f"calls {transport.calls}: after read() resumed, the next flood past the limit must "
        "pause again, or the buffer grows without bound: does read() set self.paused back "
        "to False when it resumes?")


def test_read_waits_for_data_then_wakes() -> None:
    box, _ = inbox()

    async def scenario() -> bytes:
        reader = asyncio.ensure_future(box.read())
        await asyncio.sleep(0)  # let read() start and find the buffer empty
        assert not reader.done(), "read() on an empty inbox must wait, not return b''"
        asyncio.get_running_loop().call_soon(box.feed, b"late")
        return await reader

    assert run(scenario()) == b"late", "feed() must wake a waiting read()"


def test_read_returns_empty_bytes_at_eof() -> None:
    box, _ = inbox()
    box.feed(b"last")
    box.feed_eof()
    assert run(box.read()) == b"last", "bytes before EOF still come first"
    assert run(box.read()) == b"", "then b'' says the body is over"


def test_no_pause_when_the_transport_is_closing() -> None:
    box, transport = inbox()
    transport.closing = True
    box.feed(b"x" * 200_000)
    assert transport.calls == [], "a closing transport cannot be paused: leave it alone"


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    port = free_port()
    with ServerProcess([sys.executable, str(PATH), str(port)], port=port,
                       env={"READ_DELAY": "0.005"}) as proc:
        yield proc


def test_a_4_mb_upload_to_a_slow_app_stays_within_the_limit(server: ServerProcess) -> None:
    size = 4_000_000
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % size)
        sock.sendall(b"\0" * size)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    match = re.search(rb"received (\d+) bytes; reading paused (\d+) times; "
                      rb"at most (\d+) bytes buffered", answer)
    assert match, f"no answer from the upload server: {answer!r}\n{server.log_tail(20)}"
    received, pauses, peak = map(int, match.groups())
    assert received == size
    assert pauses >= 1, "a slow app must make the server pause reading"
    assert peak <= load().HIGH_WATER_LIMIT + MAX_READ, (
        f"the server held {peak} bytes: reading did not pause at the limit")
