"""The agent node catalogue end to end: prompt, llm, tools and tool_loop nodes run by the built-in agents.

Real NATS + Valkey, the executor, the built-in agents and the real ``openai`` client against the fake
OpenAI-compatible server.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.protocol import TaskState
from a2amesh.store.executions import ExecutionStore
from a2amesh.store.keys import Keys
from a2amesh.store.memory import MemoryStore
from a2amesh.store.redis import Redis
from tests.fakes.openai_server import FakeOpenAIServer, HttpError, Reply, ToolCall, Usage
from tests.support.waiting import within

LOOKUP_SCHEMA = {
    "type": "object",
    "required": ["city"],
    "properties": {"city": {"type": "string"}},
    "additionalProperties": False,
}


def store(redis: Redis, settings: Settings) -> ExecutionStore:
    return ExecutionStore(redis, Keys(settings.namespace), retention=60, lease_ttl=2)


def totals(usage: dict[str, Any] | None) -> tuple[int, int, int]:
    assert usage is not None
    return usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]


CLASSIFY = """
name: classify
agentConfig: {model: fake-model, temperature: 0.3, maxTokens: 50}
nodes:
  - {id: sys, type: prompt, template: "You sort the requests of {{workflow.input.user}}."}
  - id: sort
    type: llm
    depends_on: [sys]
    system: "{{sys.output.text}}"
    messages: "{{workflow.input.question}}"
    output_schema: {type: object, required: [topic], properties: {topic: {type: string}}}
output_mapping: {topic: "{{sort.output.output.topic}}", text: "{{sort.output.text}}"}
"""


async def test_prompt_and_llm_nodes(
    builtins: Any, executor: Any, client: Client, fake_llm: FakeOpenAIServer, redis: Redis, settings: Settings
) -> None:
    """The prompt renders in the engine; the llm node sends system prompt, settings and response_format, and its
    usage lands on the node record and the execution."""
    fake_llm.script(Reply('{"topic": "billing"}', usage=Usage(12, 5)))
    await builtins(fake_llm.base_url)
    await executor({"classify": CLASSIFY})
    task = await within(client.send("classify", {"user": "Ann", "question": "Why was I charged twice?"}), 20, "answer")
    assert task.status.state == TaskState.COMPLETED, task.status
    assert task.output() == {"topic": "billing", "text": '{"topic": "billing"}'}
    (request,) = fake_llm.requests
    assert request["messages"] == [
        {"role": "system", "content": "You sort the requests of Ann."},
        {"role": "user", "content": "Why was I charged twice?"},
    ]
    assert (request["model"], request["temperature"], request["max_tokens"]) == ("fake-model", 0.3, 50)
    assert request["response_format"]["type"] == "json_schema"
    assert request["response_format"]["json_schema"]["schema"]["required"] == ["topic"]
    assert "tools" not in request
    nodes = await store(redis, settings).nodes(task.id)
    assert nodes["sys"]["output"] == {"text": "You sort the requests of Ann."}
    assert not nodes["sys"].get("task_id")  # no agent call for a prompt
    assert totals(nodes["sort"]["usage"]) == (12, 5, 17)
    record = await store(redis, settings).record(task.id)
    assert record is not None
    assert totals(json.loads(record["usage"])) == (12, 5, 17)


TOOLS = """
name: tools_flow
nodes:
  - id: ask
    type: llm
    messages: "{{workflow.input.question}}"
    tools: [lookup, "tests.agents.node_tools:add"]
  - {id: run, type: tools, depends_on: [ask], tools: [lookup, "tests.agents.node_tools:add"], parallel: false}
  - {id: answer, type: llm, depends_on: [run], messages: "{{run.output.messages}}"}
