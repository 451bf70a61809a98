"""LLM agents against the fake OpenAI server (the real ``openai`` client) over real NATS + Valkey."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from a2amesh.agent.python_agent import PythonAgent
from a2amesh.bus.nats import Bus, Received
from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.protocol import AgentCard, Part, TaskState, codes
from a2amesh.store.artifacts import ArtifactStore
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from tests.fakes.openai_server import FakeOpenAIServer, HttpError, Raw, Reply, ToolCall, Usage
from tests.support.nodes import llm_agent, node_message, node_result
from tests.support.waiting import within

OUT_SCHEMA = {"type": "object", "required": ["total"], "properties": {"total": {"type": "number"}}}
SUM_SCHEMA = {
    "type": "object",
    "required": ["a", "b"],
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
}


def save(content: Any, name: str = "out.json") -> Reply:
    return Reply(tool_calls=[ToolCall("save_artifact", {"name": name, "content": content})])


def embed(name: str = "out.json") -> str:
    return f"Done. «result:artifact={name} status=success»"


def last_user(request: dict[str, Any]) -> str:
    content: str = next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")
    return content


def tool_messages(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


@pytest.fixture
async def start_llm(agent_host: Any, settings: Settings, fake_llm: FakeOpenAIServer) -> Any:
    async def start(name: str = "writer", **kwargs: Any) -> Any:
        return await agent_host(name, runtime=llm_agent(settings, fake_llm.base_url, name, **kwargs))

    return start


async def test_success_first_try(start_llm: Any, client: Client, fake_llm: FakeOpenAIServer) -> None:
    """Save + embed on the first turn: COMPLETED with the artifact's value, attempts 1, usage as reported."""
    fake_llm.script(
        Reply(
            tool_calls=[ToolCall("save_artifact", {"name": "out.json", "content": {"total": 3}})], usage=Usage(11, 4)
        ),
        Reply(embed(), usage=Usage(20, 6)),
    )
    await start_llm()
    msg = node_message({"a": 1, "b": 2}, output_schema=OUT_SCHEMA, suggested_output_name="out.json")
    task = await within(client.send("writer", msg), 20, "the writer's answer")
    assert task.status.state == TaskState.COMPLETED
    assert task.output() == {"total": 3}
    result = node_result(task)
    assert result["status"] == "success"
    assert result["attempts"] == 1
    assert result["output"] == {"total": 3}
    assert result["artifact"]["name"] == "out.json"
    assert result["artifact"]["version"] == 0
    assert f"/{task.id}/out.json?version=0" in result["artifact"]["uri"]
    expected_usage = {"prompt_tokens": 31, "completion_tokens": 10, "total_tokens": 41}
    assert {k: result["usage"][k] for k in expected_usage} == expected_usage
    assert [(c["prompt_tokens"], c["completion_tokens"]) for c in result["usage"]["calls"]] == [(11, 4), (20, 6)]
    assert task.metadata is not None
    assert task.metadata[codes.EXT_USAGE] == result["usage"]
    system = fake_llm.requests[0]["messages"][0]["content"]
    assert 'node "n1" of the workflow "wf"' in system
    assert '"total"' in system
    assert "«result:artifact=out.json status=success»" in system
    assert "«result:status=failure" in system
    user = fake_llm.requests[0]["messages"][1]["content"]
    assert json.loads(user.removeprefix("```json\n").removesuffix("\n```")) == {"a": 1, "b": 2}
    tools = {t["function"]["name"] for t in fake_llm.requests[0]["tools"]}
    assert {"save_artifact", "load_artifact", "list_artifacts"} <= tools


async def test_success_after_missing_embed(start_llm: Any, client: Client, fake_llm: FakeOpenAIServer) -> None:
    """An answer without an embed is retried in the same conversation with feedback saying so; attempts 2."""
    fake_llm.script(save({"total": 1}), "All done!", embed())
    await start_llm()
    task = await client.send("writer", node_message({}, output_schema=OUT_SCHEMA))
    assert task.status.state == TaskState.COMPLETED
    assert node_result(task)["attempts"] == 2
    retry = fake_llm.requests[2]
    assert "no result embed" in last_user(retry)
    assert "attempt 1 of 3" in last_user(retry)
    assert any(m.get("content") == "All done!" for m in retry["messages"]), "the retry must keep the conversation"


