"""Agent and executor processes for process tests: spawn, wait for their card, signal, reap."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from a2amesh.config import Settings

REPO = Path(__file__).resolve().parents[2]


def process_env(settings: Settings, **extra: str) -> dict[str, str]:
    """Environment of a child process that joins the test's mesh."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("A2AMESH_", "NATS_", "REDIS_"))}
    env.update(
        {
            "NATS_URL": settings.nats_url or "",
            "REDIS_URL": settings.redis_url.get_secret_value() if settings.redis_url else "",
            "A2AMESH_NAMESPACE": settings.namespace,
            "A2AMESH_PROFILE": "test",
            "A2AMESH_LOG_FORMAT": "json",
            "A2AMESH_SHUTDOWN_GRACE": str(settings.shutdown_grace),
            "PYTHONUNBUFFERED": "1",
            "A2AMESH_REDIS_CLUSTER": "1" if settings.redis_cluster else "0",
            "A2AMESH_REDIS_WAIT_REPLICAS": str(settings.redis_wait_replicas),
            "A2AMESH_REDIS_WAIT_TIMEOUT_MS": str(settings.redis_wait_timeout_ms),
        }
    )
    env.update(extra)
    return env


@dataclass
class Proc:
    """A child process of a test, with its captured output file."""

    argv: list[str]
    log_path: Path
    proc: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.returncode

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    async def wait(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            raise AssertionError(f"process {self.argv[3:]} did not exit within {timeout:g}s") from None

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


@dataclass
class ProcessFactory:
    """Starts processes for one test and kills and reaps every one of them at teardown."""

    settings: Settings
    tmp: Path
    procs: list[Proc] = field(default_factory=list)

    async def start(self, *args: str, env: dict[str, str] | None = None) -> Proc:
        log_path = self.tmp / f"proc-{len(self.procs)}.log"
        argv = [sys.executable, "-m", "a2amesh", *args]
        out = await asyncio.to_thread(open, log_path, "ab")
        with out:
            proc = await asyncio.create_subprocess_exec(
                *argv, env=process_env(self.settings, **(env or {})), stdout=out, stderr=out, cwd=str(REPO)
            )
        p = Proc(argv, log_path, proc)
        self.procs.append(p)
        return p

    async def cleanup(self) -> None:
        for p in self.procs:
            p.signal(signal.SIGKILL)
        for p in self.procs:
            if p.proc is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(p.proc.wait(), 10)


def write_agent(tmp: Path, name: str, handler: str, **fields: object) -> Path:
    """Write an agent YAML for a handler in tests/agents/behaviours.py; returns its path."""
    import yaml

    path = tmp / f"{name}.yaml"
    data: dict[str, object] = {
        "name": name,
        "description": f"test agent {name}",
        "handler": f"tests.agents.behaviours:{handler}",
    }
    data.update(fields)
    path.write_text(yaml.safe_dump(data))
    return path
