"""Tests that need an optional extra: skipped with the reason where the extra is absent, never in CI.

CI installs every extra (`.ci/run`), so there a missing one is an install bug: the import fails the test instead
of skipping it.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

__all__ = ["require_extra"]


def require_extra(module: str, extra: str) -> None:
    """Skip the calling test module unless ``module`` (installed by ``a2amesh[extra]``) can be imported; in CI
    (``CI`` set) fail instead."""
    if importlib.util.find_spec(module) is not None:
        return
    reason = f"needs the {extra!r} extra ({module} is not installed): pip install -e '.[{extra}]'"
    if os.environ.get("CI"):
        raise RuntimeError(f"CI installs every extra, but {reason}")
    pytest.skip(reason, allow_module_level=True)
