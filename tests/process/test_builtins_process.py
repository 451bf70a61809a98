"""The built-in agents as a real OS process: a SIGKILL between two tool-loop rounds resumes at the last round."""

from __future__ import annotations

import signal
from typing import Any

from a2amesh.client import Client, make_message
from a2amesh.protocol import TaskState
from a2amesh.workflow.dag.nodes import BUILTIN_AGENTS
from tests.fakes.openai_server import FakeOpenAIServer, Reply, ToolCall, Usage
from tests.support.processes import ProcessFactory
from tests.support.waiting import eventually, within

LOOP = """
name: crash_loop
nodes:
  - {id: react, type: tool_loop, tools: [charge]}
output_mapping: "{{react.output}}"
"""


async def start_builtins(processes: ProcessFactory, client: Client, base_url: str) -> Any:
    proc = await processes.start(
        "builtins", "--llm-retries", "0", env={"OPENAI_BASE_URL": base_url, "A2AMESH_LLM_MODEL": "fake-model"}
    )

    async def serving() -> bool:
        assert proc.returncode is None, f"the builtins process exited: {proc.output()[-2000:]}"
        return all(client.registry.get(name) is not None for name in BUILTIN_AGENTS.values())

    await eventually(serving, timeout=20, what="the built-in agents' cards")
    return proc


async def test_sigkill_between_rounds_resumes_without_rerunning_tools(
    processes: ProcessFactory,
    agent_host: Any,
    executor: Any,
    client: Client,
    fake_llm: FakeOpenAIServer,
) -> None:
    """Round 1 runs the tool; the builtins process is SIGKILLed during round 2's model call; a new process
    takes the redelivered task, restores round 1 from the checkpoint and finishes: the tool ran once."""
    charged: list[Any] = []

    async def charge(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        charged.append(input)
        return {"charged": input["amount"]}

    schema = {"type": "object", "required": ["amount"], "properties": {"amount": {"type": "number"}}}
    await agent_host("charge", charge, input_schema=schema)
    fake_llm.script(
        Reply(tool_calls=[ToolCall("charge", {"amount": 5}, id="pay")], usage=Usage(10, 2)),
        Reply("never sent", delay=60),  # round 2 hangs: the process dies meanwhile
        Reply("Charged 5.", usage=Usage(20, 3)),
    )
    first = await start_builtins(processes, client, fake_llm.base_url)
    await executor({"crash_loop": LOOP})
    call = await client.dispatch("crash_loop", make_message(data={"text": "charge me 5"}))
    await within(fake_llm.wait_for_requests_async(2), 20, "round 2's model call")
    assert len(charged) == 1
    first.signal(signal.SIGKILL)
    await first.wait(10)
    await start_builtins(processes, client, fake_llm.base_url)
    task = await within(call.result(), 30, "the workflow's answer after the kill")
    assert task.status.state == TaskState.COMPLETED, task.status
    out = task.output()
    assert (out["text"], out["rounds"], out["stopped_reason"]) == ("Charged 5.", 2, "final_answer")
    assert charged == [{"amount": 5}], "the tool ran again after the crash"
    requests = fake_llm.requests
    assert len(requests) == 3
    resumed = requests[2]["messages"]
    assert [m["role"] for m in resumed] == ["user", "assistant", "tool"]
    assert resumed[2]["tool_call_id"] == "pay"
    assert task.metadata is not None
    assert task.metadata["usage"]["total_tokens"] == 35  # round 1's usage restored from the checkpoint
