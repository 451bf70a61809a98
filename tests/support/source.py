"""The package's source, for the tests that read it rather than import it (layers, task owners, timeouts)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "shared" / "a2amesh"


def modules() -> Iterator[tuple[Path, ast.Module]]:
    """Every module of the package, in path order, with its syntax tree."""
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))
