"""The ASGI lifespan protocol, run beside any of the toy servers.

The server calls the app once with a ``lifespan`` scope before it accepts connections, sends
``lifespan.startup`` and waits for ``lifespan.startup.complete`` (or ``.failed``); on shutdown
it sends ``lifespan.shutdown`` and waits for ``lifespan.shutdown.complete``. Whatever the app
stores in ``scope["state"]`` during startup is copied into every request scope's ``state``.

Modes (uvicorn's ``--lifespan``): ``on``, a failure is fatal; ``auto``, an app that raises
before startup completes is taken not to support lifespan and the server carries on;
``off``, the app is never called with a lifespan scope.

Spec: ASGI Lifespan Protocol 2.0 (https://asgi.readthedocs.io/en/latest/specs/lifespan.html).
Compare with: uvicorn/lifespan/on.py.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from toyservers._types import ASGIApp, Message

logger = logging.getLogger("toyservers.error")


class LifespanFailure(Exception):
    """Startup failed: the app sent ``lifespan.startup.failed``, or raised with lifespan on."""


class Lifespan:
    """Drives one app's lifespan task: ``await startup()`` before serving, ``shutdown()`` after.

    ``state`` is the dict shared with request scopes (ASGI spec: lifespan state).
    Raises LifespanFailure from ``startup()`` when the server must not start.
    """

    def __init__(self, app: ASGIApp, mode: str = "auto") -> None:
        self.app = app
        self.mode = mode
        self.state: dict[str, Any] = {}
        self._queue: asyncio.Queue[Message] = asyncio.Queue()
        self._startup_done = asyncio.Event()
        self._shutdown_done = asyncio.Event()
        self._failed_message: str | None = None
        self._error: BaseException | None = None
        self._supported = mode != "off"
        self._task: asyncio.Task[None] | None = None

    async def startup(self) -> None:
        if not self._supported:
            return
        self._task = asyncio.create_task(self._main())
        await self._queue.put({"type": "lifespan.startup"})
        await self._startup_done.wait()
        if self._failed_message is not None:
            message = self._failed_message or "the app reported lifespan.startup.failed"
            raise LifespanFailure(message)
        if self._error is not None and self.mode == "on":
            raise LifespanFailure(f"lifespan startup raised {self._error!r}")

    async def shutdown(self) -> None:
        if not self._supported or self._task is None or self._task.done():
            return
        await self._queue.put({"type": "lifespan.shutdown"})
        await self._shutdown_done.wait()
        if self._failed_message is not None:
            logger.error("lifespan shutdown failed: %s", self._failed_message)

    async def _main(self) -> None:
        scope = {
            "type": "lifespan",
            "asgi": {"version": "3.0", "spec_version": "2.0"},
            "state": self.state,
        }
        try:
            await self.app(scope, self.receive, self.send)
        except BaseException as exc:  # the app's own errors end lifespan, never the server
            self._error = exc
            if self.mode == "auto" and not self._startup_done.is_set():
                logger.info("ASGI 'lifespan' not supported by the app (%r); carrying on", exc)
                self._supported = False
            else:
                logger.error("exception in the ASGI lifespan task", exc_info=exc)
        finally:
            self._startup_done.set()
            self._shutdown_done.set()

    # ASGI interface

    async def receive(self) -> Message:
        return await self._queue.get()

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "lifespan.startup.complete":
            self._startup_done.set()
        elif kind == "lifespan.startup.failed":
            self._failed_message = str(message.get("message", ""))
            self._startup_done.set()
        elif kind == "lifespan.shutdown.complete":
            self._shutdown_done.set()
        elif kind == "lifespan.shutdown.failed":
            self._failed_message = str(message.get("message", ""))
            self._shutdown_done.set()
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r} in the lifespan scope")
