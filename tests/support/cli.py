"""Run the ``a2amesh`` command line in a child process (its logging set-up stays out of the test process)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from a2amesh.config import Settings
from tests.support.processes import REPO, process_env


async def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    base_env: dict[str, str] | None = None,
    cwd: Path = REPO,
    timeout: float = 60,
) -> tuple[int, str, str]:
    """``python -m a2amesh ARGS`` in ``cwd`` with ``env`` added to ``base_env`` (this process's environment
    when not given); returns (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "a2amesh",
        *args,
        env={**(os.environ if base_env is None else base_env), **(env or {})},
        cwd=str(cwd),
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


async def mesh_cli(settings: Settings, *args: str, cwd: Path = REPO, timeout: float = 60) -> tuple[int, str, str]:
    """``run_cli`` as a process of the test's mesh (``process_env``: its servers and namespace, nothing else)."""
    return await run_cli(*args, base_env=process_env(settings), cwd=cwd, timeout=timeout)
