"""No ``asyncio.wait_for`` in the package: every bounded wait is an ``asyncio.timeout`` block.

On Python 3.11 (the oldest the package supports), ``wait_for`` swallows a cancellation of its caller that arrives in
the loop iteration its own wait ends in: an outer timeout or a stop is then lost, and the caller waits on. That is
how a node waiting for its callee's card outlived the card TTL and was never answered
(tests/integration/test_registry.py). ``asyncio.timeout`` counts cancellations and has no such window.
"""

from __future__ import annotations

import ast

from tests.support.source import PACKAGE, modules


def _wait_fors(tree: ast.Module) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "wait_for" and ast.unparse(node.value) == "asyncio":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "asyncio":
            lines.extend(node.lineno for alias in node.names if alias.name == "wait_for")
    return lines


def test_no_module_bounds_a_wait_with_asyncio_wait_for() -> None:
    found = [f"{path.relative_to(PACKAGE)}:{line}" for path, tree in modules() for line in _wait_fors(tree)]
    assert not found, f"asyncio.wait_for at {found}: use `async with asyncio.timeout(...)` (module docstring)"
