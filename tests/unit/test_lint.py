"""The tree is ruff clean (lint and format), with the ruff version the dev extras pin: a commit that is not
fails the suite, not a later reader. mypy (``mypy --strict shared`` and ``mypy tests``) is run by hand: its
verdict depends on pydantic's plugin and every library's stubs, which move without the repo moving."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("args", [["check", "--no-cache", "."], ["format", "--check", "--no-cache", "."]])
def test_ruff(args: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"ruff {' '.join(args)}:\n{done.stdout}{done.stderr}"