async def test_success_after_schema_failure_quotes_json_path(
    start_llm: Any, client: Client, fake_llm: FakeOpenAIServer
) -> None:
    """An output failing its schema is retried with the failing JSON path quoted; the fixed version is the output."""
    fake_llm.script(save({"total": "three"}), embed(), save({"total": 3}), embed())
    await start_llm()
    task = await client.send("writer", node_message({}, output_schema=OUT_SCHEMA))
    assert task.status.state == TaskState.COMPLETED
    assert task.output() == {"total": 3}
    result = node_result(task)
    assert result["attempts"] == 2
    assert result["artifact"]["version"] == 1
    feedback = last_user(fake_llm.requests[2])
    assert "$.total" in feedback
    assert "'three' is not of type 'number'" in feedback


async def test_failure_after_max_retries(start_llm: Any, client: Client, fake_llm: FakeOpenAIServer) -> None:
    """Three answers without a usable embed fail the node with attempts = 3 and the last errors."""
    fake_llm.script("nothing", "still nothing", "«result:artifact=NAME status=success»")
    await start_llm()
    task = await client.send("writer", node_message({}))
    assert task.status.state == TaskState.FAILED
    result = node_result(task)
    assert result["status"] == "failure"
    assert result["attempts"] == 3
    assert "placeholder" in result["error"] or "NAME" in result["error"]
    assert len(fake_llm.requests) == 3


async def test_per_request_and_per_agent_max_retries(
    start_llm: Any, client: Client, fake_llm: FakeOpenAIServer
) -> None:
    """max_retries comes from the node request first, then from the agent definition."""
    fake_llm.script("no embed", "no embed", "no embed", "no embed")
    await start_llm(max_retries=1)
    task = await client.send("writer", node_message({}))
    assert node_result(task)["attempts"] == 2
    task = await client.send("writer", node_message({}, max_retries=0))
    assert node_result(task)["attempts"] == 1
    assert len(fake_llm.requests) == 3


async def test_input_validation_failure_never_calls_model(
    start_llm: Any, client: Client, fake_llm: FakeOpenAIServer
) -> None:
    """Input failing the effective input schema fails at once with its paths; the model gets no request."""
    await start_llm()
    task = await client.send("writer", node_message({"a": "x"}, input_schema=SUM_SCHEMA))
    assert task.status.state == TaskState.FAILED
    result = node_result(task)
    assert result["attempts"] == 0
    assert sorted(e["path"] for e in result["validation_errors"]) == ["$", "$.a"]
    assert fake_llm.requests == []


async def test_explicit_failure_embed_is_not_retried(
    start_llm: Any, client: Client, fake_llm: FakeOpenAIServer
) -> None:
    """«result:status=failure message=…» fails the node at once with that message."""
    fake_llm.script('I cannot. «result:status=failure message="the input has no prices"»')
    await start_llm()
    task = await client.send("writer", node_message({}))
    assert task.status.state == TaskState.FAILED
    result = node_result(task)
    assert result["error"] == "the input has no prices"
    assert result["attempts"] == 1
    assert len(fake_llm.requests) == 1


async def test_artifact_not_found_is_retried(start_llm: Any, client: Client, fake_llm: FakeOpenAIServer) -> None:
    """An embed naming an artifact that was never saved is retried with feedback naming it and what exists."""
    fake_llm.script(
        save({"total": 0}, "draft.json"), embed("final.json"), save({"total": 5}, "final.json"), embed("final.json")
    )
    await start_llm()
    task = await client.send("writer", node_message({}, output_schema=OUT_SCHEMA))
    assert task.output() == {"total": 5}
    feedback = last_user(fake_llm.requests[2])
    assert "'final.json'" in feedback
    assert "no such artifact" in feedback
    assert "draft.json" in feedback


