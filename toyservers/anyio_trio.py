"""toy-anyio-trio: toy-anyio (``toyservers/anyio_server.py``) run by trio instead of asyncio.

The server module is one, written against anyio; this entry point only picks the backend, so
``toyserve APP --server toy-anyio-trio`` runs the same connection tasks, cancel scopes and
task groups on trio's scheduler. ``serve()`` is toy-anyio's: call it inside ``anyio.run(...,
backend="trio")`` (or ``trio.run``) with an ``anyio.Event`` as ``shutdown``.

Deliberately left out: ``--workers`` (the pre-fork supervisor runs its workers on asyncio),
``--loop`` (trio has one scheduler).

Compare with: hypercorn's ``--worker-class trio``.
"""

from __future__ import annotations

from toyservers import anyio_server
from toyservers._types import ASGIApp
from toyservers.anyio_server import serve
from toyservers.config import Config

__all__ = ["run", "serve"]


def run(app: ASGIApp, config: Config) -> None:
    """Block serving ``app`` on trio (``toyserve --server toy-anyio-trio``)."""
    anyio_server.run(app, config, backend="trio")
