"""Run the ``a2amesh`` command line in a child process (its logging set-up stays out of the test process)."""

from __future__ import annotations

import asyncio
import os
import sys

from tests.support.processes import REPO


async def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> tuple[int, str, str]:
    """``python -m a2amesh ARGS`` from the repository root with ``env`` added to this environment;
    returns (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "a2amesh",
        *args,
        env={**os.environ, **(env or {})},
        cwd=str(REPO),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"a2amesh {' '.join(args)} did not finish within {timeout:g}s") from None
    return proc.returncode or 0, out.decode(), err.decode()
