"""The ASGI lifespan protocol, run beside any of the toy servers.

The server calls the app once with a ``lifespan`` scope before it accepts connections, sends
``lifespan.startup`` and waits for ``lifespan.startup.complete`` (or ``.failed``); on shutdown
it sends ``lifespan.shutdown`` and waits for ``lifespan.shutdown.complete``. Whatever the app
stores in ``scope["state"]`` during startup is copied into every request scope's ``state``.

Modes (uvicorn's ``--lifespan``): ``on``, a failure is fatal; ``auto``, an app that raises
before startup completes is taken not to support lifespan and the server carries on;
``off``, the app is never called with a lifespan scope.

The waiting is done with anyio's memory object stream and events, so the same class runs on
asyncio (where the task is an asyncio Task) and, given a task group, on trio (toy-anyio-trio).

Spec: ASGI Lifespan Protocol 2.0 (https://asgi.readthedocs.io/en/latest/specs/lifespan.html).
Compare with: uvicorn/lifespan/on.py.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

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
        self._inbox: MemoryObjectSendStream[Message] | None = None  # made in startup()
        self._messages: MemoryObjectReceiveStream[Message] | None = None
        self._startup_done: anyio.Event | None = None
        self._shutdown_done: anyio.Event | None = None
        self._failed_message: str | None = None
        self._error: BaseException | None = None
        self._supported = mode != "off"
        self._task: asyncio.Task[None] | None = None

    async def startup(self, task_group: TaskGroup | None = None) -> None:
        """Start the app's lifespan task (an asyncio Task, or in ``task_group`` when given:
        then it must outlive ``shutdown()``) and wait for its startup to end."""
        if not self._supported:
            return
        self._inbox, self._messages = anyio.create_memory_object_stream[Message](math.inf)
        self._startup_done, self._shutdown_done = anyio.Event(), anyio.Event()
        if task_group is None:
            self._task = asyncio.create_task(self._main())
        else:
            task_group.start_soon(self._main)
        self._inbox.send_nowait({"type": "lifespan.startup"})
        await self._startup_done.wait()
        if self._failed_message is not None:
            message = self._failed_message or "the app reported lifespan.startup.failed"
            raise LifespanFailure(message)
        if self._error is not None and self.mode == "on":
            raise LifespanFailure(f"lifespan startup raised {self._error!r}")

    async def shutdown(self) -> None:
        done = self._shutdown_done
        if not self._supported or self._inbox is None or done is None or done.is_set():
            return
        self._inbox.send_nowait({"type": "lifespan.shutdown"})
        await done.wait()
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
            assert self._startup_done is not None
            if self.mode == "auto" and not self._startup_done.is_set():
                logger.info("ASGI 'lifespan' not supported by the app (%r); carrying on", exc)
                self._supported = False
            else:
                logger.error("exception in the ASGI lifespan task", exc_info=exc)
        finally:
            for stream in (self._inbox, self._messages):  # the app is done: nothing more to say
                if stream is not None:
                    stream.close()
            for event in (self._startup_done, self._shutdown_done):
                if event is not None:
                    event.set()

    # ASGI interface

    async def receive(self) -> Message:
        assert self._messages is not None
        return await self._messages.receive()

    async def send(self, message: Message) -> None:
        kind = message["type"]
        started, stopped = self._startup_done, self._shutdown_done
        assert started is not None and stopped is not None  # made before the app is called
        if kind == "lifespan.startup.complete":
            started.set()
        elif kind == "lifespan.startup.failed":
            self._failed_message = str(message.get("message", ""))
            started.set()
        elif kind == "lifespan.shutdown.complete":
            stopped.set()
        elif kind == "lifespan.shutdown.failed":
            self._failed_message = str(message.get("message", ""))
            stopped.set()
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r} in the lifespan scope")