async def test_version_zero_is_a_real_version(start_llm: Any, client: Client, fake_llm: FakeOpenAIServer) -> None:
    """An embed naming :0 loads version 0 even when later versions exist."""
    fake_llm.script(save({"total": 1}), save({"total": "bad"}), "«result:artifact=out.json:v0 status=success»")
    await start_llm()
    task = await client.send("writer", node_message({}, output_schema=OUT_SCHEMA))
    assert task.output() == {"total": 1}
    assert node_result(task)["artifact"]["version"] == 0


async def test_text_artifact_where_object_expected(start_llm: Any, client: Client, fake_llm: FakeOpenAIServer) -> None:
    """Prose saved where the schema expects an object is retried with a clear 'not JSON' message."""
    fake_llm.script(save("the total is three"), embed(), save({"total": 3}), embed())
    await start_llm()
    task = await client.send("writer", node_message({}, output_schema=OUT_SCHEMA))
    assert task.status.state == TaskState.COMPLETED
    assert "not JSON" in last_user(fake_llm.requests[2])
    assert "a JSON object" in last_user(fake_llm.requests[2])


async def test_plain_call_returns_text_without_embed(
    start_llm: Any, client: Client, fake_llm: FakeOpenAIServer
) -> None:
    """Without a node request the answer text (embeds stripped) is the output and no node instructions are sent."""
    fake_llm.script("Hello there. «result:status=success artifact=x.json»")
    await start_llm(llm={"system_prompt": "You greet people."})
    task = await client.send("writer", "hi")
    assert task.status.state == TaskState.COMPLETED
    assert task.output() == "Hello there."
    assert fake_llm.requests[0]["messages"] == [
        {"role": "system", "content": "You greet people."},
        {"role": "user", "content": "hi"},
    ]
    assert task.status.message is None


async def test_tool_arguments_validated_and_errors_returned(
    start_llm: Any, client: Client, fake_llm: FakeOpenAIServer
) -> None:
    """Bad tool arguments and unknown tools go back to the model as errors; the loop carries on."""
    fake_llm.script(
        Reply(
            tool_calls=[
                ToolCall("save_artifact", {"name": "x.json"}),
                ToolCall("load_artifact", "{not json"),
                ToolCall("no_such_tool", {}),
            ]
        ),
        "ok",
    )
    await start_llm()
    task = await client.send("writer", "go")
    assert task.output() == "ok"
    results = tool_messages(fake_llm.requests[1])
    assert results[0].startswith("error: invalid arguments for save_artifact")
    assert "'content' is a required property" in results[0]
    assert results[1].startswith("error: the arguments of load_artifact are not valid JSON")
    assert "no tool named 'no_such_tool'" in results[2]


async def test_max_iterations_reached(start_llm: Any, client: Client, fake_llm: FakeOpenAIServer) -> None:
    """A model that keeps calling tools fails the task after max_iterations rounds with a clear message."""
    fake_llm.script(*(Reply(tool_calls=[ToolCall("list_artifacts", {})]) for _ in range(3)))
    await start_llm(llm={"max_iterations": 3})
    task = await client.send("writer", node_message({}))
    assert task.status.state == TaskState.FAILED
    assert "max_iterations=3" in node_result(task)["error"]
    assert node_result(task)["attempts"] == 1
    assert len(fake_llm.requests) == 3


async def test_endpoint_429_then_success(start_llm: Any, client: Client, fake_llm: FakeOpenAIServer) -> None:
    """HTTP 429 from the endpoint is retried with backoff (honouring Retry-After) and the call then succeeds."""
    fake_llm.script(HttpError(429, "slow down", retry_after=0.01), HttpError(503, retry_after=0.01), "fine")
    await start_llm()
    task = await client.send("writer", "hi")
    assert task.output() == "fine"
    assert len(fake_llm.requests) == 3


