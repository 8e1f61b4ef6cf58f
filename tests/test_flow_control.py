"""toyservers.flow_control: read pauses reach the transport once; drain() waits while writing
is paused, and a waiter that is cancelled leaves the others (and later sends) waiting."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.mock import MockTransport
from toyservers.flow_control import FlowControl


def test_read_pause_and_resume_reach_the_transport() -> None:
    transport = MockTransport()
    flow = FlowControl(transport)
    flow.pause_reading()
    flow.pause_reading()
    assert flow.read_paused and transport.reading_paused
    flow.resume_reading()
    assert not flow.read_paused and not transport.reading_paused


def test_drain_returns_at_once_unless_writing_is_paused() -> None:
    async def main() -> None:
        flow = FlowControl(MockTransport())
        await asyncio.wait_for(flow.drain(), 1.0)
        flow.pause_writing()
        waiter = asyncio.ensure_future(flow.drain())
        await asyncio.sleep(0)
        assert not waiter.done()
        flow.resume_writing()
        await asyncio.wait_for(waiter, 1.0)

    asyncio.run(main())


def test_a_cancelled_waiter_does_not_cancel_the_others() -> None:
    async def main() -> None:
        flow = FlowControl(MockTransport())
        flow.pause_writing()
        first = asyncio.ensure_future(flow.drain())
        second = asyncio.ensure_future(flow.drain())
        await asyncio.sleep(0)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        await asyncio.sleep(0)
        assert not second.done()  # still waiting for the client, not cancelled
        with pytest.raises(TimeoutError):  # a send that gives up after a deadline ...
            async with asyncio.timeout(0.01):
                await flow.drain()
        third = asyncio.ensure_future(flow.drain())  # ... and the next send still waits
        await asyncio.sleep(0)
        assert not third.done()
        flow.resume_writing()
        await asyncio.wait_for(asyncio.gather(second, third), 1.0)

    asyncio.run(main())
