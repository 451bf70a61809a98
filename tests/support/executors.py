"""The ``executor`` fixture: in-process workflow executors over a folder of definitions, stopped at teardown."""

from __future__ import annotations

import asyncio
import contextlib
import textwrap
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from a2amesh.bus.nats import Bus
from a2amesh.config import Settings
from a2amesh.executor.service import WorkflowExecutor
from a2amesh.store.redis import Redis

ExecutorFactory = Callable[..., Any]


def write_workflows(folder: Path, workflows: dict[str, str]) -> Path:
    """Write ``{file name: YAML text}`` into ``folder`` (dedented); returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in workflows.items():
        filename = name if name.endswith((".yaml", ".yml", ".json")) else f"{name}.yaml"
        (folder / filename).write_text(textwrap.dedent(text))
    return folder


@pytest.fixture
async def executor(bus: Bus, redis: Redis, settings: Settings, tmp_path: Path) -> AsyncIterator[ExecutorFactory]:
    """Start an in-process executor over definitions (a dict of YAML texts, or a folder)."""
    started: list[tuple[WorkflowExecutor, asyncio.Event, asyncio.Task[None]]] = []

    async def start(
        workflows: dict[str, str] | Path, *, reload_interval: float = 0.2, settings_: Settings | None = None
    ) -> WorkflowExecutor:
        folder = (
            workflows if isinstance(workflows, Path) else write_workflows(tmp_path / f"wf{len(started)}", workflows)
        )
        ex = WorkflowExecutor(
            folder, bus=bus, redis=redis, settings=settings_ or settings, reload_interval=reload_interval
        )
        stop = asyncio.Event()
        task = asyncio.create_task(ex.run_until(stop))
        started.append((ex, stop, task))
        waiter = asyncio.create_task(ex.ready.wait())
        done, _ = await asyncio.wait({waiter, task}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            waiter.cancel()
            task.result()
        assert ex.ready.is_set(), "the executor did not become ready within 10s"
        return ex

    yield start
    for _, stop, _ in started:
        stop.set()
    for _, _, task in started:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 20)