async def test_endpoint_errors_after_retries_fail_clearly(
    start_llm: Any, client: Client, fake_llm: FakeOpenAIServer
) -> None:
    """Persistent 5xx answers fail the task after max_http_retries with the status and message."""
    fake_llm.script(*(HttpError(500, "model crashed", retry_after=0.01) for _ in range(2)))
    await start_llm(llm={"max_http_retries": 1})
    task = await client.send("writer", node_message({}))
    assert task.status.state == TaskState.FAILED
    assert "HTTP 500" in node_result(task)["error"]
    assert "model crashed" in node_result(task)["error"]


async def test_guardrail_rejects_before_the_tool_loop(
    start_llm: Any, client: Client, fake_llm: FakeOpenAIServer
) -> None:
    """An out-of-scope request gets the configured answer (REJECTED) and never reaches the tool loop."""
    guard = {"prompt": "Only questions about orders are in scope.", "reject_message": "I only help with orders."}
    fake_llm.script("OUT_OF_SCOPE", "IN_SCOPE", "Your order ships tomorrow.")
    await start_llm(llm={"guardrail": guard})
    rejected = await client.send("writer", "write me a poem")
    assert rejected.status.state == TaskState.REJECTED
    assert rejected.status.message is not None
    assert rejected.status.message.text() == "I only help with orders."
    assert len(fake_llm.requests) == 1
    guard_request = fake_llm.requests[0]
    assert "tools" not in guard_request
    assert "Only questions about orders" in guard_request["messages"][0]["content"]
    allowed = await client.send("writer", "where is order 7?")
    assert allowed.output() == "Your order ships tomorrow."
    assert "tools" in fake_llm.requests[2]
    assert [c["purpose"] for c in (allowed.metadata or {})[codes.EXT_USAGE]["calls"]] == ["guardrail", "chat"]


async def test_guardrail_rejection_of_a_node_call(start_llm: Any, client: Client, fake_llm: FakeOpenAIServer) -> None:
    """A rejected node call reports failure with the reject message in its workflow_node_result."""
    fake_llm.script("OUT_OF_SCOPE")
    await start_llm(llm={"guardrail": {"prompt": "Orders only.", "reject_message": "Orders only, sorry."}})
    task = await client.send("writer", node_message({"q": "poem"}))
    assert task.status.state == TaskState.REJECTED
    assert node_result(task)["error"] == "Orders only, sorry."


async def test_history_per_context(start_llm: Any, client: Client, fake_llm: FakeOpenAIServer) -> None:
    """With history: true the next turn on a contextId sees the previous request and answer; other contexts don't."""
    fake_llm.script("It is 42.", "You asked about the answer.", "Fresh start.")
    await start_llm(llm={"history": True, "system_prompt": "sys"})
    await client.send("writer", make_message("what is the answer?", context_id="conv-1"))
    await client.send("writer", make_message("what did I ask?", context_id="conv-1"))
    await client.send("writer", make_message("hello", context_id="conv-2"))
    assert fake_llm.requests[1]["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "what is the answer?"},
        {"role": "assistant", "content": "It is 42."},
        {"role": "user", "content": "what did I ask?"},
    ]
    assert len(fake_llm.requests[2]["messages"]) == 2


async def test_streaming_status_and_coalesced_deltas(
    start_llm: Any, client: Client, bus: Bus, fake_llm: FakeOpenAIServer
) -> None:
    """A streaming call gets tool_start/tool_end status parts, and text deltas coalesced on the delta subject."""
    text = "".join(f"word{i} " for i in range(60))
    fake_llm.script(Reply(tool_calls=[ToolCall("list_artifacts", {})]), Reply(text, chunk_size=3, chunk_delay=0.004))
    deltas: list[dict[str, Any]] = []

    async def on_delta(msg: Received) -> None:
        deltas.append(json.loads(msg.data))

    await bus.subscribe(bus.subjects.delta(client.instance, "*", "*"), on_delta)
    await start_llm()
    events = [ev async for ev in client.stream("writer", "go")]
    statuses = [
        p.data
        for ev in events
        if ev.status_update is not None and ev.status_update.status.message is not None
        for p in ev.status_update.status.message.parts
        if isinstance(p.data, dict)
    ]
    assert [(s["type"], s["tool"]) for s in statuses] == [
        ("tool_start", "list_artifacts"),
        ("tool_end", "list_artifacts"),
    ]
    assert statuses[1]["ok"] is True
    await bus.flush()
    assert "".join(d["text"] for d in deltas) == text
    assert [d["index"] for d in deltas] == list(range(len(deltas)))
    chunks = len(text) // 3
    assert 1 < len(deltas) < chunks / 2, f"{len(deltas)} deltas for {chunks} chunks: not coalesced"


