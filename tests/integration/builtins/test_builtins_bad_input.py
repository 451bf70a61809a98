"""Bad input straight to the built-in agents: a precise failure naming the field, and the agents keep serving."""

from __future__ import annotations

from typing import Any

import pytest

from a2amesh.client import Client
from a2amesh.protocol import TaskState
from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.waiting import within


@pytest.mark.parametrize(
    ("agent", "data", "expected"),
    [
        ("builtin-llm", {"messages": [{"x": 1}]}, "messages[0] is not a chat message"),
        ("builtin-llm", {"messages": "hi", "temprature": 1}, "temprature: Extra inputs are not permitted"),
        ("builtin-llm", {"messages": "hi", "tools": [{"agent": "a", "python": "m:f"}]}, "give exactly one of agent"),
        ("builtin-tools", {"tool_calls": []}, "tools: no tools are given (neither tools nor mcp_servers)"),
        ("builtin-memory", {"op": "forget", "agent": "a"}, "does not match any of the expected tags"),
        ("builtin-memory", {"op": "read", "agent": "a"}, "read.query: Field required"),
        ("builtin-rag", {"store": "s"}, "query: Field required"),
        ("builtin-image", {"prompt": "x", "n": 9}, "n: Input should be less than or equal to 4"),
    ],
)
async def test_bad_input_is_a_precise_failure(
    builtins: Any, client: Client, fake_llm: FakeOpenAIServer, agent: str, data: dict[str, Any], expected: str
) -> None:
    await builtins(fake_llm.base_url)
    task = await within(client.send(agent, data), 20, f"{agent}'s answer")
    assert task.status.state == TaskState.FAILED
    message = task.status.message.text() if task.status.message else ""
    assert expected in message, message
    assert "Traceback" not in message
    assert fake_llm.requests == []


async def test_a_tool_agent_not_in_the_mesh_fails_the_call_naming_it(
    builtins: Any, client: Client, fake_llm: FakeOpenAIServer, agent_host: Any
) -> None:
    """Tools are resolved before the model is called: a missing agent fails at once, with a did-you-mean."""

    async def lookup(input: Any, ctx: Any) -> Any:
        return {}

    await agent_host("lookup", lookup)
    await builtins(fake_llm.base_url)
    task = await within(client.send("builtin-llm", {"messages": "hi", "tools": ["lookpu"]}), 20, "the failure")
    assert task.status.state == TaskState.FAILED
    message = task.status.message.text() if task.status.message else ""
    assert "tools[0]: no agent 'lookpu' is in the mesh (did you mean 'lookup'?)" in message, message
    assert fake_llm.requests == []
