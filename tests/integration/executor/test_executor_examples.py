"""The example workflows in workflows/ run end to end with the example agents in agent_cards/."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from a2amesh.agent.definition import load_agent_file
from a2amesh.client import Client
from a2amesh.protocol import TaskState
from a2amesh.workflow.dag.nodes import NODE_TYPES
from a2amesh.workflow.loader import LoadedWorkflow, load_file
from tests.fakes.openai_server import FakeOpenAIServer, Reply, ToolCall
from tests.support.waiting import within

REPO = Path(__file__).resolve().parents[3]
AGENTS = REPO / "agent_cards"
WORKFLOWS = REPO / "workflows"

ORDER = {
    "order_id": "A-1",
    "total": 49.5,
    "items": [
        {"sku": "tea", "quantity": 5, "unit_price": 5.5},
        {"sku": "mug", "quantity": 1, "unit_price": 12},
        {"sku": "pot", "quantity": 1, "unit_price": 10},
    ],
}


@pytest.fixture
async def examples(agent_host: Any, executor: Any, client: Client) -> Client:
    sys.path.insert(0, str(AGENTS))
    try:
        for path in sorted(AGENTS.glob("*.yaml")):
            definition = load_agent_file(path)
            if definition.handler is None:
                continue
            module_name, _, attr = definition.handler.partition(":")
            module = __import__(module_name)
            await agent_host(definition.name, getattr(module, attr), input_schema=definition.input_schema)
    finally:
        sys.path.remove(str(AGENTS))
    await executor(WORKFLOWS)
    for name in ("order_pipeline", "notify_customer", "restock_poll"):
        await client.registry.wait_for(name, 10)
    return client


def test_examples_use_every_node_type() -> None:
    """Together the example workflows use every node type."""
    types: set[str] = set()
    for path in WORKFLOWS.glob("*.yaml"):
        for workflow in load_file(path):
            if isinstance(workflow, LoadedWorkflow):
                types.update(node.type for node in workflow.definition.nodes)
    assert types == set(NODE_TYPES)


async def test_order_pipeline_composes_maps_and_switches(examples: Client) -> None:
    """order_pipeline: a map feeding a switch, then a sub-workflow with a fork and a join."""
    task = await within(examples.send("order_pipeline", ORDER), 20, "order_pipeline")
    assert task.status.state == TaskState.COMPLETED, task.status
    out = task.output()
    assert out["valid"] is True
    assert out["tier"] == "bulk"
    assert [line["line_total"] for line in out["lines"]] == [27.5, 12.0, 10.0]
    assert out["notified"] == ["email", "sms"]
    bad = {**ORDER, "total": 1}
    task = await within(examples.send("order_pipeline", bad), 20, "the rejected order")
    assert task.status.state == TaskState.COMPLETED
    assert task.output()["valid"] is False
    assert task.output()["tier"] is None


async def test_restock_poll_loops_until_ready(examples: Client) -> None:
    """restock_poll: the loop stops when the job is ready and the exit handler runs."""
    task = await within(examples.send("restock_poll", {"job": "R-7"}), 20, "restock_poll")
    assert task.output() == {"job": "R-7", "ready": True, "checks": 3, "stopped_reason": "condition_false"}


async def test_support_assistant_in_scope(examples: Client, builtins: Any, fake_llm: FakeOpenAIServer) -> None:
    """Seed 002's assistant: the guardrail lets an order question through, the router checks the order with
    order_validator, and the answer is generated from the router's conversation (history included)."""
    await builtins(fake_llm.base_url)
    order = {"order_id": "A-9", "total": 30, "items": [{"sku": "tea", "quantity": 2, "unit_price": 5}]}
    fake_llm.script(
        '{"in_scope": true, "reason": "an order"}',
        Reply(tool_calls=[ToolCall("order_validator", order, id="v")]),
        "Order A-9 is invalid: the items add up to 10, not 30.",
        "Your order A-9 is not valid: its items total 10, not 30.",
    )
    history = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"}]
    question = {"question": "Is order A-9 (2 tea at 5, total 30) valid?", "history": history}
    task = await within(examples.send("support_assistant", question), 30, "support_assistant")
    assert task.status.state == TaskState.COMPLETED, task.status
    assert task.output() == {"answer": "Your order A-9 is not valid: its items total 10, not 30.", "in_scope": True}
    guard, router, _, generate = fake_llm.requests
    assert [m["content"] for m in guard["messages"][1:]] == ["Hi", "Hello! How can I help?", question["question"]]
    assert {t["function"]["name"] for t in router["tools"]} == {"order_validator", "pricing"}
    tool_result = next(m for m in generate["messages"] if m["role"] == "tool")
    assert '"valid": false' in tool_result["content"]