async def test_concurrent_invocations_are_isolated(
    agent_host: Any, settings: Settings, client: Client, fake_llm: FakeOpenAIServer
) -> None:
    """20 concurrent node calls (10 saving one artifact name) each get their own instructions, schema and output."""

    def respond(body: dict[str, Any]) -> Any:
        messages = body["messages"]
        system, user = messages[0]["content"], messages[1]["content"]
        i = json.loads(user.removeprefix("```json\n").removesuffix("\n```"))["i"]
        name = re.search(r'name "([^"]+)"', system)
        if f"Task number {i}." not in system or f'"const": {i}' not in system or name is None:
            return f'«result:status=failure message="instructions of another invocation leaked into {i}"»'
        if messages[-1]["role"] == "user":
            return Reply(tool_calls=[ToolCall("save_artifact", {"name": name.group(1), "content": {"i": i}})])
        return embed(name.group(1))

    fake_llm.responder = respond
    await agent_host("writer", runtime=llm_agent(settings, fake_llm.base_url, max_concurrency=32))

    async def one(i: int) -> Any:
        schema = {"type": "object", "required": ["i"], "properties": {"i": {"const": i}}}
        name = "shared.json" if i < 10 else f"own{i}.json"
        msg = node_message({"i": i}, output_schema=schema, instruction=f"Task number {i}.", suggested_output_name=name)
        return await client.send("writer", msg)

    tasks = await within(asyncio.gather(*(one(i) for i in range(20))), 60, "20 concurrent node calls")
    for i, task in enumerate(tasks):
        result = node_result(task)
        assert task.status.state == TaskState.COMPLETED, result.get("error")
        assert task.output() == {"i": i}
        assert result["artifact"]["name"] == ("shared.json" if i < 10 else f"own{i}.json")
        assert result["artifact"]["version"] == 0
        assert f"/{task.id}/" in result["artifact"]["uri"]
    assert len({t.id for t in tasks}) == 20


async def test_large_llm_output_goes_to_artifact_url(
    agent_host: Any, settings: Settings, client: Client, fake_llm: FakeOpenAIServer, redis: Redis
) -> None:
    """An LLM node output above the inline threshold is answered by the URL of the model's own artifact."""
    big = {"total": 1, "notes": "n" * 4000}
    fake_llm.script(save(big), embed())
    small = settings.model_copy(update={"inline_threshold": 1000})
    await agent_host("writer", runtime=llm_agent(small, fake_llm.base_url), settings=small)
    task = await client.send("writer", node_message({}, output_schema=OUT_SCHEMA))
    result = node_result(task)
    assert "output" not in result
    part = task.result_part()
    assert part is not None
    assert part.url is not None
    assert part.url == result["artifact"]["uri"]
    assert part.url.endswith("/out.json?version=0")
    assert part.metadata == {"size": result["artifact"]["size"], "sha256": result["artifact"]["sha256"]}
    store = ArtifactStore(redis, Keys(settings.namespace), retention=60, max_bytes=10**6)
    assert (await store.load_uri(part.url)).value == big


