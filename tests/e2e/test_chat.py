"""The seed's own 2nChat out of the box, and ``a2amesh chat`` (issue 37): ``up`` serves workflows/2nchat.json
unchanged with the shipped router and workers against any OpenAI-compatible endpoint (here the fake one),
says what to set without one, and ``chat`` keeps a conversation by contextId at the prompt."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.errors import InputRequired
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.support_chat import ANSWERS, GREETING, support_chat
from tests.support.processes import REPO, process_env
from tests.support.waiting import eventually

TWO_N_CHAT = ("2nchat_router.yaml", "2nchat_rc2.yaml", "2nchat_dm2.yaml", "2nchat_2n.yaml")


async def chat(cwd: Path, env: dict[str, str], target: str, *lines: str, timeout: float = 90) -> tuple[int, str, str]:
    """``a2amesh chat TARGET`` with ``lines`` typed, then the end of input (Ctrl-D)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "a2amesh", "chat", target, cwd=str(cwd), env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate("".join(f"{line}\n" for line in lines).encode()), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"a2amesh chat {target} did not finish within {timeout}s") from None
    return proc.returncode or 0, out.decode(), err.decode()


class Up:
    """``a2amesh up`` over a folder of agents and one of workflows, as a user runs it in a fresh folder."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.tmp, self.env = tmp, env
        self.lines: list[str] = []
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> str:
        """Start it; its output up to "Ctrl-C stops it."."""
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "a2amesh", "up", "--agents", str(self.tmp / "agents"), "--workflows",
            str(self.tmp / "workflows"), "--no-gateway", "--no-llm-host",
            cwd=str(self.tmp), env=self.env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

        async def ready() -> bool:
            assert self.proc is not None
            assert self.proc.stdout is not None
            line = await asyncio.wait_for(self.proc.stdout.readline(), 60)
            self.lines.append(line.decode())
            assert line, "a2amesh up exited early:\n" + "".join(self.lines)
            return "Ctrl-C stops it." in self.lines[-1]

        await eventually(ready, timeout=90, what="a2amesh up to be ready", interval=0)
        return "".join(self.lines)

    async def stop(self) -> str:
        assert self.proc is not None
        assert self.proc.stdout is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            rest = await asyncio.wait_for(self.proc.stdout.read(), 60)
            await asyncio.wait_for(self.proc.wait(), 30)
        finally:
            if self.proc.returncode is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                await self.proc.wait()
        return "".join(self.lines) + rest.decode()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A fresh folder holding the shipped 2nChat agents and the seed's file, byte for byte."""
    (tmp_path / "agents").mkdir()
    (tmp_path / "workflows").mkdir()
    for name in TWO_N_CHAT:
        (tmp_path / "agents" / name).write_text((REPO / "agent_cards" / name).read_text())
    (tmp_path / "workflows" / "2nchat.json").write_bytes((REPO / "workflows" / "2nchat.json").read_bytes())
    return tmp_path


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "REDIS_", "A2AMESH_", "OPENAI_"))}
    env.update({"A2AMESH_PROFILE": "test", "PYTHONPATH": os.environ.get("PYTHONPATH", ""), **extra})
    return env


@pytest.fixture
async def model() -> AsyncIterator[FakeOpenAIServer]:
    with FakeOpenAIServer(responder=support_chat) as server:
        yield server
    server.check()


async def test_up_serves_the_seeds_2nchat_and_chat_talks_with_it(folder: Path, model: FakeOpenAIServer) -> None:
    env = _env(OPENAI_BASE_URL=model.base_url, A2AMESH_LLM_MODEL="fake-model")
    up = Up(folder, env)
    started = await up.start()
    try:
        assert "not started" not in started, started
        code, out, err = await chat(
            folder, env, "2nChat", "hello", "I want to return my kettle, it is broken", "/new", "hi again"
        )
        assert code == 0, err
        answers = [line for line in out.splitlines() if line.startswith("2nChat> ")]
        assert answers == [f"2nChat> {GREETING}", f"2nChat> {ANSWERS['returns and complaints']}", f"2nChat> {GREETING}"]
        assert re.search(r"… node-uuid-2#\d+ \(agent-uuid-rc2\)", err), err  # the worker that answered, while it worked
        assert "(a new conversation:" in err

        routed = [r for r in model.requests if r["messages"][0]["content"].startswith("You are the front desk")]
        route_tool = next(t for t in routed[1]["tools"] if t["function"]["name"] == "route_to")
        assert route_tool["function"]["parameters"]["properties"]["next"]["enum"] == ["RC2", "DM2", "2N"]
        said = [str(m.get("content")) for m in routed[1]["messages"]]
        assert "hello" in said  # the conversation's first turn came back by its contextId
        assert all("kettle" not in str(m.get("content")) for m in routed[2]["messages"])  # /new forgot it

        # an agent directly: its answer streamed as it is generated
        code, out, err = await chat(folder, env, "agent-uuid-dm2", "where is my parcel?")
        assert code == 0, err
        assert f"agent-uuid-dm2> {ANSWERS['delivery agent']}" in out
        assert model.requests[-1].get("stream") is True
        code, _, err = await chat(folder, env, "nobody")
        assert code == 1
        assert "nobody" in err
    finally:
        log = await up.stop()
    edges = [line for line in log.splitlines() if "workflow.warning" in line and "2nChat" in line]
    assert len(edges) == 1, edges  # one line about the undefined node-uuid-6, not one per edge
    assert "node-uuid-6" in edges[0]


async def test_up_without_an_endpoint_says_what_to_set(folder: Path) -> None:
    up = Up(folder, _env())
    started = await up.start()
    await up.stop()
    line = next(line for line in started.splitlines() if line.startswith("not started"))
    assert line == (
        "not started (LLM agents, no model configured): agent-uuid-2n, agent-uuid-dm2, agent-uuid-rc2, "
        "agent-uuid-router; set OPENAI_BASE_URL (an OpenAI-compatible endpoint, e.g. http://localhost:11434/v1) "
        "and A2AMESH_LLM_MODEL (the model's name at that endpoint)"
    )


async def test_chat_asks_a_question_back_at_the_prompt(
    settings: Settings, agent_host: Any, client: Client, tmp_path: Path
) -> None:
    """An agent that needs more asks at the prompt; the next line answers that task."""
    seen: list[str] = []

    async def desk(data: Any, ctx: Any) -> str:
        text = data.get("text", "") if isinstance(data, dict) else str(data)
        seen.append(ctx.task_id)
        if "A-17" not in text:
            raise InputRequired("Which order number?")
        return "Order A-17 has shipped."

    await agent_host("desk", desk)
    await client.registry.wait_for("desk", 10)
    code, out, err = await chat(tmp_path, process_env(settings), "desk", "where is my order?", "A-17")
    assert code == 0, err
    assert "desk? Which order number?" in out
    assert "desk> Order A-17 has shipped." in out
    assert len(seen) == 2
    assert seen[0] == seen[1]  # the answer went to the task that asked