async def test_support_assistant_out_of_scope(examples: Client, builtins: Any, fake_llm: FakeOpenAIServer) -> None:
    """A request the guardrail refuses is answered by the refuse prompt; the router never runs."""
    await builtins(fake_llm.base_url)
    fake_llm.script('{"in_scope": false, "reason": "weather"}')
    task = await within(examples.send("support_assistant", {"question": "Will it rain?"}), 30, "support_assistant")
    assert task.status.state == TaskState.COMPLETED, task.status
    assert task.output() == {"answer": "I can only help with questions about orders.", "in_scope": False}
    assert len(fake_llm.requests) == 1


async def test_measure_text_runs_one_explicit_tool_round(
    examples: Client, builtins: Any, fake_llm: FakeOpenAIServer
) -> None:
    """llm → tools → llm with the text_stats agent as the tool."""
    await builtins(fake_llm.base_url)
    fake_llm.script(Reply(tool_calls=[ToolCall("text_stats", {"text": "two words"}, id="m")]), "A short text.")
    task = await within(examples.send("measure_text", {"text": "two words"}), 30, "measure_text")
    assert task.status.state == TaskState.COMPLETED, task.status
    out = task.output()
    assert out["description"] == "A short text."
    assert out["measurements"][0]["ok"] is True
    assert '"words": 2' in out["measurements"][0]["content"]


async def test_agent_standard_remembers_between_runs(
    examples: Client, builtins: Any, fake_llm: FakeOpenAIServer
) -> None:
    """Seed 004's standard flow: the first run has no memories, answers with a tool and writes one; the second
    run of the same user recalls it into the system prompt; another user's run recalls nothing."""
    await builtins(fake_llm.base_url)
    fake_llm.script(Reply(tool_calls=[ToolCall("text_stats", {"text": "green tea"})]), "Two words.")
    first = {"text": "How many words in green tea?", "user": "ann"}
    task = await within(examples.send("agent_standard", first), 30, "agent_standard")
    assert task.status.state == TaskState.COMPLETED, task.status
    assert task.output() == {"answer": "Two words.", "rounds": 2, "stopped_reason": "final_answer", "remembered": []}
    assert "You help ann" in fake_llm.requests[0]["messages"][0]["content"]
    fake_llm.script("You asked about green tea.")
    task = await within(examples.send("agent_standard", {"text": "What did I ask about tea?", "user": "ann"}), 30, "2")
    remembered = task.output()["remembered"]
    assert [e["content"] for e in remembered] == ["Asked: How many words in green tea? Answered: Two words."]
    assert remembered[0]["metadata"] == {"rounds": 2}
    assert "Answered: Two words." in fake_llm.requests[-1]["messages"][0]["content"]
    fake_llm.script("Hello.")
    task = await within(examples.send("agent_standard", {"text": "What did I ask about tea?", "user": "bob"}), 30, "3")
    assert task.output()["remembered"] == []


async def test_embed_texts(examples: Client, builtins: Any, fake_llm: FakeOpenAIServer) -> None:
    await builtins(fake_llm.base_url)
    task = await within(examples.send("embed_texts", {"texts": ["a", "b", "c"]}), 30, "embed_texts")
    assert task.status.state == TaskState.COMPLETED, task.status
    assert task.output()["dimensions"] == fake_llm.embedding_dimensions
    assert len(task.output()["embeddings"]) == 3


async def test_ask_docs_and_illustrate(
    examples: Client, builtins: Any, fake_llm: FakeOpenAIServer, redis: Any, settings: Any
) -> None:
    """ask_docs answers from the `docs` store (filtered by source when asked); illustrate draws an image."""
    from a2amesh.builtins.agents import ModelSettings
    from a2amesh.builtins.rag import ingest
    from a2amesh.store.keys import Keys
    from a2amesh.store.memory import MemoryStore

    await builtins(fake_llm.base_url)
    chat = ModelSettings(base_url=fake_llm.base_url, api_key=None, model="fake-model").chat_model()
    documents = [("a.md", "Conversations are serialised by a context lock."), ("b.md", "Cards expire after a TTL.")]
    await ingest(MemoryStore(redis, Keys(settings.namespace)), chat, "docs", documents, model="fake-embedding")
    await chat.aclose()
    fake_llm.script("By a context lock [1].", "Cards expire [1].")
    task = await within(examples.send("ask_docs", {"question": "how are conversations serialised"}), 30, "ask")
    assert task.status.state == TaskState.COMPLETED, task.status
    assert task.output()["answer"] == "By a context lock [1]."
    assert task.output()["passages"][0]["metadata"]["source"] == "a.md"
    task = await within(examples.send("ask_docs", {"question": "conversations", "source": "b.md"}), 30, "ask b")
    assert [p["metadata"]["source"] for p in task.output()["passages"]] == ["b.md"]
    fake_llm.script("A white teapot on a wooden table.")
    task = await within(examples.send("illustrate", {"product": "teapot"}), 30, "illustrate")
    assert task.status.state == TaskState.COMPLETED, task.status
    assert task.output()["image"].startswith("artifact://")
    assert fake_llm.image_requests[0]["prompt"] == "A white teapot on a wooden table."