def workflow_card_runtime(name: str, handler: Any, *, input_schema: dict[str, Any]) -> PythonAgent:
    """A Python agent whose card says it is a workflow (agent-type and schemas extensions), as an executor's would."""
    from a2amesh.agent.definition import AgentDefinition

    class FakeWorkflow(PythonAgent):
        def card(self, namespace: str) -> AgentCard:
            return self.definition.card(namespace, agent_type="workflow")

    return FakeWorkflow(AgentDefinition(name=name, handler="x:y", input_schema=input_schema), handler)


async def test_peer_agent_as_tool(start_llm: Any, agent_host: Any, client: Client, fake_llm: FakeOpenAIServer) -> None:
    """A peer allowed by peers: is a tool with its input schema; the call goes over the mesh and its output returns."""
    seen: list[Any] = []

    async def calc(input: Any, ctx: Any) -> Any:
        seen.append((input, ctx.context_id))
        return input["a"] + input["b"]

    await agent_host("calc", calc, input_schema=SUM_SCHEMA, description="Adds two integers")
    await agent_host("other", calc)
    fake_llm.script(
        Reply(tool_calls=[ToolCall("calc", {"a": "x", "b": 1})]),
        Reply(tool_calls=[ToolCall("calc", {"a": 2, "b": 3})]),
        "The sum is 5.",
    )
    await start_llm("planner", peers=["ca*"])
    task = await client.send("planner", make_message("add 2 and 3", context_id="conv-9"))
    assert task.output() == "The sum is 5."
    tools = {t["function"]["name"]: t["function"] for t in fake_llm.requests[0]["tools"]}
    assert "other" not in tools
    assert "planner" not in tools
    assert set(tools["calc"]["parameters"]["properties"]) == {"a", "b", "input_artifact"}
    assert "Adds two integers" in tools["calc"]["description"]
    assert tool_messages(fake_llm.requests[1])[0].startswith("error: invalid arguments for calc")
    assert json.loads(tool_messages(fake_llm.requests[2])[1]) == {"status": "completed", "output": 5}
    assert seen == [({"a": 2, "b": 3}, "conv-9")]


async def test_peer_call_depth_is_enforced(
    start_llm: Any, agent_host: Any, client: Client, settings: Settings, fake_llm: FakeOpenAIServer
) -> None:
    """A tool call that would pass max_call_depth is refused with CALL_DEPTH_EXCEEDED, returned to the model."""

    async def calc(input: Any, ctx: Any) -> Any:
        return 0

    await agent_host("calc", calc, input_schema=SUM_SCHEMA)
    fake_llm.script(Reply(tool_calls=[ToolCall("calc", {"a": 1, "b": 1})]), "could not")
    await start_llm("planner", peers=["*"])
    call = await client.dispatch("planner", make_message("go"), call_depth=settings.max_call_depth)
    task = await within(call.result(), 20, "the planner's answer")
    assert task.output() == "could not"
    error = tool_messages(fake_llm.requests[1])[0]
    assert error.startswith(f"error: {codes.CALL_DEPTH_EXCEEDED}")
    assert str(settings.max_call_depth) in error


async def test_workflow_as_tool_both_modes(
    start_llm: Any, agent_host: Any, client: Client, fake_llm: FakeOpenAIServer
) -> None:
    """A workflow peer takes its input schema as parameters, or input_artifact, which really sends the artifact."""
    received: list[tuple[Any, list[str]]] = []

    async def wf(input: Any, ctx: Any) -> Any:
        received.append((input, [p.url for p in ctx.message.parts if p.url]))
        return {"sum": input["a"] + input["b"]}

    await agent_host("wf_sum", runtime=workflow_card_runtime("wf_sum", wf, input_schema=SUM_SCHEMA))
    fake_llm.script(
        Reply(tool_calls=[ToolCall("wf_sum", {"a": 1, "b": 2})]),
        save({"a": 4, "b": 5}, "numbers.json"),
        Reply(tool_calls=[ToolCall("wf_sum", {"input_artifact": "numbers.json"})]),
        "3 and 9",
    )
    await start_llm("planner", peers=["wf_*"])
    task = await client.send("planner", "sum things")
    assert task.output() == "3 and 9"
    spec = next(t["function"] for t in fake_llm.requests[0]["tools"] if t["function"]["name"] == "wf_sum")
    assert "workflow" in spec["description"]
    assert set(spec["parameters"]["properties"]) == {"a", "b", "input_artifact"}
    assert received[0] == ({"a": 1, "b": 2}, [])
    assert received[1][0] == {"a": 4, "b": 5}
    assert len(received[1][1]) == 1
    assert received[1][1][0].startswith("artifact://")
    assert received[1][1][0].endswith("/numbers.json?version=0")
    assert json.loads(tool_messages(fake_llm.requests[3])[-1]) == {"status": "completed", "output": {"sum": 9}}


