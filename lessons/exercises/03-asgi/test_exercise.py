"""Checks for exercise 3 (a Server-Timing ASGI middleware). Run: ``make exercise N=3``.

Tests ``starter.py`` by default; ``EXERCISE_IMPL=solution`` tests the reference solution.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from bench.process import ServerProcess, free_port

IMPL = os.environ.get("EXERCISE_IMPL", "starter")
PATH = Path(__file__).with_name(f"{IMPL}.py")
TIMING = re.compile(rb"app;dur=(\d+\.\d)")


def load() -> ModuleType:
    """Import ``starter.py`` or ``solution.py`` from this directory as a fresh module."""
    spec = importlib.util.spec_from_file_location(f"exercise_03_{IMPL}", PATH)
    assert spec is not None and spec.loader is not None, f"cannot import {PATH}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def inner(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An app that takes at least 50 ms and sends its own headers and a two-part body."""
    await asyncio.sleep(0.05)
    await send({"type": "http.response.start", "status": 201,
                "headers": [(b"content-type", b"text/plain"), (b"x-inner", b"yes")]})
    await send({"type": "http.response.body", "body": b"part 1, ", "more_body": True})
    await send({"type": "http.response.body", "body": b"part 2"})


def drive(scope: dict[str, Any]) -> list[dict[str, Any]]:
    """Call ``server_timing(inner)`` with ``scope``; return the messages it sent."""
    wrapped = load().server_timing(inner)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(asyncio.wait_for(wrapped(scope, receive, send), timeout=5))
    return sent


def http_scope() -> dict[str, Any]:
    return {"type": "http", "method": "GET", "path": "/", "query_string": b"", "headers": []}


def test_the_header_is_added_with_the_duration_in_milliseconds() -> None:
    start = drive(http_scope())[0]
    assert start["type"] == "http.response.start"
    values = [value for name, value in start["headers"] if name == b"server-timing"]
    assert len(values) == 1, f"expected one server-timing header, got {start['headers']}"
    match = TIMING.fullmatch(values[0])
    assert match, f"expected b'app;dur=<ms with one decimal>', got {values[0]!r}"
    # the app slept 50 ms; the clock may round a little, so allow 45
    assert float(match.group(1)) >= 45.0, (
        f"dur={match.group(1).decode()} for an app that took 50 ms: dur is in milliseconds, "
        "measured around the app (time.perf_counter() counts seconds)")


def test_status_other_headers_and_body_pass_through() -> None:
    sent = drive(http_scope())
    assert sent[0]["status"] == 201
    assert (b"x-inner", b"yes") in sent[0]["headers"]
    assert [m["body"] for m in sent[1:]] == [b"part 1, ", b"part 2"]
    assert sent[1]["more_body"] is True


def test_other_scopes_go_straight_to_the_app() -> None:
    seen: list[str] = []

    async def lifespan_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope["type"])
        await send({"type": "lifespan.startup.complete"})

    wrapped = load().server_timing(lifespan_app)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "lifespan.startup"}

    asyncio.run(asyncio.wait_for(wrapped({"type": "lifespan", "state": {}}, receive, send), 5))
    assert seen == ["lifespan"]
    assert sent == [{"type": "lifespan.startup.complete"}]


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    port = free_port()
    with ServerProcess([sys.executable, str(PATH), str(port)], port=port) as proc:
        yield proc


def test_on_uvicorn_the_header_arrives_and_lifespan_still_works(server: ServerProcess) -> None:
    response = httpx.get(f"{server.url}/?ms=20", timeout=5)
    assert response.status_code == 200
    assert response.text == "ready\n", "lifespan must reach the app through the middleware"
    assert response.headers["x-demo"] == "1"
    assert TIMING.fullmatch(response.headers.get("server-timing", "").encode())
