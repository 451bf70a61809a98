"""OpenTelemetry traces across real processes: gateway, executor, a Python agent and an LLM agent on the fake model,
each exporting OTLP/HTTP to a receiver in the test that decodes the protobuf they send."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from a2amesh.client import Client
from a2amesh.servers import free_port
from tests.fakes.openai_server import FakeOpenAIServer, Reply, ToolCall, Usage
from tests.support.executors import write_workflows
from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.processes import REPO, Proc, ProcessFactory
from tests.support.waiting import eventually

WORKFLOW = """
name: traced
nodes:
  - {id: stats, type: agent, agent_name: text_stats, input: {text: "{{workflow.input.text}}"}}
  - {id: summary, type: agent, agent_name: traced_writer, input: {words: "{{stats.output.words}}"}}
output_mapping: {summary: "{{summary.output}}", words: "{{stats.output.words}}"}
"""

CLIENT_TRACE = uuid.uuid4().hex
CLIENT_SPAN = uuid.uuid4().hex[:16]

# SERVER, CLIENT, PRODUCER, CONSUMER in OTLP's SpanKind numbering
SERVER, CLIENT, PRODUCER, CONSUMER = 2, 3, 4, 5


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver().start()
    yield receiver
    receiver.stop()


async def start(processes: ProcessFactory, client: Client, name: str, *args: str, env: dict[str, str]) -> Proc:
    proc = await processes.start(*args, env=env)

    def up() -> bool:
        assert proc.returncode is None, f"{args[0]} exited: {proc.output()[-3000:]}"
        return client.registry.get(name) is not None

    await eventually(up, timeout=30, what=f"the card of {name}")
    return proc


def one(spans: list[ReceivedSpan], what: str) -> ReceivedSpan:
    assert len(spans) == 1, f"{what}: {len(spans)} spans: {[(s.name, s.service) for s in spans]}"
    return spans[0]


async def test_one_trace_crosses_gateway_executor_and_agents(
    processes: ProcessFactory, client: Client, fake_llm: FakeOpenAIServer, otlp: OtlpReceiver, tmp_path: Path
) -> None:
    """A workflow of a Python agent and an LLM agent (whose model calls the Python agent as a tool), called through
    the gateway with a caller's traceparent: every process's spans are one trace, each parented across processes."""
    fake_llm.script(
        Reply(tool_calls=[ToolCall("text_stats", {"text": "one two"})], usage=Usage(11, 4)),
        Reply(tool_calls=[ToolCall("save_artifact", {"name": "out.json", "content": {"ok": 1}})], usage=Usage(15, 5)),
        Reply("«result:artifact=out.json status=success»", usage=Usage(20, 6)),
    )
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OPENAI_BASE_URL": fake_llm.base_url,
        "PYTHONPATH": os.pathsep.join([str(REPO / "agent_cards"), os.environ.get("PYTHONPATH", "")]),
    }
    writer = tmp_path / "traced_writer.yaml"
    writer.write_text(
        yaml.safe_dump(
            {
                "name": "traced_writer",
                "description": "summarises with a peer",
                "llm": {"model": "fake-model"},
                "peers": ["text_stats"],
            }
        )
    )
    await start(processes, client, "text_stats", "agent", str(REPO / "agent_cards" / "text_stats.yaml"), env=env)
    writer_proc = await start(processes, client, "traced_writer", "agent", str(writer), env=env)
    folder = write_workflows(tmp_path / "wf", {"traced": WORKFLOW})
    await start(processes, client, "traced", "executor", str(folder), "--reload-interval", "0.2", env=env)
    port = free_port()
    gateway = await processes.start("gateway", "--port", str(port), env=env)
    url = f"http://127.0.0.1:{port}"

    async with httpx.AsyncClient(timeout=30) as http:

        async def ready() -> bool:
            assert gateway.returncode is None, f"gateway exited: {gateway.output()[-3000:]}"
            try:
                return (await http.get(f"{url}/readyz")).status_code == 200
            except httpx.TransportError:
                return False

        await eventually(ready, timeout=30, what="the gateway to be ready")
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"data": {"text": "a b c"}}]}
            },
        }
        headers = {"A2A-Version": "1.0", "traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}
        answer = (await http.post(f"{url}/agents/traced/", json=body, headers=headers)).json()
    task = answer["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", answer

    # every span exported: each process's last span (a task ends after its reply went out) among them
    def arrived() -> bool:
        return (
            len(otlp.named("task text_stats")) == 2
            and len(otlp.named("task traced_writer")) == 1  # ends after its reply: it may come after the execution
            and len(otlp.named("chat ")) == 3
            and len(otlp.named("execution ")) == 1
            and len(otlp.named("POST ")) == 1
        )

    await eventually(arrived, timeout=30, what="the spans of every process")
    spans = list(otlp.spans)
    assert {s.trace_id for s in spans} == {CLIENT_TRACE}, "every span is in the caller's trace"
    by_id = {s.span_id: s for s in spans}

    def parent(s: ReceivedSpan) -> ReceivedSpan:
        assert s.parent_id in by_id, f"the parent of {s.name} ({s.service}) was not exported"
        return by_id[s.parent_id]

    def ancestors(s: ReceivedSpan) -> list[str]:
        chain = []
        while s.parent_id and s.parent_id != CLIENT_SPAN:
            s = parent(s)
            chain.append(s.name)
        return chain

    request = one(otlp.named("POST /agents/{agent}"), "gateway request")
    assert request.service == "a2amesh-gateway"
    assert request.parent_id == CLIENT_SPAN, "the gateway's span continues the caller's"
    assert request.kind == SERVER
    assert request.attributes["a2amesh.agent"] == "traced"
    assert request.attributes["http.response.status_code"] == 200

    execution = one(otlp.named("execution traced"), "execution")
    assert execution.service == "a2amesh-executor"
    assert request.name in ancestors(execution), "the execution runs under the gateway's request"
    assert execution.attributes["a2amesh.execution.status"] == "completed"

    nodes = {s.attributes["a2amesh.node.id"]: s for s in otlp.named("node ")}
    assert set(nodes) == {"stats", "summary"}
    for node_id, node in nodes.items():
        assert node.parent_id == execution.span_id, f"node {node_id} is a child of its execution"
        assert node.attributes["a2amesh.node.attempt"] == 1
        assert node.attributes["a2amesh.node.status"] == "completed"
        assert node.attributes["a2amesh.node.type"] == "agent"

    # the agents' task spans are children of the node that called them, across the process boundary
    stats_tasks = otlp.named("task text_stats")
    from_node = [t for t in stats_tasks if t.parent_id == nodes["stats"].span_id]
    assert len(from_node) == 1, [t.parent_id for t in stats_tasks]
    assert from_node[0].service == "a2amesh-agent"
    writer_task = one(otlp.named("task traced_writer"), "the LLM agent's task")
    assert writer_task.parent_id == nodes["summary"].span_id
    assert writer_task.kind == CONSUMER
    handler = one(otlp.named("handler traced_writer"), "the LLM agent's handler")
    assert handler.parent_id == writer_task.span_id

    chats = sorted(otlp.named("chat fake-model"), key=lambda s: s.attributes["gen_ai.usage.input_tokens"])
    assert [c.parent_id for c in chats] == [handler.span_id] * 3
    first, second, third = chats
    assert first.kind == CLIENT
    assert first.attributes["gen_ai.operation.name"] == "chat"
    assert first.attributes["gen_ai.request.model"] == "fake-model"
    assert (first.attributes["gen_ai.usage.input_tokens"], first.attributes["gen_ai.usage.output_tokens"]) == (11, 4)
    assert (third.attributes["gen_ai.usage.input_tokens"], third.attributes["gen_ai.usage.output_tokens"]) == (20, 6)
    assert first.attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert second.attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert third.attributes["gen_ai.response.finish_reasons"] == ["stop"]

    # the model's tool call calls text_stats over the mesh: that task is a child of the tool's span
    tool = one(otlp.named("execute_tool text_stats"), "the tool call")
    assert tool.parent_id == handler.span_id
    assert tool.attributes["gen_ai.tool.name"] == "text_stats"
    assert tool.attributes["gen_ai.tool.call.id"]
    [from_tool] = [t for t in stats_tasks if t.parent_id == tool.span_id]
    assert from_tool.attributes["a2amesh.task.state"] == "TASK_STATE_COMPLETED"
    saved = one(otlp.named("execute_tool save_artifact"), "the artifact tool call")
    assert saved.parent_id == handler.span_id

    # the agent's log lines inside a span carry its ids
    lines = [json.loads(line) for line in writer_proc.output().splitlines() if line.startswith("{")]
    [finished] = [line for line in lines if line.get("event") == "task.finished"]
    assert (finished["trace_id"], finished["span_id"]) == (CLIENT_TRACE, writer_task.span_id)
    ready_line = next(line for line in lines if line.get("event") == "agent.ready")
    assert "trace_id" not in ready_line, "a line outside any span carries no trace"
