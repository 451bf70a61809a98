"""Other frameworks run from virtualenvs of their own (their a2a-sdk line or their dependency trees cannot share
ours): the virtualenv's Python, and a framework's A2A server as a subprocess on a free loopback port."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

from tests.support.processes import REPO

SCRIPTS = REPO / "tests" / "interop"


def framework_python(variable: str, venv: str, installer: str) -> str:
    """``$variable`` if set, else ``{venv}/bin/python`` in the repository, made by ``.ci/{installer}`` (which CI runs
    in setup-system) when missing."""
    given = os.environ.get(variable)
    if given:
        return given
    python = REPO / venv / "bin" / "python"
    if not python.exists():
        subprocess.run(["sh", str(REPO / ".ci" / installer)], check=True, timeout=1200)
    return str(python)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def serve_script(python: str, script: str, *args: str, log: Path) -> AsyncIterator[str]:
    """Run ``tests/interop/{script} PORT ARGS…`` and yield ``http://127.0.0.1:PORT`` once it listens (30 s at most);
    the process is terminated on leaving."""
    port = free_port()
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            python, str(SCRIPTS / script), str(port), *args, stdout=out, stderr=out
        )
        try:
            for _ in range(300):
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.close()
                    break
                except OSError:
                    if proc.returncode is not None:
                        said = await asyncio.to_thread(log.read_text)
                        raise AssertionError(f"{script} exited {proc.returncode}:\n{said}") from None
                    await asyncio.sleep(0.1)
            else:
                said = await asyncio.to_thread(log.read_text)
                raise AssertionError(f"{script} did not listen within 30 s:\n{said}")
            yield f"http://127.0.0.1:{port}"
        finally:
            if proc.returncode is None:
                proc.terminate()
            await asyncio.wait_for(proc.wait(), 15)
