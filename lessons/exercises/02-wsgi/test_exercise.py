"""Checks for exercise 2 (a bearer-token WSGI middleware). Run: ``make exercise N=2``.

Tests ``starter.py`` by default; ``EXERCISE_IMPL=solution`` tests the reference solution.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from wsgiref.types import StartResponse, WSGIEnvironment
from wsgiref.util import setup_testing_defaults

import httpx
import pytest

from bench.process import ServerProcess, free_port

IMPL = os.environ.get("EXERCISE_IMPL", "starter")
PATH = Path(__file__).with_name(f"{IMPL}.py")


def load() -> ModuleType:
    """Import ``starter.py`` or ``solution.py`` from this directory as a fresh module."""
    spec = importlib.util.spec_from_file_location(f"exercise_02_{IMPL}", PATH)
    assert spec is not None and spec.loader is not None, f"cannot import {PATH}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class Inner:
    """A WSGI app that records whether it was called."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse
                 ) -> Iterable[bytes]:
        self.calls += 1
        start_response("200 OK", [("Content-Type", "text/plain"), ("X-Inner", "yes")])
        return [b"inner body"]


def call(authorization: str | None) -> tuple[Inner, str, dict[str, str], bytes]:
    """Call ``require_token(Inner(), "s3cret")`` directly; return (inner, status, headers, body)."""
    inner = Inner()
    wrapped = load().require_token(inner, "s3cret")
    environ: dict[str, Any] = {}
    setup_testing_defaults(environ)
    if authorization is not None:
        environ["HTTP_AUTHORIZATION"] = authorization
    seen: list[tuple[str, list[tuple[str, str]]]] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None
                       ) -> Any:
        seen.append((status, headers))
        return lambda data: None

    body = b"".join(wrapped(environ, start_response))
    assert len(seen) == 1, "start_response must be called exactly once"
    status, headers = seen[0]
    return inner, status, {name.lower(): value for name, value in headers}, body


def test_the_right_token_reaches_the_app() -> None:
    inner, status, headers, body = call("Bearer s3cret")
    assert inner.calls == 1, (
        f"the right token got {status!r} and the app was not called: the request's "
        "Authorization header is in environ as HTTP_AUTHORIZATION (PEP 3333: HTTP_ and the "
        "name in upper case, '-' as '_')")
    assert (status, body) == ("200 OK", b"inner body")
    assert headers["x-inner"] == "yes", "the app's own headers must pass through"


def test_the_scheme_is_case_insensitive() -> None:
    inner, status, _, _ = call("bearer s3cret")
    assert (inner.calls, status) == (1, "200 OK")


@pytest.mark.parametrize("authorization", [None, "", "Bearer wrong", "Basic s3cret",
                                           "Bearer", "s3cret", "Bearer s3cret-and-more"])
def test_anything_else_is_401_with_www_authenticate(authorization: str | None) -> None:
    inner, status, headers, body = call(authorization)
    assert status.startswith("401"), f"{authorization!r} got {status}"
    assert headers.get("www-authenticate", "").lower().startswith("bearer")
    assert body, "a 401 should say why in its body"
    assert inner.calls == 0, "the app must not run for a rejected request"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    port = free_port()
    env = {"API_TOKEN": "token-from-env"}
    with ServerProcess([sys.executable, str(PATH), str(port)], port=port, env=env) as proc:
        yield proc


def test_over_http_no_token_is_401(server: ServerProcess) -> None:
    response = httpx.get(f"{server.url}/", timeout=5)
    assert response.status_code == 401
    assert response.headers.get("www-authenticate", "").lower().startswith("bearer")


def test_over_http_the_token_opens_the_door(server: ServerProcess) -> None:
    auth = {"Authorization": "Bearer token-from-env"}
    response = httpx.get(f"{server.url}/inside", headers=auth, timeout=5)
    assert response.status_code == 200, response.text
    assert response.text == "hello from /inside\n"
