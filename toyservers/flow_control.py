"""Backpressure both ways for one connection; the three toy servers share it.

Reading: a server buffers the request body its app has not taken yet. Past
``HIGH_WATER_LIMIT`` bytes it calls ``pause_reading()``, the kernel's receive buffer fills, and
TCP flow control slows the client down; the app's next ``receive()`` calls
``resume_reading()``.

Writing: asyncio calls the protocol's ``pause_writing()`` when the transport's write buffer
goes over its high-water mark (64 KiB by default) and ``resume_writing()`` once it drains below
the low-water mark. The protocol passes both on here, and the app's ``send()`` awaits
``drain()``, so a slow client holds the app back instead of filling the server's memory.

Spec: ASGI HTTP spec 2.4 ("send" may wait: servers apply backpressure); asyncio's
``Protocol.pause_writing``/``resume_writing`` and ``Transport.pause_reading``/``resume_reading``.

Compare with: uvicorn/protocols/http/flow_control.py.
"""

from __future__ import annotations

import asyncio

from toyservers.http1 import HIGH_WATER_LIMIT  # the read side's limit, kept with the HTTP rules

__all__ = ["HIGH_WATER_LIMIT", "FlowControl"]


class FlowControl:
    """The read and write pause state of one connection.

    Attributes:
        read_paused: we asked the transport to stop reading.
        write_paused: the transport's write buffer is over its high-water mark.
    """

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.read_paused = self.write_paused = False
        self._writable: asyncio.Future[None] | None = None  # made only when a send must wait

    # --8<-- [start:write_side]
    async def drain(self) -> None:
        """Return once writing may go on (at once unless writing is paused)."""
        if self.write_paused:
            if self._writable is None:
                self._writable = asyncio.get_running_loop().create_future()
            # shield: a send() cancelled while it waits (asyncio.timeout, a cancelled task)
            # must not cancel the future the other waiters and later sends share.
            await asyncio.shield(self._writable)
    # --8<-- [end:write_side]

    # --8<-- [start:read_side]
    def pause_reading(self) -> None:
        """Stop reading from the socket; nothing to do when paused already or closing."""
        if not self.read_paused and not self.transport.is_closing():
            self.read_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> bool:
        """Read from the socket again, if we paused it; True when reading did resume."""
        if self.read_paused and not self.transport.is_closing():
            self.read_paused = False
            self.transport.resume_reading()
            return True
        return False
    # --8<-- [end:read_side]

    # --8<-- [start:write_signals]
    def pause_writing(self) -> None:
        """From the protocol's ``pause_writing``: make ``drain()`` wait."""
        self.write_paused = True

    def resume_writing(self) -> None:
        """From the protocol's ``resume_writing`` (or ``connection_lost``, to wake a waiting
        ``send``, which then sees the disconnect): let ``drain()`` return."""
        self.write_paused = False
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None
        # --8<-- [end:write_signals]