output_mapping: {answer: "{{answer.output.text}}", results: "{{run.output.results}}"}
"""


async def test_tools_node_validates_arguments_and_feeds_errors_back(
    builtins: Any, agent_host: Any, executor: Any, client: Client, fake_llm: FakeOpenAIServer
) -> None:
    """A tools node runs the calls of the llm node: a valid call runs; arguments failing the schema and an
    unknown tool become error results the next llm node reads, and nothing crashes."""
    looked_up: list[Any] = []

    async def lookup(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        looked_up.append(input)
        return {"weather": "rain"}

    await agent_host("lookup", lookup, input_schema=LOOKUP_SCHEMA, description="Weather of a city")
    fake_llm.script(
        Reply(
            tool_calls=[
                ToolCall("lookup", {"city": "Oslo"}, id="c1"),
                ToolCall("add", {"a": "one", "b": 2}, id="c2"),
                ToolCall("nope", {}, id="c3"),
                ToolCall("add", {"a": 1, "b": 2}, id="c4"),
            ]
        ),
        "It rains in Oslo and 1 + 2 = 3.",
    )
    await builtins(fake_llm.base_url)
    await executor({"tools_flow": TOOLS})
    task = await within(client.send("tools_flow", {"question": "weather in Oslo?"}), 20, "answer")
    assert task.status.state == TaskState.COMPLETED, task.status
    out = task.output()
    assert out["answer"] == "It rains in Oslo and 1 + 2 = 3."
    assert looked_up == [{"city": "Oslo"}]
    ok = {r["tool_call_id"]: r["ok"] for r in out["results"]}
    assert ok == {"c1": True, "c2": False, "c3": False, "c4": True}
    first, second = fake_llm.requests
    offered = {t["function"]["name"]: t["function"]["parameters"] for t in first["tools"]}
    assert set(offered) == {"lookup", "add"}
    assert offered["lookup"]["properties"]["city"] == {"type": "string"}
    tool_results = {m["tool_call_id"]: m["content"] for m in second["messages"] if m["role"] == "tool"}
    assert json.loads(tool_results["c1"]) == {"status": "completed", "output": {"weather": "rain"}}
    assert "invalid arguments for add" in tool_results["c2"]
    assert "$.a" in tool_results["c2"]
    assert "there is no tool named 'nope'" in tool_results["c3"]
    assert tool_results["c4"] == "3"
    assert second["messages"][0] == {"role": "user", "content": "weather in Oslo?"}
    assert second["messages"][1]["tool_calls"][0]["function"]["name"] == "lookup"


LOOP = """
name: loop_flow
maxToolIterations: 3
nodes:
  - {id: react, type: tool_loop, system: "Use the tools.", tools: [lookup]}
