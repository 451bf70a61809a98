"""Tools of external MCP servers in agent nodes: a real MCP server over streamable HTTP (in this process, on a
free loopback port) and one over stdio (a subprocess), called by the built-in agents with the official client.

Real NATS + Valkey, the executor, the built-in agents and the real ``openai`` client against the fake server.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import uvicorn

from a2amesh.client import Client
from a2amesh.protocol import TaskState
from tests.agents import mcp_calc
from tests.fakes.openai_server import FakeOpenAIServer, Reply, ToolCall
from tests.support.waiting import eventually, within

STDIO_SERVER = Path(mcp_calc.__file__).resolve()


@contextlib.asynccontextmanager
async def http_mcp_server(seen: list[dict[str, str]]) -> AsyncIterator[tuple[str, uvicorn.Server]]:
    """The calc server over streamable HTTP at ``http://127.0.0.1:PORT/mcp``, recording each request's headers in
    ``seen``; stopped on exit."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = mcp_calc.build().streamable_http_app()

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append({k.decode().lower(): v.decode() for k, v in scope["headers"]})
        await app(scope, receive, send)

    config = uvicorn.Config(recording, lifespan="on", log_config=None, access_log=False)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await eventually(lambda: server.started, timeout=10, what="the MCP test server to start")
        yield f"http://127.0.0.1:{port}/mcp", server
    finally:
        server.should_exit = True
        await within(task, 10, "the MCP test server to stop")
        sock.close()


def flow(url: str) -> str:
    return f"""
name: mcp_flow
agentConfig:
  mcpServers: [{{name: calc, url: "{url}", headers: {{X-Test: "${{MCP_TEST_HEADER}}"}}}}]
nodes:
  - id: react
    type: tool_loop
    messages: "{{{{workflow.input.question}}}}"
    mcp_servers:
      - {{name: words, command: ["{sys.executable}", "{STDIO_SERVER}"]}}
output_mapping: "{{{{react.output}}}}"
"""


def tool_messages(request: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in request["messages"] if m["role"] == "tool"}


async def test_mcp_tools_in_a_tool_loop(
    builtins: Any, executor: Any, client: Client, fake_llm: FakeOpenAIServer, monkeypatch: Any
) -> None:
    """The model sees the servers' tools with their input schemas; an HTTP tool and a stdio tool run and their
    results reach the model; arguments failing a schema are fed back with the path; the loop finishes. Once
    the HTTP server is down, a call to its tool is an error the model reads, and the node still completes."""
    monkeypatch.setenv("MCP_TEST_HEADER", "from-env")
    mcp_calc.calls.clear()
    headers: list[dict[str, str]] = []
    async with http_mcp_server(headers) as (url, _):
        await builtins(fake_llm.base_url)
        await executor({"mcp_flow": flow(url)})
        fake_llm.script(
            Reply(
                tool_calls=[
                    ToolCall("calc__add", {"a": 2, "b": 3}, id="c1"),
                    ToolCall("calc__add", {"a": "two", "b": 3}, id="c2"),
                    ToolCall("words__shout", {"text": "hello"}, id="c3"),
                ]
            ),
            "2 + 3 = 5, and HELLO.",
        )
        task = await within(client.send("mcp_flow", {"question": "Add 2 and 3, shout hello."}), 60, "answer")
        assert task.status.state == TaskState.COMPLETED, task.status
        out = task.output()
        assert (out["text"], out["stopped_reason"], out["rounds"], out["tool_call_count"]) == (
            "2 + 3 = 5, and HELLO.",
            "final_answer",
            2,
            3,
        )
        first, second = fake_llm.requests
        offered = {t["function"]["name"]: t["function"] for t in first["tools"]}
        assert set(offered) == {"calc__add", "calc__shout", "words__add", "words__shout"}
        assert offered["calc__add"]["description"] == "Adds two integers."
        assert offered["calc__add"]["parameters"]["required"] == ["a", "b"]
        assert offered["calc__add"]["parameters"]["properties"]["a"]["type"] == "integer"
        results = tool_messages(second)
        assert results["c1"] == '{"result": 5}'
        assert results["c2"].startswith("error: invalid arguments for calc__add"), results["c2"]
        assert "integer" in results["c2"], results["c2"]
        assert results["c3"] == '{"result": "HELLO"}'
        assert mcp_calc.calls == [("add", {"a": 2, "b": 3})]  # the invalid call never reached the server
        assert headers
        assert all(h.get("x-test") == "from-env" for h in headers), headers[:1]
    fake_llm.script(Reply(tool_calls=[ToolCall("calc__add", {"a": 1, "b": 1}, id="d1")]), "The calculator is down.")
    task = await within(client.send("mcp_flow", {"question": "1 + 1?"}), 60, "answer with the server down")
    assert task.status.state == TaskState.COMPLETED, task.status
    assert task.output()["text"] == "The calculator is down."
    down = tool_messages(fake_llm.requests[3])["d1"]
    assert down.startswith(f"error: the MCP server 'calc' ({url}) could not run add:"), down
    assert mcp_calc.calls == [("add", {"a": 2, "b": 3})]


UNREACHABLE = """
name: unreachable_flow
nodes:
  - id: ask
    type: llm
    mcp_servers: [{{name: gone, url: "http://127.0.0.1:{port}/mcp"}}]
"""


async def test_server_down_before_its_tools_were_listed_fails_the_node_naming_it(
    builtins: Any, executor: Any, client: Client, fake_llm: FakeOpenAIServer
) -> None:
    """A server never reached cannot offer tools: the node fails naming the server and why, nothing crashes, and
    the built-in agents keep serving."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    await builtins(fake_llm.base_url)
    await executor({"unreachable_flow": UNREACHABLE.format(port=port)})
    task = await within(client.send("unreachable_flow", {"text": "hi"}), 60, "failure")
    assert task.status.state == TaskState.FAILED, task.status
    message = str(task.status)
    assert f"mcp_servers[0]: MCP server 'gone' (http://127.0.0.1:{port}/mcp) cannot list its tools" in message, message
    assert not fake_llm.requests
    fake_llm.script("still here")
    answer = await within(client.send("builtin-llm", {"messages": "ping"}), 30, "builtins still serving")
    assert answer.status.state == TaskState.COMPLETED, answer.status
