"""A mock transport and a fake clock, so protocol tests need no sockets and no waiting.

``MockTransport`` records what a protocol writes and whether it paused reading or closed.
``FakeClockLoop`` is a real asyncio event loop whose ``time()`` only moves when the test calls
``advance(seconds)``: timers set with ``call_later`` (keep-alive, header deadlines) fire
exactly when the test says, which makes timeouts deterministic.
"""

from __future__ import annotations

import asyncio
from typing import Any


class MockTransport(asyncio.Transport):
    """Collects writes in ``buffer``; ``write_buffer_size`` is what ``get_write_buffer_size`` says.

    Set ``write_buffer_size`` above the protocol's high-water mark and call
    ``protocol.pause_writing()`` to test backpressure on ``send``.
    """

    def __init__(self, peername: tuple[str, int] = ("127.0.0.1", 50000),
                 sockname: tuple[str, int] = ("127.0.0.1", 8000)) -> None:
        super().__init__()
        self.buffer = bytearray()
        self.closed = False
        self.reading_paused = False
        self.write_buffer_size = 0
        self._extra: dict[str, Any] = {"peername": peername, "sockname": sockname}

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.closed, "write after close"
        self.buffer += data

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def take(self) -> bytes:
        """Return and clear everything written so far."""
        data = bytes(self.buffer)
        self.buffer.clear()
        return data

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.reading_paused = True

    def resume_reading(self) -> None:
        self.reading_paused = False

    def is_reading(self) -> bool:
        return not self.reading_paused

    def get_write_buffer_size(self) -> int:
        return self.write_buffer_size

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def can_write_eof(self) -> bool:
        return False


class FakeClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock moves only through ``advance(seconds)``."""

    def __init__(self) -> None:
        super().__init__()
        self._now = 1000.0

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward; timers now due run on the loop's next iteration."""
        self._now += seconds