output_mapping: "{{react.output}}"
"""


async def test_tool_loop_until_final_answer_and_at_its_limit(
    builtins: Any, agent_host: Any, executor: Any, client: Client, fake_llm: FakeOpenAIServer
) -> None:
    """The loop alternates model and tools until a text answer; a model that keeps calling tools is stopped at
    maxToolIterations with stopped_reason max_tool_iterations (each round's tool ran once)."""
    calls: list[str] = []

    async def lookup(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        calls.append(input["city"])
        return {"weather": "sun"}

    await agent_host("lookup", lookup, input_schema=LOOKUP_SCHEMA)
    await builtins(fake_llm.base_url)
    await executor({"loop_flow": LOOP})
    fake_llm.script(
        Reply(tool_calls=[ToolCall("lookup", {"city": "Rome"})], usage=Usage(3, 1)), Reply("Sunny.", usage=Usage(4, 1))
    )
    task = await within(client.send("loop_flow", {"text": "Rome?"}), 20, "first answer")
    assert task.status.state == TaskState.COMPLETED, task.status
    out = task.output()
    assert (out["text"], out["rounds"], out["stopped_reason"], out["tool_call_count"]) == (
        "Sunny.",
        2,
        "final_answer",
        1,
    )
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert fake_llm.requests[0]["messages"][0] == {"role": "system", "content": "Use the tools."}
    assert calls == ["Rome"]
    assert task.metadata is not None
    assert totals(task.metadata["usage"]) == (7, 2, 9)

    fake_llm.script(*(Reply(tool_calls=[ToolCall("lookup", {"city": f"c{i}"})]) for i in range(3)))
    task = await within(client.send("loop_flow", {"text": "again"}), 20, "second answer")
    assert task.status.state == TaskState.COMPLETED, task.status
    out = task.output()
    assert (out["rounds"], out["stopped_reason"], out["tool_call_count"]) == (3, "max_tool_iterations", 3)
    assert calls == ["Rome", "c0", "c1", "c2"]
    assert len(fake_llm.requests) == 5


DOWN = """
name: down_flow
nodes:
  - id: ask
    type: llm
    retry_strategy: {limit: 1, retry_policy: OnFailure, backoff: {duration: 0.2}}
"""


async def test_model_endpoint_down_is_retried_then_a_clear_node_failure(
    builtins: Any, executor: Any, client: Client, fake_llm: FakeOpenAIServer, redis: Redis, settings: Settings
) -> None:
    """HTTP 503s are retried by the client (with backoff) and the node by its retry_strategy, then the node
    fails saying what the endpoint answered."""
    fake_llm.script(*[HttpError(503, "overloaded", retry_after=0.01)] * 4)
    await builtins(fake_llm.base_url, max_retries=1)
    await executor({"down_flow": DOWN})
    task = await within(client.send("down_flow", {"text": "hi"}), 30, "the failure")
    assert task.status.state == TaskState.FAILED
    assert len(fake_llm.requests) == 4  # (1 + 1 HTTP retry) × (1 + 1 node retry)
    nodes = await store(redis, settings).nodes(task.id)
    assert nodes["ask"]["status"] == "failed"
    assert nodes["ask"]["attempt"] == 2
    assert "answered HTTP 503" in nodes["ask"]["error"]
    assert "overloaded" in nodes["ask"]["error"]
    reason = task.status.message.text() if task.status.message else ""
    assert "ask" in reason


async def test_unreachable_endpoint_fails_naming_it(
    builtins: Any, executor: Any, client: Client, redis: Redis, settings: Settings
) -> None:
    """An endpoint nothing listens on fails the node naming the endpoint (no retries configured: at once)."""
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    await builtins(url)
    await executor({"down_flow": DOWN.replace("limit: 1", "limit: 0")})
    task = await within(client.send("down_flow", {"text": "hi"}), 30, "the failure")
    assert task.status.state == TaskState.FAILED
    nodes = await store(redis, settings).nodes(task.id)
    assert f"LlmError: the model endpoint {url} " in nodes["ask"]["error"] or (
        f"LlmError: cannot reach the model endpoint {url}" in nodes["ask"]["error"]
    )
    assert nodes["ask"]["attempt"] == 1


CHILD = """
name: child
nodes:
  - {id: a, type: llm}
  - {id: b, type: llm, depends_on: [a], messages: "{{a.output.messages}}"}
"""

PARENT = """
name: parent
nodes:
  - {id: first, type: llm}
  - {id: sub, type: workflow, workflow_name: child, depends_on: [first], input: {text: "{{first.output.text}}"}}
output_mapping: {done: true}
"""


async def test_usage_rolls_up_through_a_sub_workflow(
    builtins: Any, executor: Any, client: Client, fake_llm: FakeOpenAIServer, redis: Redis, settings: Settings
) -> None:
    """Tokens of the child's llm nodes land on its execution, on the parent's workflow node and on the parent."""
    fake_llm.script(
        Reply("one", usage=Usage(10, 1)), Reply("two", usage=Usage(20, 2)), Reply("three", usage=Usage(30, 3))
    )
    await builtins(fake_llm.base_url)
    await executor({"child": CHILD, "parent": PARENT})
    await client.registry.wait_for("child", 5)
    task = await within(client.send("parent", {"text": "go"}), 30, "answer")
    assert task.status.state == TaskState.COMPLETED, task.status
    nodes = await store(redis, settings).nodes(task.id)
    assert totals(nodes["first"]["usage"]) == (10, 1, 11)
    assert totals(nodes["sub"]["usage"]) == (50, 5, 55)
    record = await store(redis, settings).record(task.id)
    assert record is not None
    assert totals(json.loads(record["usage"])) == (60, 6, 66)
    assert fake_llm.requests[2]["messages"][-1] == {"role": "assistant", "content": "two"}


REMEMBER = """
name: remember
nodes:
  - id: save
    type: memory_write
    agent: assistant
    user: "{{workflow.input.user}}"
    key: "{{workflow.input.key}}"
    content: "{{workflow.input.fact}}"
    metadata: {source: chat}
"""

RECALL = """
name: recall
nodes:
  - id: find
    type: memory_read
    agent: assistant
    user: "{{workflow.input.user}}"
    query: "{{workflow.input.q}}"
    top_k: 2
  - id: answer
    type: llm
    depends_on: [find]
    system: "Known facts:\\n{{find.output.text}}"
    messages: "{{workflow.input.q}}"
output_mapping: {entries: "{{find.output.entries}}", answer: "{{answer.output.text}}"}
"""


async def test_memory_written_in_one_execution_is_read_in_another_scoped_by_user(
    builtins: Any,
    executor: Any,
    client: Client,
    fake_llm: FakeOpenAIServer,
    redis: Redis,
    settings: Settings,
    processes: Any,
) -> None:
    """memory_write stores entries with embeddings; a later execution's memory_read finds the closest entries of
    the same user only (exact cosine); writing a key again replaces its entry; embedding tokens are counted;
    `a2amesh memory list|delete` shows and removes entries, and a deleted entry is no longer found."""
    await builtins(fake_llm.base_url)
    await executor({"remember": REMEMBER, "recall": RECALL})
    facts = [
        ("ann", "drink", "Ann likes green tea with honey"),
        ("ann", "city", "Ann lives in Oslo near the harbour"),
        ("ann", "pet", "Ann has a cat called Miso"),
        ("bob", "drink", "Bob likes green tea too"),
    ]
    ids = {}
    for user, key, fact in facts:
        task = await within(client.send("remember", {"user": user, "key": key, "fact": fact}), 20, "remember")
        assert task.status.state == TaskState.COMPLETED, task.status
        ids[(user, key)] = task.output()["save"]["id"]
    nodes = await store(redis, settings).nodes(task.id)
    assert nodes["save"]["usage"]["prompt_tokens"] == 5  # the fake counts the words of "Bob likes green tea too"
    fake_llm.script("You like green tea.")
    task = await within(client.send("recall", {"user": "ann", "q": "what tea does ann like"}), 20, "recall")
    assert task.status.state == TaskState.COMPLETED, task.status
    entries = task.output()["entries"]
    assert [e["content"] for e in entries][0] == "Ann likes green tea with honey"
    assert len(entries) == 2
    assert {e["user"] for e in entries} == {"ann"}  # Bob's tea never shows
    assert entries[0]["score"] >= entries[1]["score"]
    assert entries[0]["metadata"] == {"source": "chat"}
    assert "- Ann likes green tea with honey" in fake_llm.requests[0]["messages"][0]["content"]
    again = await within(
        client.send("remember", {"user": "ann", "key": "drink", "fact": "Ann now prefers black coffee"}), 20, "update"
    )
    assert again.output()["save"] == {
        "id": ids[("ann", "drink")],
        "key": "drink",
        "agent": "assistant",
        "user": "ann",
        "replaced": True,
    }
    fake_llm.script("Coffee.")
    task = await within(client.send("recall", {"user": "ann", "q": "black coffee"}), 20, "recall")
    contents = [e["content"] for e in task.output()["entries"]]
    assert contents[0] == "Ann now prefers black coffee"
    assert "Ann likes green tea with honey" not in contents

    memory = MemoryStore(redis, Keys(settings.namespace))
    listed = await memory.list("assistant", user="ann")
    assert [e.content for e in listed][0] == "Ann now prefers black coffee"  # most recently updated first
    assert len(listed) == 3
    assert [e.content for e in await memory.list("assistant", user="bob")] == ["Bob likes green tea too"]
    (pet,) = await memory.list("assistant", user="ann", key="pet")
    proc = await processes.start("memory", "delete", "assistant", pet.id)
    assert await proc.wait(20) == 0, proc.output()
    proc = await processes.start("memory", "list", "assistant", "--user", "ann", "--json")
    assert await proc.wait(20) == 0, proc.output()
    shown = json.loads(proc.output()[proc.output().index("[") :])
    assert sorted(e["key"] for e in shown) == ["city", "drink"]
    proc = await processes.start("memory", "delete", "assistant", pet.id)
    assert await proc.wait(20) == 2
    assert f"agent 'assistant' has no memory entry '{pet.id}'" in proc.output()
    fake_llm.script("A cat?")
    task = await within(client.send("recall", {"user": "ann", "q": "cat called Miso"}), 20, "recall")
    assert "Ann has a cat called Miso" not in [e["content"] for e in task.output()["entries"]]


EMBED = """
name: embed_flow
nodes:
  - {id: vec, type: embed, input: "{{workflow.input.texts}}"}
"""


async def test_embed_node_and_dimension_mismatch(
    builtins: Any, executor: Any, client: Client, fake_llm: FakeOpenAIServer, redis: Redis, settings: Settings
) -> None:
    """embed returns one vector per text; a memory written with one embedding size refuses a query embedded
    with another, naming both sizes."""
    await builtins(fake_llm.base_url)
    await executor({"embed_flow": EMBED, "remember": REMEMBER, "recall": RECALL})
    task = await within(client.send("embed_flow", {"texts": ["a b", "c"]}), 20, "embed")
    assert task.status.state == TaskState.COMPLETED, task.status
    out = task.output()["vec"]
    assert (len(out["embeddings"]), out["dimensions"], out["model"]) == (2, 32, "fake-embedding")
    assert fake_llm.embedding_requests[0]["input"] == ["a b", "c"]
    await within(client.send("remember", {"user": "ann", "key": "k", "fact": "tea"}), 20, "remember")
    fake_llm.embedding_dimensions = 8
    task = await within(client.send("recall", {"user": "ann", "q": "tea"}), 20, "recall")
    assert task.status.state == TaskState.FAILED
    nodes = await store(redis, settings).nodes(task.id)
    assert "embedding dimension mismatch" in nodes["find"]["error"]
    assert "holds 32-dimensional vectors" in nodes["find"]["error"]
    assert "gives 8" in nodes["find"]["error"]
    task = await within(client.send("remember", {"user": "ann", "key": "k2", "fact": "tea"}), 20, "remember")
    assert task.status.state == TaskState.FAILED


RAG = """
name: ask_docs
agentConfig: {embeddingModel: fake-embedding}
nodes:
  - id: look
    type: rag
    store: guide
    query: "{{workflow.input.q}}"
    top_k: 2
    filter: "{{workflow.input.filter}}"
    answer: true
output_mapping: "{{look.output}}"
"""

GUIDE = """Tea care

Green tea steeps at 80 degrees for two minutes. Black tea steeps at 95 degrees for four minutes.

Storage

Keep tea leaves dry, dark and away from spices.
"""


async def test_rag_ingest_then_retrieve_and_answer(
    builtins: Any,
    executor: Any,
    client: Client,
    fake_llm: FakeOpenAIServer,
    processes: Any,
    tmp_path: Any,
) -> None:
    """`a2amesh rag ingest` (a real process) chunks and embeds files into a store; a rag node retrieves the
    closest chunks (with a metadata filter) and answers from them with one model call."""
    (tmp_path / "guide.md").write_text(GUIDE)
    (tmp_path / "coffee.md").write_text("Coffee beans keep best whole, in a sealed jar.")
    proc = await processes.start(
        "rag",
        "ingest",
        "guide",
        str(tmp_path / "guide.md"),
        str(tmp_path / "coffee.md"),
        "--chunk-size",
        "60",
        "--overlap",
        "0",
        "--embedding-model",
        "fake-embedding",
        "--json",
        env={"OPENAI_BASE_URL": fake_llm.base_url},
    )
    assert await proc.wait(30) == 0, proc.output()
    counts = json.loads(proc.output().strip().splitlines()[-1])
    assert counts["store"] == "guide"
    assert counts["chunks"]["coffee.md"] == 1
    assert counts["chunks"]["guide.md"] >= 3
    await builtins(fake_llm.base_url)
    await executor({"ask_docs": RAG})
    fake_llm.script("Steep green tea at 80 degrees [1].")
    task = await within(client.send("ask_docs", {"q": "green tea steep degrees", "filter": None}), 20, "rag")
    assert task.status.state == TaskState.COMPLETED, task.status
    out = task.output()
    assert out["answer"] == "Steep green tea at 80 degrees [1]."
    assert len(out["chunks"]) == 2
    assert "Green tea steeps at 80 degrees" in out["chunks"][0]["content"]
    assert out["chunks"][0]["metadata"]["source"] == "guide.md"
    question = fake_llm.requests[0]["messages"][1]["content"]
    assert question.splitlines()[1].startswith("[1] ")
    assert "Green tea steeps at 80 degrees" in question.splitlines()[1]
    assert question.endswith("Question: green tea steep degrees")
    fake_llm.script("Whole beans.")
    only_coffee = {"q": "green tea steep degrees", "filter": {"source": "coffee.md"}}
    task = await within(client.send("ask_docs", only_coffee), 20, "filtered rag")
    assert [c["metadata"]["source"] for c in task.output()["chunks"]] == ["coffee.md"]


IMAGE = """
name: draw
nodes:
  - {id: pic, type: image, prompt: "A cup of {{workflow.input.what}}", size: 256x256}
"""


async def test_image_node_saves_the_image_as_an_artifact(
    builtins: Any, executor: Any, client: Client, fake_llm: FakeOpenAIServer, redis: Redis, settings: Settings
) -> None:
    """The image node asks the images endpoint for base64 data and stores the PNG as an artifact, referenced by
    its artifact:// URI in the output."""
    from a2amesh.store.artifacts import ArtifactStore
    from tests.fakes.openai_server import PNG

    await builtins(fake_llm.base_url)
    await executor({"draw": IMAGE})
    task = await within(client.send("draw", {"what": "tea"}), 20, "image")
    assert task.status.state == TaskState.COMPLETED, task.status
    (request,) = fake_llm.image_requests
    assert (request["prompt"], request["size"], request["response_format"]) == ("A cup of tea", "256x256", "b64_json")
    out = task.output()["pic"]
    assert out["revised_prompt"] == "fake: A cup of tea"
    (image,) = out["images"]
    assert image["media_type"] == "image/png"
    assert image["uri"].startswith("artifact://")
    stored = await ArtifactStore(
        redis, Keys(settings.namespace), retention=60, max_bytes=settings.artifact_max_bytes
    ).load_uri(image["uri"])
    assert stored.content == PNG
