"""Checks for exercise 7 (PEP 3333's error rules in a server). Run: ``make exercise N=7``.

Tests ``starter.py`` by default; ``EXERCISE_IMPL=solution`` tests the reference solution.
``run_app`` writes to one end of a socket pair and the test reads the other end, so most
checks need no server; the last two start the program and ask it over HTTP.
"""

from __future__ import annotations

import importlib.util
import io
import os
import socket
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from bench.process import ServerProcess, free_port

IMPL = os.environ.get("EXERCISE_IMPL", "starter")
PATH = Path(__file__).with_name(f"{IMPL}.py")


def load() -> ModuleType:
    """Import ``starter.py`` or ``solution.py`` from this directory as a fresh module."""
    spec = importlib.util.spec_from_file_location(f"exercise_07_{IMPL}", PATH)
    assert spec is not None and spec.loader is not None, f"cannot import {PATH}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ex = load()


class Result:
    """A body iterable that records ``close()``; ``fail_at``: raise instead of that item."""

    def __init__(self, items: list[bytes], fail_at: int | None = None) -> None:
        self.items, self.fail_at, self.closed = items, fail_at, 0

    def __iter__(self) -> Iterator[bytes]:
        for i, item in enumerate(self.items):
            if i == self.fail_at:
                raise ValueError("the app failed while iterating")
            yield item

    def close(self) -> None:
        self.closed += 1


def respond(app: Any) -> tuple[bytes, str]:
    """Run ``run_app(app, environ, sock)``; return (every byte sent, what went to wsgi.errors)."""
    errors = io.StringIO()
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "wsgi.errors": errors,
               "wsgi.input": io.BytesIO(b""), "SERVER_PROTOCOL": "HTTP/1.1"}
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ex.run_app(app, environ, ours)
        ours.shutdown(socket.SHUT_WR)
        theirs.settimeout(5)
        data = b""
        while chunk := theirs.recv(65536):
            data += chunk
    return data, errors.getvalue()


def starting(result: Iterable[bytes], status: str = "200 OK") -> Any:
    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        start_response(status, [("Content-Type", "text/plain")])
        return result
    return app


def test_a_normal_response_is_sent_and_closed() -> None:
    result = Result([b"", b"hello, ", b"world"])
    data, errors = respond(starting(result))
    assert data.startswith(b"HTTP/1.1 200 OK\r\n"), data
    assert data.endswith(b"\r\n\r\nhello, world"), data
    assert result.closed == 1, "close() must be called once the response is sent"
    assert errors == ""


def test_an_empty_body_still_sends_the_head() -> None:
    data, _ = respond(starting([], "204 No Content"))
    assert data.startswith(b"HTTP/1.1 204 No Content\r\n") and data.endswith(b"\r\n\r\n"), data


def test_an_app_that_raises_at_once_gets_a_500() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        raise KeyError("no such user")
    data, errors = respond(app)
    assert data == ex.INTERNAL_ERROR, data
    assert "KeyError" in errors, "the traceback belongs in environ['wsgi.errors']"


def test_an_error_before_the_first_chunk_gets_a_500_and_close() -> None:
    result = Result([b"", b"never sent"], fail_at=1)  # started, but nothing non-empty yet
    data, errors = respond(starting(result))
    assert data == ex.INTERNAL_ERROR, data
    assert result.closed == 1, "close() is called even when iteration raised (PEP 3333)"
    assert "ValueError" in errors


def test_an_error_after_the_head_sends_nothing_more_but_closes() -> None:
    result = Result([b"first part", b"never sent"], fail_at=1)
    data, errors = respond(starting(result))
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and data.endswith(b"first part"), data
    assert b"500" not in data, "too late for a 500: the status line is already out"
    assert result.closed == 1, "close() is called even when iteration raised (PEP 3333)"
    assert "ValueError" in errors


def test_an_app_that_never_calls_start_response_gets_a_500() -> None:
    result = Result([])
    data, _ = respond(lambda environ, start_response: result)
    assert data == ex.INTERNAL_ERROR, data
    assert result.closed == 1, "close() is called however the request ended (PEP 3333)"


def test_exc_info_lets_the_app_replace_its_response_before_the_head() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        try:
            raise TimeoutError("the database is slow")
        except TimeoutError:
            start_response("503 Service Unavailable", [("Retry-After", "1")], sys.exc_info())
        return [b"try again\n"]
    data, errors = respond(app)
    assert data.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), data
    assert data.endswith(b"try again\n") and errors == ""


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    port = free_port()
    with ServerProcess([sys.executable, str(PATH), str(port)], port=port) as proc:
        yield proc


def test_over_http_a_failing_app_is_a_500(server: ServerProcess) -> None:
    assert httpx.get(f"{server.url}/", timeout=5).text == "hello, world\n"
    response = httpx.get(f"{server.url}/boom", timeout=5)
    assert response.status_code == 500


def test_over_http_a_failure_half_way_cuts_the_response(server: ServerProcess) -> None:
    with socket.create_connection((server.host, server.port), timeout=5) as sock:
        sock.sendall(b"GET /half HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and data.endswith(b"hello, "), data
