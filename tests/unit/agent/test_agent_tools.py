"""Tool schemas from Python functions, argument validation, peer tool shapes, schema errors, URIs, prompts."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from pydantic import BaseModel, Field

from a2amesh.agent.definition import AgentDefinition, parse_agent
from a2amesh.agent.llm_agent import LlmAgent, render_input
from a2amesh.agent.llm_client import DeltaCoalescer
from a2amesh.agent.node_handler import NodeRequest, _Invocation, node_instructions, retry_feedback
from a2amesh.agent.tools import Tool, invoke_tool, peer_tool, peer_tools, tool_from_function
from a2amesh.agent.usage import Usage
from a2amesh.config import Settings
from a2amesh.diagnostics import expects_structured, schema_problem, validate
from a2amesh.errors import ArtifactError, ConfigError, ToolError
from a2amesh.store.artifacts import ArtifactScope, format_artifact_uri, parse_artifact_uri


async def lookup(sku: str, quantity: int = 1, express: bool = False) -> dict[str, Any]:
    """Look up a price.

    Args:
        sku: the product code.
        quantity: how many units
            (at least one).
    """
    return {"sku": sku, "quantity": quantity, "express": express}


class Query(BaseModel):
    text: str = Field(description="what to search")
    limit: int = 5


def search(q: Query, ctx: Any) -> list[str]:
    """Search things."""
    return [q.text] * q.limit


def run(tool: Tool, args: Any) -> tuple[bool, str]:
    raw = args if isinstance(args, str) else json.dumps(args)
    outcome = asyncio.run(invoke_tool(tool, raw, None))  # type: ignore[arg-type]
    return outcome.ok, outcome.content


def test_schema_from_type_hints_and_docstring() -> None:
    """Parameters, defaults, required fields and Args descriptions come from the function."""
    tool = tool_from_function(lookup)
    assert tool.name == "lookup"
    assert tool.description == "Look up a price."
    props = tool.parameters["properties"]
    assert props["sku"] == {"type": "string", "title": "Sku", "description": "the product code."}
    assert props["quantity"]["type"] == "integer"
    assert props["quantity"]["default"] == 1
    assert props["quantity"]["description"] == "how many units (at least one)."
    assert tool.parameters["required"] == ["sku"]
    assert tool.spec()["function"]["name"] == "lookup"


def test_tool_arguments_validated_before_running() -> None:
    """Wrong types, unknown fields and bad JSON are returned as errors with paths; the function is not called."""
    tool = tool_from_function(lookup)
    assert run(tool, {"sku": "A", "quantity": 2}) == (True, '{"sku": "A", "quantity": 2, "express": false}')
    ok, text = run(tool, {"sku": 5, "quantity": "x"})
    assert not ok
    assert "$.quantity: 'x' is not of type 'integer'" in text
    assert "$.sku: 5 is not of type 'string'" in text
    ok, text = run(tool, {"sku": "A", "colour": "red"})
    assert not ok
    assert "colour" in text
    ok, text = run(tool, "[1, 2")
    assert not ok
    assert "not valid JSON" in text
    ok, text = run(tool, "[1, 2]")
    assert not ok
    assert "must be a JSON object" in text


def test_pydantic_model_parameter_and_ctx_injection() -> None:
    """A single pydantic-model parameter is the schema; ctx is injected and hidden; plain functions run in a thread."""
    tool = tool_from_function(search)
    assert set(tool.parameters["properties"]) == {"text", "limit"}
    assert "ctx" not in json.dumps(tool.parameters)
    assert run(tool, {"text": "x", "limit": 2}) == (True, '["x", "x"]')


def test_raising_tools_report_errors() -> None:
    """A ToolError's message, or any exception's type and message, goes back to the model."""

    async def picky(x: int) -> int:
        if x < 0:
            raise ToolError("x must be positive")
        raise RuntimeError("boom")

    tool = tool_from_function(picky)
    assert run(tool, {"x": -1}) == (False, "error: x must be positive")
    assert run(tool, {"x": 1}) == (False, "error: picky raised RuntimeError: boom")


def test_long_results_are_cut() -> None:
    """A tool result longer than the cap is cut with a note of the full length."""

    def big() -> str:
        return "y" * 200_000

    ok, text = run(tool_from_function(big), {})
    assert ok
    assert len(text) < 101_000
    assert text.endswith("200000 characters in all)")


def test_unusable_functions_are_config_errors() -> None:
    """*args/**kwargs and bad names are refused at load time with a ConfigError naming the tool."""

    def varargs(*items: str) -> None: ...

    with pytest.raises(ConfigError, match="varargs"):
        tool_from_function(varargs, source="a.yaml")
    with pytest.raises(ConfigError, match="must match"):
        tool_from_function(lookup, name="has space")


def card(name: str, *, agent_type: str = "agent", input_schema: Any = None) -> Any:
    d = AgentDefinition(name=name, handler="m:f", description=f"{name} agent", input_schema=input_schema)
    return d.card("ns", agent_type=agent_type)


def test_peer_tool_shapes() -> None:
    """Object schemas become parameters (required relaxed), others are wrapped, no schema means a message."""
    schema = {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}, "title": "T"}
    obj = peer_tool(card("wf", agent_type="workflow", input_schema=schema))
    assert obj.parameters == {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "input_artifact": obj.parameters["properties"]["input_artifact"]},
    }
    assert "workflow 'wf'" in obj.description
    wrapped = peer_tool(card("lister", input_schema={"type": "array"}))
    assert set(wrapped.parameters["properties"]) == {"input", "input_artifact"}
    text = peer_tool(card("chat"))
    assert set(text.parameters["properties"]) == {"message", "input_artifact"}


def test_peer_filter() -> None:
    """peers: globs select cards; the agent itself and names already taken are left out."""
    cards = [card("me"), card("calc_a"), card("calc_b"), card("save_artifact"), card("other")]
    names = [t.name for t in peer_tools(cards, ["calc_*", "save_*", "me"], self_name="me", taken={"save_artifact"})]
    assert names == ["calc_a", "calc_b"]
    assert [t.name for t in peer_tools(cards, [], self_name="me", taken=set())] == []


def test_validation_paths_and_schema_problems() -> None:
    """Every error has a JSON path; invalid schemas are reported; text vs structured schemas are told apart."""
    schema = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "integer"}}}}
    issues = validate({"items": [1, "two", 3.5]}, schema)
    assert [i.path for i in issues] == ["$.items[1]", "$.items[2]"]
    assert validate({"x": 1}, None) == []
    assert schema_problem({"type": "nope"}) is not None
    assert schema_problem({"type": "object"}) is None
    assert expects_structured({"type": "object"})
    assert expects_structured({"properties": {}})
    assert not expects_structured({"type": ["string", "null"]})
    assert not expects_structured(None)


def test_artifact_uri_round_trip() -> None:
    """URIs follow SPEC §3.5 and parse back; malformed ones are ArtifactErrors."""
    uri = format_artifact_uri("ns", ArtifactScope("c 1", "t/2"), "out.json", 0)
    assert uri == "artifact://ns/c%201/t%2F2/out.json?version=0"
    assert parse_artifact_uri(uri) == ("ns", ArtifactScope("c 1", "t/2"), "out.json", 0)
    assert parse_artifact_uri("artifact://ns/c/t/a.txt")[3] is None
    for bad in ("artifact://ns/c/t", "file:///x", "artifact://ns/c/t/a.txt?version=-1", "artifact://ns//t/a"):
        with pytest.raises(ArtifactError):
            parse_artifact_uri(bad)


def test_node_instructions_and_feedback() -> None:
    """The node prompt holds the node, the instruction, both schemas and the exact embeds; feedback quotes errors."""
    req = NodeRequest.model_validate(
        {"type": "workflow_node_request", "nodeId": "n7", "workflowName": "wf", "instruction": "Sum it."}
    )
    inv = _Invocation(
        ctx=None,  # type: ignore[arg-type]
        node=req,
        input_schema={"type": "object"},
        output_schema={"type": "object", "required": ["sum"]},
        max_retries=2,
        output_name="sum.json",
    )
    text = node_instructions(inv)
    assert 'node "n7" of the workflow "wf"' in text
    assert "Sum it." in text
    assert '"required": [\n    "sum"\n  ]' in text
    assert "«result:artifact=sum.json status=success»" in text
    assert '«result:status=failure message="why, in one sentence"»' in text
    feedback = retry_feedback(["$.sum: 'x' is not of type 'number'"], 1, 3, "sum.json")
    assert "attempt 1 of 3" in feedback
    assert "- $.sum: 'x' is not of type 'number'" in feedback


def test_render_input() -> None:
    """Text inputs are sent as text, anything else as a fenced JSON block."""
    assert render_input({"text": "hi"}) == "hi"
    assert render_input("hi") == "hi"
    assert render_input({"a": 1}) == '```json\n{\n  "a": 1\n}\n```'


def test_usage_accumulates_and_round_trips() -> None:
    """Usage sums calls and survives a checkpoint round trip."""
    u = Usage()
    u.add(model="m", purpose="chat", prompt_tokens=3, completion_tokens=2)
    u.add(model="m", purpose="chat", prompt_tokens=1, completion_tokens=1, total_tokens=5)
    assert (u.prompt_tokens, u.completion_tokens, u.total_tokens) == (4, 3, 10)
    assert Usage.from_json(u.to_json()) == u
    assert not Usage()


def test_delta_coalescer_rate() -> None:
    """Deltas are passed on at most once per interval, and the rest at flush; nothing is lost."""
    sent: list[tuple[float, str]] = []

    async def sink(text: str) -> None:
        sent.append((time.monotonic(), text))

    async def main() -> None:
        c = DeltaCoalescer(sink, interval=0.05)
        for i in range(40):
            await c.feed(f"{i},")
            await asyncio.sleep(0.005)
        await c.flush()

    asyncio.run(main())
    assert "".join(t for _, t in sent) == "".join(f"{i}," for i in range(40))
    gaps = [b[0] - a[0] for a, b in zip(sent, sent[1:-1], strict=False)]
    assert all(g >= 0.049 for g in gaps), gaps
    assert len(sent) < 15


def test_llm_agent_needs_an_endpoint_and_model() -> None:
    """No endpoint (or no model) is a ConfigError naming the setting to use; a configured one builds."""
    d = parse_agent({"name": "x", "llm": {}}, "x.yaml")
    with pytest.raises(ConfigError, match="OPENAI_BASE_URL") as e:
        LlmAgent.from_definition(d, settings=Settings.load(environ={}), base_dir=None, source="x.yaml")
    assert str(e.value).startswith("x.yaml: llm.base_url: ")
    with pytest.raises(ConfigError, match="A2AMESH_LLM_MODEL"):
        LlmAgent.from_definition(
            d, settings=Settings.load(environ={"OPENAI_BASE_URL": "http://h/v1"}), base_dir=None, source="x.yaml"
        )
    keyed = parse_agent({"name": "x", "llm": {"model": "m", "api_key_env": "MY_KEY"}}, "x.yaml")
    env = {"OPENAI_BASE_URL": "http://h/v1"}
    with pytest.raises(ConfigError, match="MY_KEY"):
        LlmAgent.from_definition(keyed, settings=Settings.load(environ=env), base_dir=None, source="x", environ={})
    agent = LlmAgent.from_definition(
        keyed, settings=Settings.load(environ=env), base_dir=None, source="x", environ={"MY_KEY": "k"}
    )
    assert set(agent.tools) == {"save_artifact", "load_artifact", "list_artifacts"}
    assert agent.model.base_url == "http://h/v1"


def test_llm_agent_tool_import_errors(tmp_path: Any) -> None:
    """A tool that cannot be imported, or clashes with a built-in tool, fails at load with the file and field."""
    (tmp_path / "clash.py").write_text("def save_artifact(x: int) -> int:\n    return x\n")
    settings = Settings.load(environ={"OPENAI_BASE_URL": "http://h/v1", "A2AMESH_LLM_MODEL": "m"})
    for ref, match in (("nope_mod:f", "cannot import module"), ("clash:save_artifact", "two tools")):
        d = parse_agent({"name": "x", "llm": {"tools": [ref]}}, "x.yaml")
        with pytest.raises(ConfigError, match=match) as e:
            LlmAgent.from_definition(d, settings=settings, base_dir=tmp_path, source="x.yaml")
        assert e.value.field == "llm.tools"


def test_example_llm_agent_builds() -> None:
    """agent_cards/llm/order_assistant.yaml loads with its tool and refuses to start without an endpoint."""
    from pathlib import Path

    from a2amesh.agent.runtime import build_runtime

    path = Path(__file__).resolve().parents[3] / "agent_cards" / "llm" / "order_assistant.yaml"
    with pytest.raises(ConfigError, match="OPENAI_BASE_URL"):
        build_runtime(path, Settings.load(environ={}))
    runtime = build_runtime(path, Settings.load(environ={"OPENAI_BASE_URL": "http://h/v1", "A2AMESH_LLM_MODEL": "m"}))
    inner = runtime.runtime  # type: ignore[attr-defined]
    assert isinstance(inner, LlmAgent)
    assert "order_status" in inner.tools
    assert inner.tools["order_status"].parameters["required"] == ["order_id"]
    assert inner.definition.peers == ["order_validator", "text_stats"]
