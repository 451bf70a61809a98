"""``WorkMsg.kept_alive``: in-progress acks every interval while the block runs, none once it has ended."""

from __future__ import annotations

import asyncio

import pytest

from a2amesh.bus.nats import WorkMsg

INTERVAL = 0.01


class _FakeNatsMsg:
    def __init__(self) -> None:
        self.beats = 0
        self.beaten = asyncio.Event()

    async def in_progress(self) -> None:
        self.beats += 1
        if self.beats >= 2:
            self.beaten.set()


def _work_msg() -> tuple[WorkMsg, _FakeNatsMsg]:
    fake = _FakeNatsMsg()
    msg = WorkMsg.__new__(WorkMsg)
    msg._msg = fake  # type: ignore[assignment]
    msg._done = False
    return msg, fake


async def _quiet_for(seconds: float) -> None:
    done = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_later(seconds, done.set_result, None)
    await done


async def test_beats_while_the_block_runs_and_stops_after() -> None:
    msg, fake = _work_msg()
    async with msg.kept_alive(INTERVAL):
        await asyncio.wait_for(fake.beaten.wait(), 5)
    after = fake.beats
    await _quiet_for(INTERVAL * 5)
    assert fake.beats == after


async def test_an_error_in_the_block_propagates_and_stops_the_beats() -> None:
    msg, fake = _work_msg()

    async def failing() -> None:
        async with msg.kept_alive(INTERVAL):
            await asyncio.wait_for(fake.beaten.wait(), 5)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await failing()
    after = fake.beats
    await _quiet_for(INTERVAL * 5)
    assert fake.beats == after


async def test_a_short_block_sends_nothing() -> None:
    msg, fake = _work_msg()
    async with msg.kept_alive(60):
        pass
    assert fake.beats == 0
