"""The handler of the container tests' sleeper agent: work that is still running when ``docker stop`` comes."""

from __future__ import annotations

import asyncio
from typing import Any


async def sleep(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    seconds = float(input.get("seconds", 1))
    await ctx.emit_status("sleeping")
    await asyncio.sleep(seconds)
    return {"slept": seconds}
