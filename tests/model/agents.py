"""Handlers of the agents the lifecycle model drives as OS processes (``tests/model/test_lifecycle_model.py``).

``m_ask`` asks for input while its latest message says ``ask``; ``m_slow`` takes ``seconds`` to answer. Both
take a little while per turn, so cancels, continues and kills land while they run.
"""

from __future__ import annotations

import asyncio
from typing import Any

from a2amesh.errors import InputRequired


def _seconds(input: Any, default: float) -> float:
    return float(input.get("seconds", default)) if isinstance(input, dict) else default


async def ask(input: Any, ctx: Any) -> Any:
    """INPUT_REQUIRED while the message says ``{"ask": true}``, else COMPLETED with what it was told."""
    await asyncio.sleep(_seconds(input, 0.2))
    if isinstance(input, dict) and input.get("ask"):
        raise InputRequired("one more answer, please")
    return {"answer": input}


async def slow(input: Any, ctx: Any) -> Any:
    """COMPLETED after ``seconds``."""
    seconds = _seconds(input, 0.5)
    await asyncio.sleep(seconds)
    return {"slept": seconds}
