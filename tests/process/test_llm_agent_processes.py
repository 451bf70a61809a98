"""LLM agents as separate OS processes (``a2amesh agent FILE``) against the fake OpenAI server."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import yaml
from redis.asyncio import Redis

from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.protocol import TaskState, codes
from a2amesh.store.keys import Keys
from tests.fakes.openai_server import FakeOpenAIServer, Reply, ToolCall, Usage
from tests.support.nodes import node_message, node_result
from tests.support.processes import Proc, ProcessFactory
from tests.support.waiting import eventually, within

RECORD_TOOL = '''
from pathlib import Path

LOG = Path(__file__).with_name("record.log")


def record(note: str) -> str:
    """Write a note to the log (a side effect that must happen once)."""
    with LOG.open("a") as f:
        f.write(note + "\\n")
    return f"recorded {note}"
'''


def write_llm_agent(tmp: Path, name: str, **llm: Any) -> Path:
    """An LLM agent YAML in ``tmp`` (no base_url: the process takes it from OPENAI_BASE_URL)."""
    path = tmp / f"{name}.yaml"
    data = {"name": name, "description": f"LLM test agent {name}", "llm": {"model": "fake-model", **llm}}
    path.write_text(yaml.safe_dump(data))
    return path


async def start_agent(processes: ProcessFactory, client: Client, path: Path, name: str, base_url: str) -> Proc:
    proc = await processes.start("agent", str(path), env={"OPENAI_BASE_URL": base_url})

    def up() -> bool:
        assert proc.returncode is None, f"agent process exited: {proc.output()[-2000:]}"
        return client.registry.get(name) is not None

    await eventually(up, timeout=20, what=f"the card of {name}")
    return proc


async def test_llm_agent_process_answers_a_node_call(
    processes: ProcessFactory, client: Client, fake_llm: FakeOpenAIServer, tmp_path: Path
) -> None:
    """An LLM agent started as `a2amesh agent FILE` with OPENAI_BASE_URL serves a node call end to end."""
    fake_llm.script(
        Reply(tool_calls=[ToolCall("save_artifact", {"name": "out.json", "content": {"ok": True}})], usage=Usage(7, 3)),
        Reply("«result:artifact=out.json status=success»", usage=Usage(9, 2)),
    )
    path = write_llm_agent(tmp_path, "proc_writer")
    proc = await start_agent(processes, client, path, "proc_writer", fake_llm.base_url)
    schema = {"type": "object", "required": ["ok"]}
    task = await within(client.send("proc_writer", node_message({"x": 1}, output_schema=schema)), 30, "the answer")
    assert task.status.state == TaskState.COMPLETED
    assert task.output() == {"ok": True}
    result = node_result(task)
    assert result["attempts"] == 1
    assert result["usage"]["prompt_tokens"] == 16
    assert result["usage"]["completion_tokens"] == 5
    assert task.metadata is not None
    assert task.metadata[codes.EXT_USAGE]["total_tokens"] == 21
    proc.signal(signal.SIGTERM)
    assert await proc.wait(30) == 0, proc.output()[-2000:]
    assert "Unclosed" not in proc.output(), proc.output()[-2000:]  # its HTTP connections were closed


async def test_redelivered_task_resumes_from_its_checkpoint(
    processes: ProcessFactory,
    client: Client,
    fake_llm: FakeOpenAIServer,
    tmp_path: Path,
    redis: Redis,
    settings: Settings,
) -> None:
    """SIGKILL after a tool ran: the redelivered task resumes from the checkpointed round; the tool runs once.

    The round's checkpoint is stored before the next model call goes out, so it is there as soon as the
    fake model sees that call (before the kill, however loaded the machine).
    """
    (tmp_path / "record_tool.py").write_text(RECORD_TOOL)
    path = write_llm_agent(tmp_path, "resumer", tools=["record_tool:record"])
    fake_llm.script(
        Reply(tool_calls=[ToolCall("record", {"note": "once"})]),
        Reply("never delivered", delay=60),
        "finished",
    )
    first = await start_agent(processes, client, path, "resumer", fake_llm.base_url)
    call = await client.dispatch("resumer", make_message("do it"), timeout=60)
    await within(fake_llm.wait_for_requests_async(2), 20, "the model call after the tool round")
    first.signal(signal.SIGSTOP)
    raw = await redis.hget(Keys(settings.namespace).task(call.task_id), "checkpoint")
    assert raw, "the tool round was not checkpointed before the next model call"
    assert json.loads(raw)["messages"][-1]["content"] == "recorded once"
    first.signal(signal.SIGKILL)
    await first.wait(10)
    await start_agent(processes, client, path, "resumer", fake_llm.base_url)
    task = await within(call.result(), 30, "the resumed task's answer")
    assert task.status.state == TaskState.COMPLETED
    assert task.output() == "finished"
    assert call.attempt >= 2
    assert (tmp_path / "record.log").read_text().splitlines() == ["once"], "the tool ran again after redelivery"
    requests = fake_llm.requests
    assert len(requests) == 3
    assert requests[2]["messages"] == requests[1]["messages"], "the resumed call must continue the checkpointed round"
    assert requests[2]["messages"][-1] == {"role": "tool", "tool_call_id": "call_1_0", "content": "recorded once"}


async def test_llm_agent_without_endpoint_refuses_to_start(processes: ProcessFactory, tmp_path: Path) -> None:
    """With no OpenAI-compatible endpoint configured the agent exits 2 with one clear line, no traceback."""
    path = write_llm_agent(tmp_path, "no_endpoint")
    proc = await processes.start("agent", str(path), env={"OPENAI_BASE_URL": ""})
    assert await proc.wait(30) == 2
    lines = [line for line in proc.output().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("a2amesh:")]
    assert len(errors) == 1, proc.output()
    assert "llm.base_url" in errors[0]
    assert "OPENAI_BASE_URL" in errors[0]
    assert "Traceback" not in proc.output()
