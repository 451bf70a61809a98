"""Python tools of the agent-node tests (imported by the built-in agents, in the test process or a child)."""

from __future__ import annotations


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number.
        b: the second number.
    """
    return a + b