async def test_workflow_tool_refuses_mixed_or_missing_artifact(
    start_llm: Any, agent_host: Any, client: Client, fake_llm: FakeOpenAIServer
) -> None:
    """input_artifact with other parameters, or naming no artifact, is an error for the model, not a call."""
    calls: list[Any] = []

    async def wf(input: Any, ctx: Any) -> Any:
        calls.append(input)
        return {}

    await agent_host("wf_sum", runtime=workflow_card_runtime("wf_sum", wf, input_schema=SUM_SCHEMA))
    fake_llm.script(
        Reply(
            tool_calls=[
                ToolCall("wf_sum", {"input_artifact": "numbers.json", "a": 1}),
                ToolCall("wf_sum", {"input_artifact": "missing.json"}),
                ToolCall("wf_sum", {"a": 1}),
            ]
        ),
        "gave up",
    )
    await start_llm("planner", peers=["*"])
    await client.send("planner", "go")
    errors = tool_messages(fake_llm.requests[1])
    assert "not both" in errors[0]
    assert "'missing.json'" in errors[1]
    assert "$: 'b' is a required property" in errors[2]
    assert calls == []


async def test_python_tools_from_yaml(
    agent_host: Any, settings: Settings, client: Client, fake_llm: FakeOpenAIServer, tmp_path: Any, monkeypatch: Any
) -> None:
    """Python tools named in llm.tools get schemas from their hints and run with validated arguments."""
    (tmp_path / "shop_tools.py").write_text(
        "def price(sku: str, quantity: int = 1) -> dict:\n"
        '    """Price of a SKU.\n\n    Args:\n        sku: the product code.\n        quantity: how many.\n    """\n'
        "    return {'sku': sku, 'total': 2.5 * quantity}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    fake_llm.script(Reply(tool_calls=[ToolCall("price", {"sku": "A1", "quantity": 4})]), "10 total")
    await agent_host(
        "shop", runtime=llm_agent(settings, fake_llm.base_url, "shop", llm={"tools": ["shop_tools:price"]})
    )
    task = await client.send("shop", "price of 4 A1?")
    assert task.output() == "10 total"
    spec = next(t["function"] for t in fake_llm.requests[0]["tools"] if t["function"]["name"] == "price")
    assert spec["description"] == "Price of a SKU."
    assert spec["parameters"]["properties"]["sku"]["description"] == "the product code."
    assert spec["parameters"]["required"] == ["sku"]
    assert json.loads(tool_messages(fake_llm.requests[1])[0]) == {"sku": "A1", "total": 10.0}


async def test_non_streaming_endpoint(start_llm: Any, client: Client, fake_llm: FakeOpenAIServer) -> None:
    """With stream: false the agent uses plain completions (tool calls and usage included)."""
    fake_llm.script(save({"total": 2}), Reply(embed(), usage=Usage(3, 2)))
    await start_llm(llm={"stream": False})
    task = await client.send("writer", node_message({}, output_schema=OUT_SCHEMA))
    assert task.output() == {"total": 2}
    assert all(not r.get("stream") for r in fake_llm.requests)
    assert node_result(task)["usage"]["calls"][1]["total_tokens"] == 5


async def test_only_streaming_callers_get_streamed_model_calls(
    start_llm: Any, client: Client, fake_llm: FakeOpenAIServer
) -> None:
    """With stream: true the model streams only when a caller reads the deltas; a plain call asks for a whole answer."""
    fake_llm.script(save({"total": 1}), Reply(embed()), "streamed")
    await start_llm()
    task = await client.send("writer", node_message({}, output_schema=OUT_SCHEMA))
    assert task.output() == {"total": 1}
    events = [ev async for ev in client.stream("writer", "go")]
    assert events[-1].status_update is not None
    assert [bool(r.get("stream")) for r in fake_llm.requests] == [False, False, True]


async def test_malformed_model_answer_fails_clearly(start_llm: Any, client: Client, fake_llm: FakeOpenAIServer) -> None:
    """A chat completion that is not the API's JSON fails the task saying so, and the agent keeps serving."""
    fake_llm.script(Raw("{not json"), Raw('{"choices": [{"message": {"tool_calls": [{"function": 7}]}}]}'), "fine")
    await start_llm(llm={"max_http_retries": 0})
    for _ in range(2):
        task = await client.send("writer", node_message({}, max_retries=0))
        assert task.status.state == TaskState.FAILED
        assert "malformed chat completion" in node_result(task)["error"]
    assert (await client.send("writer", "hi")).output() == "fine"


async def test_status_parts_are_typed(start_llm: Any, client: Client, fake_llm: FakeOpenAIServer) -> None:
    """The node result is a DataPart with mediaType application/json (SPEC §4)."""
    fake_llm.script('«result:status=failure message="no"»')
    await start_llm()
    task = await client.send("writer", node_message({}))
    assert task.status.message is not None
    part = next(p for p in task.status.message.parts if p.data is not None)
    assert isinstance(part, Part)
    assert part.media_type == "application/json"


async def test_model_call_timeout_fails_clearly(start_llm: Any, client: Client, fake_llm: FakeOpenAIServer) -> None:
    """A model call slower than llm.timeout fails the task with a message saying what timed out."""
    fake_llm.script(Reply("too late", delay=5))
    await start_llm(llm={"timeout": 0.3, "max_http_retries": 0})
    task = await within(client.send("writer", node_message({})), 10, "the timed-out answer")
    assert task.status.state == TaskState.FAILED
    assert "did not answer within 0.3s" in node_result(task)["error"]


async def test_handed_back_task_resumes_from_checkpoint(
    agent_host: Any,
    settings: Settings,
    client: Client,
    fake_llm: FakeOpenAIServer,
    tmp_path: Any,
    monkeypatch: Any,
) -> None:
    """A task handed back at shutdown after a tool round resumes on another replica without re-running the tool."""
    import sys

    (tmp_path / "resume_tools.py").write_text(
        "CALLS = []\n\ndef record(note: str) -> str:\n    CALLS.append(note)\n    return 'recorded ' + note\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    fake_llm.script(Reply(tool_calls=[ToolCall("record", {"note": "once"})]), Reply("late", delay=30), "finished")
    quick = settings.model_copy(update={"shutdown_grace": 0.1})
    tools = {"tools": ["resume_tools:record"]}
    first = await agent_host(
        "resumer", runtime=llm_agent(quick, fake_llm.base_url, "resumer", llm=tools), settings=quick
    )
    call = await client.dispatch("resumer", make_message("do it"))
    await within(fake_llm.wait_for_requests_async(2), 10, "the model call after the tool round")
    await within(first.shutdown(), 10, "the first replica to hand the task back")
    await agent_host("resumer", runtime=llm_agent(settings, fake_llm.base_url, "resumer", llm=tools))
    task = await within(call.result(), 20, "the resumed answer")
    assert task.output() == "finished"
    assert call.attempt == 2
    assert sys.modules["resume_tools"].CALLS == ["once"]
    assert fake_llm.requests[2]["messages"] == fake_llm.requests[1]["messages"]
    usage = (task.metadata or {})[codes.EXT_USAGE]
    assert len(usage["calls"]) == 2, "usage of the rounds before the hand-back must be kept"
