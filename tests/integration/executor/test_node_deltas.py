"""Token deltas of built-in model nodes reach a workflow's streaming caller (``streaming_enabled``).

Real NATS + Valkey, the executor, the built-in agents and the real ``openai`` client against the fake server
(which streams its answer in small chunks).
"""

from __future__ import annotations

import json
from typing import Any

from a2amesh.bus.nats import Bus, Received
from a2amesh.client import Client
from a2amesh.protocol import TaskState
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.support.waiting import within

STREAMED = """
name: streamed
streamingEnabled: true
nodes:
  - {id: write, type: llm, messages: "{{workflow.input.text}}"}
output_mapping: {text: "{{write.output.text}}"}
"""

QUIET = """
name: quiet
nodes:
  - {id: write, type: llm, messages: "{{workflow.input.text}}"}
output_mapping: {text: "{{write.output.text}}"}
"""


async def test_llm_node_deltas_reach_a_streaming_caller_before_the_final(
    builtins: Any, executor: Any, client: Client, bus: Bus, fake_llm: FakeOpenAIServer
) -> None:
    """A streaming caller of a workflow with streamingEnabled hears the llm node's text as deltas of the
    workflow's task, in order, before the final task, which holds the whole text; without streamingEnabled
    (or for a plain caller) no delta is sent and the model is not asked to stream."""
    text = "".join(f"word{i} " for i in range(40))
    order: list[str] = []
    deltas: list[dict[str, Any]] = []

    async def on_delta(msg: Received) -> None:
        deltas.append(json.loads(msg.data))
        order.append("delta")

    await bus.subscribe(bus.subjects.delta(client.instance, "*", "*"), on_delta)
    await builtins(fake_llm.base_url)
    await executor({"streamed": STREAMED, "quiet": QUIET})
    fake_llm.script(Reply(text, chunk_size=3, chunk_delay=0.004))

    async def follow() -> list[Any]:
        events = []
        async for ev in client.stream("streamed", {"text": "write"}):
            events.append(ev)
            order.append("event")
        return events

    events = await within(follow(), 30, "the streamed workflow's final")
    first = events[0].task
    assert first is not None, events[0]
    task_id = first.id
    assert fake_llm.requests[0].get("stream") is True
    assert deltas, "no delta reached the streaming caller"
    assert "".join(d["text"] for d in deltas) == text
    assert [d["index"] for d in deltas] == list(range(len(deltas)))
    assert {d["taskId"] for d in deltas} == {task_id}
    assert order.index("delta") < len(order) - 1 - order[::-1].index("event"), order
    whole = await within(client.get_task("streamed", task_id), 10, "the workflow's task")
    assert whole.status.state == TaskState.COMPLETED, whole.status
    assert whole.output() == {"text": text}

    count = len(deltas)
    fake_llm.script(Reply("plain answer", chunk_size=3), Reply("quiet answer", chunk_size=3))
    task = await within(client.send("streamed", {"text": "again"}), 30, "a plain caller's answer")
    assert task.output() == {"text": "plain answer"}
    quiet = [ev async for ev in client.stream("quiet", {"text": "hush"})]
    assert quiet
    await bus.flush()
    assert len(deltas) == count, deltas[count:]
    assert [bool(r.get("stream")) for r in fake_llm.requests[1:]] == [False, False]
