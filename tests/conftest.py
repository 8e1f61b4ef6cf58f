"""Fixtures for the protocol tests of the toy servers (see tests/support/protocol_harness.py),
the order the suite runs in (the ``slow`` tests first), and ``--own-server``
(tests/support/own_server.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import bench  # noqa: F401  (registers bench's baselines in the registry: bare, bjoern, wsgiref)
from tests.support.mock import FakeClockLoop
from tests.support.own_server import add_option
from tests.support.protocol_harness import PROTOCOLS, Harness, fake_loop_fixture, open_connection


def pytest_addoption(parser: pytest.Parser) -> None:
    add_option(parser)  # --own-server: the suites against a server of your own


@pytest.fixture
def fake_loop() -> Iterator[FakeClockLoop]:
    yield from fake_loop_fixture()


@pytest.fixture(params=list(PROTOCOLS), ids=list(PROTOCOLS))
def toy_server(request: pytest.FixtureRequest) -> str:
    """The toy server a protocol test runs against (a per-server file overrides this)."""
    return str(request.param)


@pytest.fixture
def connect(fake_loop: FakeClockLoop, toy_server: str) -> Callable[..., Harness]:
    """``connect(app, **config)``: a new connection to ``toy_server`` serving ``app``."""
    def open_(app: Any, **config: Any) -> Harness:
        return open_connection(fake_loop, toy_server, app, **config)
    return open_


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the ``slow`` tests (whole bench experiments, 10-80 s each) first, the rest in their
    order. ``make test`` splits the suite over two pytest-xdist workers with ``--dist
    worksteal``: each starts with half of the suite in this order, so the first half holds
    the slow tests, and a worker that runs out takes the second half of what the other has
    not started (fast tests, while slow ones remain), so both finish within one test of each
    other; long ones last would leave one worker running them alone at the end. (With
    ``--dist load`` the first worker's first batch, a quarter of its share, held every slow
    test, and the other worker ran out of tests first.)"""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
