"""The log stream: one write per event-loop turn or per interval, nothing held outside a loop."""

from __future__ import annotations

import asyncio
import io

from a2amesh.logs import BufferedLogStream


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def test_lines_of_one_loop_turn_leave_in_one_write() -> None:
    out = CountingStream()
    stream = BufferedLogStream(out)

    async def main() -> None:
        for i in range(5):
            stream.write(f"line {i}\n")
            stream.flush()  # what structlog's PrintLogger does after every line
        assert out.getvalue() == ""  # held until the end of this turn
        await asyncio.sleep(0)
        assert out.getvalue() == "".join(f"line {i}\n" for i in range(5))
        assert out.writes == 1
        stream.write("next turn\n")
        await asyncio.sleep(0)
        assert out.getvalue().endswith("next turn\n")
        assert out.writes == 2

    asyncio.run(main())


def test_lines_written_outside_a_loop_leave_at_once() -> None:
    out = CountingStream()
    stream = BufferedLogStream(out)
    stream.write("no loop here\n")
    assert out.getvalue() == "no loop here\n"


def test_a_new_loop_drains_lines_a_closed_loop_left() -> None:
    out = CountingStream()
    stream = BufferedLogStream(out)

    async def log_and_stop() -> None:
        stream.write("left behind\n")

    loop = asyncio.new_event_loop()
    loop.run_until_complete(log_and_stop())
    loop.close()  # the scheduled drain may not have run

    async def log_again() -> None:
        stream.write("later\n")
        await asyncio.sleep(0)

    asyncio.run(log_again())
    assert out.getvalue() == "left behind\nlater\n"


def test_drain_writes_what_is_held() -> None:
    out = CountingStream()
    stream = BufferedLogStream(out)

    async def main() -> None:
        stream.write("held\n")
        stream.drain()  # as at interpreter exit
        assert out.getvalue() == "held\n"

    asyncio.run(main())


def test_with_an_interval_the_lines_of_many_turns_leave_together() -> None:
    """interval > 0: lines of several loop turns within the interval leave in one write, once it is over."""

    async def main() -> None:
        written = asyncio.Event()

        class Signalling(CountingStream):
            def write(self, text: str) -> int:
                written.set()
                return super().write(text)

        out = Signalling()
        stream = BufferedLogStream(out, interval=0.05)
        loop = asyncio.get_running_loop()
        started = loop.time()
        for i in range(5):
            stream.write(f"turn {i}\n")
            await asyncio.sleep(0)
        assert out.writes == 0
        await asyncio.wait_for(written.wait(), 5)
        assert loop.time() - started >= 0.04
        assert out.getvalue() == "".join(f"turn {i}\n" for i in range(5))
        assert out.writes == 1

    asyncio.run(main())
