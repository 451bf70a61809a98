"""The node handler around Python agents over real NATS + Valkey: validation, retries, inputs, results."""

from __future__ import annotations

import json
from typing import Any

import pytest

from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.errors import RetryWithFeedback
from a2amesh.protocol import Part, TaskState
from a2amesh.store.artifacts import ArtifactScope, ArtifactStore
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from tests.support.nodes import node_message, node_result

ORDER_SCHEMA = {
    "type": "object",
    "required": ["order_id", "qty"],
    "properties": {"order_id": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
}


@pytest.fixture
def store(redis: Redis, settings: Settings) -> ArtifactStore:
    return ArtifactStore(redis, Keys(settings.namespace), retention=3600, max_bytes=10_000_000)


async def test_input_validation_lists_every_error_and_skips_the_agent(agent_host: Any, client: Client) -> None:
    """Invalid node input fails with every jsonschema error and its JSON path; the handler never runs."""
    calls: list[Any] = []

    async def handler(input: Any, ctx: Any) -> Any:
        calls.append(input)
        return {}

    await agent_host("orders", handler, input_schema=ORDER_SCHEMA)
    task = await client.send("orders", node_message({"qty": 0}))
    assert task.status.state == TaskState.FAILED
    result = node_result(task)
    assert result["status"] == "failure"
    assert result["attempts"] == 0
    assert result["execution_id"] == "exec-1"
    assert result["node_id"] == "n1"
    paths = sorted((e["path"], e["keyword"]) for e in result["validation_errors"])
    assert paths == [("$", "required"), ("$.qty", "minimum")]
    assert "$.qty" in result["error"]
    assert "order_id" in result["error"]
    assert calls == []


async def test_request_schema_overrides_agent_schema(agent_host: Any, client: Client) -> None:
    """The node request's input_schema wins over the agent's own, in both directions."""

    async def handler(input: Any, ctx: Any) -> Any:
        return {"ok": True}

    await agent_host("orders", handler, input_schema=ORDER_SCHEMA)
    loose = await client.send("orders", node_message({"anything": 1}, input_schema={"type": "object"}))
    assert loose.status.state == TaskState.COMPLETED
    strict = await client.send(
        "orders", node_message({"order_id": "A", "qty": 2}, input_schema={"type": "object", "required": ["sku"]})
    )
    assert strict.status.state == TaskState.FAILED
    assert node_result(strict)["validation_errors"][0]["message"] == "'sku' is a required property"


async def test_output_validated_not_retried_for_python(agent_host: Any, client: Client) -> None:
    """A Python agent's output failing the output schema fails the node once (no retry), with the path."""
    calls: list[int] = []

    async def handler(input: Any, ctx: Any) -> Any:
        calls.append(1)
        return {"total": "12"}

    schema = {"type": "object", "properties": {"total": {"type": "number"}}}
    await agent_host("calc", handler)
    task = await client.send("calc", node_message({}, output_schema=schema))
    assert task.status.state == TaskState.FAILED
    result = node_result(task)
    assert result["attempts"] == 1
    assert calls == [1]
    assert result["validation_errors"] == [
        {"path": "$.total", "message": "'12' is not of type 'number'", "keyword": "type"}
    ]


async def test_success_result_part_and_artifact(agent_host: Any, client: Client) -> None:
    """A successful node call is COMPLETED with artifacts[0] = output and a success workflow_node_result."""

    async def handler(input: Any, ctx: Any) -> Any:
        assert ctx.execution_id == "exec-1"
        assert ctx.node_id == "n1"
        return {"order_id": input["order_id"], "valid": True}

    await agent_host("orders", handler, input_schema=ORDER_SCHEMA)
    task = await client.send("orders", node_message({"order_id": "A7", "qty": 1}))
    assert task.status.state == TaskState.COMPLETED
    assert task.output() == {"order_id": "A7", "valid": True}
    result = node_result(task)
    assert result["status"] == "success"
    assert result["attempts"] == 1
    assert result["output"] == {"order_id": "A7", "valid": True}
    assert result["validation_errors"] == []
    assert "error" not in result


async def test_control_part_in_any_position(agent_host: Any, client: Client) -> None:
    """The control part is found after the input part too, and is never taken as the input."""

    async def handler(input: Any, ctx: Any) -> Any:
        return input

    await agent_host("echo", handler)
    task = await client.send("echo", node_message({"x": 1}, first=False))
    assert task.output() == {"x": 1}
    assert node_result(task)["status"] == "success"


async def test_plain_call_has_no_node_result_but_validates_input(agent_host: Any, client: Client) -> None:
    """Without the control part the agent answers as a plain agent; its own input schema still applies."""

    async def handler(input: Any, ctx: Any) -> Any:
        return "fine"

    await agent_host("orders", handler, input_schema=ORDER_SCHEMA)
    ok = await client.send("orders", {"order_id": "A", "qty": 3})
    assert ok.status.state == TaskState.COMPLETED
    assert ok.status.message is None
    bad = await client.send("orders", {"order_id": 5, "qty": 3})
    assert bad.status.state == TaskState.FAILED
    assert bad.status.message is not None
    assert "$.order_id" in bad.status.message.text()
    assert all(p.data is None for p in bad.status.message.parts)


async def test_retry_with_feedback(agent_host: Any, client: Client) -> None:
    """RetryWithFeedback calls the function again with ctx.feedback; attempts count; max_retries bounds it."""
    seen: list[str | None] = []

    async def handler(input: Any, ctx: Any) -> Any:
        seen.append(ctx.feedback)
        if len(seen) < input["succeed_on"]:
            raise RetryWithFeedback(f"try again #{len(seen)}")
        return {"after": len(seen)}

    await agent_host("flaky", handler)
    task = await client.send("flaky", node_message({"succeed_on": 3}))
    assert task.output() == {"after": 3}
    assert node_result(task)["attempts"] == 3
    assert seen == [None, "try again #1", "try again #2"]

    seen.clear()
    task = await client.send("flaky", node_message({"succeed_on": 9}))
    assert task.status.state == TaskState.FAILED
    assert node_result(task)["attempts"] == 3
    assert "try again #3" in node_result(task)["error"]

    seen.clear()
    task = await client.send("flaky", node_message({"succeed_on": 2}, max_retries=0))
    assert task.status.state == TaskState.FAILED
    assert node_result(task)["attempts"] == 1


async def test_input_from_artifact_url(agent_host: Any, client: Client, store: ArtifactStore) -> None:
    """An artifact:// URL part is loaded as the input (and validated) instead of being passed as a URL."""
    meta = await store.save(ArtifactScope("elsewhere", "task-x"), "order.json", {"order_id": "Z", "qty": 4})

    async def handler(input: Any, ctx: Any) -> Any:
        return input

    await agent_host("orders", handler, input_schema=ORDER_SCHEMA)
    url = Part(url=meta.uri, media_type=meta.media_type)
    task = await client.send("orders", node_message(parts=[url]))
    assert task.output() == {"order_id": "Z", "qty": 4}
    plain = await client.send("orders", make_message(parts=[url]))
    assert plain.output() == {"order_id": "Z", "qty": 4}
    missing = await client.send("orders", node_message(parts=[Part(url=meta.uri.replace("version=0", "version=5"))]))
    assert missing.status.state == TaskState.FAILED
    assert "cannot load the input artifact" in node_result(missing)["error"]


async def test_bad_node_requests_fail_clearly(agent_host: Any, client: Client) -> None:
    """A malformed control part or an invalid schema in it fails the node with a message naming the field."""

    async def handler(input: Any, ctx: Any) -> Any:
        return input

    await agent_host("echo", handler)
    task = await client.send("echo", node_message({}, max_retries=-1))
    assert task.status.state == TaskState.FAILED
    assert "max_retries" in node_result(task)["error"]
    task = await client.send("echo", node_message({}, output_schema={"type": "nonsense"}))
    assert task.status.state == TaskState.FAILED
    assert node_result(task)["error"].startswith("output_schema: invalid JSON Schema")


async def test_text_output_where_object_expected(agent_host: Any, client: Client) -> None:
    """A string output is parsed as JSON when the schema expects an object; prose fails with a clear message."""

    async def handler(input: Any, ctx: Any) -> Any:
        return input["out"]

    schema = {"type": "object"}
    await agent_host("texty", handler)
    task = await client.send("texty", node_message({"out": '{"a": 1}'}, output_schema=schema))
    assert task.output() == {"a": 1}
    task = await client.send("texty", node_message({"out": "all good"}, output_schema=schema))
    assert task.status.state == TaskState.FAILED
    assert "text that is not JSON" in node_result(task)["error"]
    assert "a JSON object" in node_result(task)["error"]


async def test_large_outputs_travel_as_artifact_urls(
    agent_host: Any, client: Client, settings: Settings, store: ArtifactStore
) -> None:
    """Outputs above inline_threshold become an artifact:// URL part with size and sha256, plain or node call."""
    blob = {"blob": "x" * 5000}

    async def handler(input: Any, ctx: Any) -> Any:
        return blob if input.get("big") else {"small": True}

    small_settings = settings.model_copy(update={"inline_threshold": 2000})
    await agent_host("big", handler, settings=small_settings)

    plain = await client.send("big", {"big": True})
    part = plain.result_part()
    assert part is not None
    assert part.url is not None
    assert part.url.startswith(f"artifact://{settings.namespace}/{plain.context_id}/{plain.id}/result?version=")
    size = len(json.dumps(blob, separators=(",", ":")).encode())
    assert part.metadata is not None
    assert part.metadata["size"] == size
    assert len(part.metadata["sha256"]) == 64
    assert (await store.load_uri(part.url)).value == blob

    node = await client.send("big", node_message({"big": True}))
    result = node_result(node)
    assert "output" not in result
    assert result["artifact"]["uri"] == node.result_part().url  # type: ignore[union-attr]
    assert result["artifact"]["size"] == size
    assert (await store.load_uri(result["artifact"]["uri"])).value == blob

    small = await client.send("big", node_message({"big": False}))
    assert small.output() == {"small": True}
    assert node_result(small)["output"] == {"small": True}
