"""Checks for exercise 9 (a per-request deadline from a cancel scope). Run: ``make exercise N=9``.

Tests ``starter.py`` by default; ``EXERCISE_IMPL=solution`` tests the reference solution.
Every check runs twice, on asyncio and on trio: the server's ``handle`` serves a listener on a
free port inside the test's own task group, and the test talks to it over a real socket with
anyio. Every wait is bounded by ``fail_after``; no sleep stands in for synchronisation.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType

import anyio
import anyio.abc
import pytest

IMPL = os.environ.get("EXERCISE_IMPL", "starter")
PATH = Path(__file__).with_name(f"{IMPL}.py")
BACKENDS = ["asyncio", "trio"]
WAIT = 5.0  # seconds: the most any check waits for an answer


def load() -> ModuleType:
    """Import ``starter.py`` or ``solution.py`` from this directory as a fresh module."""
    spec = importlib.util.spec_from_file_location(f"exercise_09_{IMPL}", PATH)
    assert spec is not None and spec.loader is not None, f"cannot import {PATH}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ex = load()
Client = Callable[[anyio.abc.ByteStream], Awaitable[None]]


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Short times for the tests, and an empty record of cut-off apps."""
    monkeypatch.setattr(ex, "REQUEST_SECONDS", 0.3)
    monkeypatch.setattr(ex, "SLOW_SECONDS", 30.0)
    monkeypatch.setattr(ex, "cut_off", [])


def with_server(backend: str, client: Client) -> None:
    """Serve ``ex.handle`` on a free port on ``backend``, run ``client`` on one connection."""
    async def main() -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with listener, anyio.create_task_group() as tasks:
            tasks.start_soon(listener.serve, ex.handle, tasks)
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                await client(stream)
            tasks.cancel_scope.cancel()  # stop the server

    try:
        anyio.run(main, backend=backend)
    except BaseExceptionGroup as group:  # the task group wraps what the client raised
        while isinstance(group, BaseExceptionGroup) and len(group.exceptions) == 1:
            group = group.exceptions[0]
        raise group from None


async def ask(stream: anyio.abc.ByteStream, target: str) -> tuple[int, bytes]:
    """Send ``GET target`` and read one response framed by Content-Length: (status, body)."""
    await stream.send(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = b""
    with anyio.fail_after(WAIT):
        while b"\r\n\r\n" not in data:
            data += await receive(stream, target)
        head, _, body = data.partition(b"\r\n\r\n")
        match = re.search(rb"(?im)^content-length: *(\d+)\r?$", head)
        assert match, f"no Content-Length in the answer to {target}: {head!r}"
        while len(body) < int(match.group(1)):
            body += await receive(stream, target)
    return int(head.split(b" ")[1]), body


async def receive(stream: anyio.abc.ByteStream, target: str) -> bytes:
    try:
        return await stream.receive()
    except anyio.EndOfStream:
        raise AssertionError(
            f"the server closed the connection without answering {target}: did an exception "
            "leave call_app? handle() takes a TimeoutError for its own idle deadline and "
            "closes, so one from anyio.fail_after must be caught inside call_app (or use "
            "anyio.move_on_after, which raises nothing)") from None


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fast_request_gets_the_apps_answer(backend: str) -> None:
    async def client(stream: anyio.abc.ByteStream) -> None:
        assert await ask(stream, "/fast") == (200, b"GET /fast: 0 bytes\n")

    with_server(backend, client)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_slow_app_is_cut_off_with_a_503_at_the_deadline(backend: str) -> None:
    async def client(stream: anyio.abc.ByteStream) -> None:
        started = anyio.current_time()
        status, body = await ask(stream, "/slow")
        took = anyio.current_time() - started
        assert status == 503, f"expected 503 for an app past its deadline, got {status}"
        assert body, "say why in the body"
        assert 0.3 <= took < 0.3 + 2, f"the 503 came after {took:.2f} s; the deadline is 0.3 s"
        assert ex.cut_off == ["/slow"], "the slow app must be cancelled, not left running"

    with_server(backend, client)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_connection_serves_the_next_request_after_a_cut_off(backend: str) -> None:
    async def client(stream: anyio.abc.ByteStream) -> None:
        assert (await ask(stream, "/slow"))[0] == 503
        assert await ask(stream, "/after") == (200, b"GET /after: 0 bytes\n")

    with_server(backend, client)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_deadline_is_per_request_not_per_connection(backend: str) -> None:
    """Four requests of 0.15 s each on one connection: 0.6 s in all, past one deadline."""
    async def client(stream: anyio.abc.ByteStream) -> None:
        ex.SLOW_SECONDS = 0.15
        answers = [await ask(stream, f"/slow/{i}") for i in range(4)]
        assert answers == [(200, f"GET /slow/{i}: 0 bytes\n".encode()) for i in range(4)]
        assert ex.cut_off == []

    with_server(backend, client)
