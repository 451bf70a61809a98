"""The agent node catalogue in the DAG format: prompt, llm, tools, tool_loop (definitions, validation, engine)."""

from __future__ import annotations

from typing import Any

from a2amesh.workflow.dag.nodes import BUILTIN_AGENTS, LlmNode, ToolLoopNode
from a2amesh.workflow.dag.validation import Issue, validate_data
from a2amesh.workflow.mermaid import to_mermaid
from tests.support.enginesim import Sim, definition


def issues(data: dict[str, Any]) -> list[Issue]:
    _, report = validate_data(data)
    return list(report.errors)


def wf(*nodes: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"name": "w", "nodes": list(nodes), **top}


ASSISTANT = """
agentConfig: {model: small-model, temperature: 0.2, maxTokens: 300}
maxToolIterations: 4
streamingEnabled: true
nodes:
  - {id: sys, type: prompt, template: "You help {{workflow.input.user}}."}
  - id: ask
    type: agent.llm
    depends_on: [sys]
    system: "{{sys.output.text}}"
    messages: "{{workflow.input.question}}"
    tools: [lookup, "tests.agents.tools:add", {workflow: sub, name: subflow}]
  - {id: run_tools, type: agent.toolExecutor, depends_on: [ask], tools: [lookup]}
  - id: loop
    type: toolLoop
    depends_on: [run_tools]
    messages: "{{run_tools.output.messages}}"
    model: big-model
    tools: [lookup]
output_mapping: {answer: "{{loop.output.text}}"}
"""


def test_definition_reads_seed_spellings_and_workflow_agent_settings() -> None:
    """Seed 004's type names and camelCase settings load; string tool shorthands become references."""
    d = definition(ASSISTANT)
    assert [n.type for n in d.nodes] == ["prompt", "llm", "tools", "tool_loop"]
    assert d.agent_config is not None
    assert d.agent_config.model == "small-model"
    assert d.max_tool_iterations == 4
    assert d.streaming_enabled is True
    ask = d.node("ask")
    assert isinstance(ask, LlmNode)
    assert [t.to_wire() for t in ask.tools] == [
        {"agent": "lookup"},
        {"python": "tests.agents.tools:add"},
        {"workflow": "sub", "name": "subflow"},
    ]
    loop = d.node("loop")
    assert isinstance(loop, ToolLoopNode)
    assert "tool loop" in to_mermaid(d)


def test_engine_runs_prompt_inline_and_calls_builtins_with_settings() -> None:
    """The prompt renders without a call; llm/tools/tool_loop go to the built-in agents with agentConfig applied."""
    calls = {"ask": 0}

    def llm(i: dict[str, Any]) -> dict[str, Any]:
        calls["ask"] += 1
        call = {"id": "c1", "name": "lookup", "arguments": {"q": "x"}}
        return {"text": None, "tool_calls": [call], "messages": [{"role": "user", "content": i["messages"]}]}

    def tools(i: dict[str, Any]) -> dict[str, Any]:
        return {"results": [], "messages": [*i["messages"], {"role": "tool", "tool_call_id": "c1", "content": "1"}]}

    def loop(i: dict[str, Any]) -> dict[str, Any]:
        return {"text": "done", "messages": i["messages"], "rounds": 1, "stopped_reason": "final_answer"}

    sim = Sim(
        definition(ASSISTANT),
        {BUILTIN_AGENTS["llm"]: llm, BUILTIN_AGENTS["tools"]: tools, BUILTIN_AGENTS["tool_loop"]: loop},
    )
    state = sim.run({"user": "Ann", "question": "what is x?"})
    assert state.status == "completed", state.error
    assert state.output == {"answer": "done"}
    assert state.outputs["sys"] == {"text": "You help Ann."}
    by_node = {d.node_id: d for d in sim.dispatched}
    assert set(by_node) == {"ask", "run_tools", "loop"}  # no call for the prompt node
    ask = by_node["ask"].input
    assert isinstance(ask, dict)
    assert ask["system"] == "You help Ann."
    assert ask["messages"] == "what is x?"
    assert (ask["model"], ask["temperature"], ask["max_tokens"], ask["stream"]) == ("small-model", 0.2, 300, True)
    run_tools = by_node["run_tools"].input
    assert isinstance(run_tools, dict)
    assert run_tools["tool_calls"] == [{"id": "c1", "name": "lookup", "arguments": {"q": "x"}}]
    loop_input = by_node["loop"].input
    assert isinstance(loop_input, dict)
    assert loop_input["model"] == "big-model"  # the node over agentConfig
    assert loop_input["max_tool_iterations"] == 4  # the workflow's limit
    assert isinstance(loop_input["messages"], list)
    assert len(loop_input["messages"]) == 2


def test_llm_messages_default_to_the_workflow_input() -> None:
    """Without messages, the llm node is sent the whole workflow input (the builtin turns it into a conversation)."""
    d = definition("nodes:\n  - {id: a, type: llm}\n")
    sim = Sim(d, {BUILTIN_AGENTS["llm"]: lambda i: {"text": "hi"}})
    sim.run({"text": "hello"})
    sent = sim.dispatched[0].input
    assert isinstance(sent, dict)
    assert sent["messages"] == {"text": "hello"}
    assert (sent["model"], sent["tools"], sent["stream"]) == (None, [], False)


def test_prompt_template_error_fails_the_node() -> None:
    """A prompt whose template reads a missing field of a completed node fails naming the template."""
    d = definition(
        """
nodes:
  - {id: a, type: agent, agent_name: echo}
  - {id: p, type: prompt, depends_on: [a], template: "x {{a.output.missing}}"}
"""
    )
    state = Sim(d, {"echo": lambda i: {"present": 1}}).run({})
    assert state.status == "failed"
    assert "template" in (state.error or "")
    assert "missing" in (state.error or "")


# --- invalid definitions: precise errors with paths ---------------------------------------------


def test_tool_ref_needs_exactly_one_target() -> None:
    (issue,) = issues(wf({"id": "a", "type": "llm", "tools": [{"agent": "x", "python": "m:f"}]}))
    assert issue.node_id == "a"
    assert "tools[0]" in str(issue) or "tools.0" in str(issue), str(issue)
    assert "exactly one of agent, workflow, python" in str(issue)


def test_python_tool_must_be_module_function() -> None:
    (issue,) = issues(wf({"id": "a", "type": "llm", "tools": [{"python": "nomodule"}]}))
    assert "module:function" in str(issue), str(issue)


def test_unknown_llm_field_has_did_you_mean() -> None:
    (issue,) = issues(wf({"id": "a", "type": "llm", "temprature": 0.1}))
    assert issue.node_id == "a"
    assert str(issue) == "error: nodes[a].temprature: unknown field (did you mean 'temperature'?)"


def test_bad_limits_are_refused() -> None:
    (issue,) = issues(wf({"id": "a", "type": "tool_loop", "max_tool_iterations": 0}))
    assert "max_tool_iterations" in str(issue), str(issue)
    (issue,) = issues(wf({"id": "a", "type": "llm"}, agentConfig={"temperature": 5}))
    assert "agent_config.temperature" in str(issue), str(issue)


def test_tools_node_needs_one_llm_source() -> None:
    """A tools node must read one llm node it depends on; each way of getting that wrong is named."""
    (issue,) = issues(wf({"id": "p", "type": "prompt", "template": "t"}, {"id": "t", "type": "tools", "tools": ["x"]}))
    assert (issue.node_id, issue.field) == ("t", "depends_on")
    assert "depends on none" in str(issue)
    (issue,) = issues(
        wf(
            {"id": "p", "type": "prompt", "template": "t"},
            {"id": "t", "type": "tools", "tools": ["x"], "depends_on": ["p"], "source": "p"},
        )
    )
    assert (issue.node_id, issue.field) == ("t", "source")
    assert "is a prompt node" in str(issue)
    (issue,) = issues(
        wf(
            {"id": "l", "type": "llm"},
            {"id": "t", "type": "tools", "tools": ["x"], "source": "l"},
        )
    )
    assert "must also be in depends_on" in str(issue)
    (issue,) = issues(wf({"id": "t", "type": "tools", "tools": ["x"], "source": "nope"}))
    assert issue.field == "source"
    assert "unknown node 'nope'" in str(issue)


def test_prompt_with_bad_template_is_refused_at_load() -> None:
    (issue,) = issues(wf({"id": "p", "type": "prompt", "template": "{{ghost.output.x}}"}))
    assert (issue.node_id, issue.field) == ("p", "template")
    assert "ghost" in str(issue)


MEMORY = """
name: mem
agentConfig: {embeddingModel: small-embed}
nodes:
  - {id: find, type: agent.memory.read, query: "{{workflow.input.q}}", user: "{{workflow.input.user}}", top_k: 2}
  - {id: keep, type: agent.memory.write, depends_on: [find], agent: helper, content: "{{find.output.text}}"}
  - {id: vec, type: agent.embed, input: ["{{workflow.input.q}}"], model: other-embed}
"""


def test_memory_and_embed_nodes_call_their_builtins() -> None:
    """Memory nodes default their scope to the workflow's name and take the embedding model from agentConfig."""
    d = definition(MEMORY)
    sim = Sim(
        d,
        {
            BUILTIN_AGENTS["memory_read"]: lambda i: {"entries": [], "text": "- tea"},
            BUILTIN_AGENTS["embed"]: lambda i: {"embeddings": [[1.0]], "dimensions": 1},
        },
    )
    state = sim.run({"q": "tea?", "user": "ann"})
    assert state.status == "completed", state.error
    sent = {c.node_id: c.input for c in sim.dispatched}
    assert sent["find"] == {
        "op": "read",
        "query": "tea?",
        "top_k": 2,
        "min_score": None,
        "agent": d.name,
        "user": "ann",
        "model": "small-embed",
        "stream": False,
    }
    keep = sent["keep"]
    assert isinstance(keep, dict)
    assert (keep["op"], keep["agent"], keep["user"], keep["content"]) == ("write", "helper", None, "- tea")
    assert sent["vec"] == {"op": "embed", "input": ["tea?"], "model": "other-embed", "stream": False}
    assert {c.agent for c in sim.dispatched} == {"builtin-memory", "builtin-embed"}


def test_memory_node_limits_are_refused_with_their_path() -> None:
    (issue,) = issues(wf({"id": "m", "type": "memory_read", "query": "q", "top_k": 0}))
    assert (issue.node_id, issue.field) == ("m", "top_k")
    (issue,) = issues(wf({"id": "m", "type": "memory_write"}))
    assert (issue.node_id, issue.field) == ("m", "content")
    assert "required" in str(issue).lower()


def test_chunks_respect_size_and_boundaries() -> None:
    """Chunks stay within the size, split on paragraphs and sentences first, and share their overlap."""
    from a2amesh.builtins.rag import chunk_text

    text = "Alpha beta gamma.\n\nDelta epsilon. Zeta eta theta iota. Kappa lambda mu nu xi omicron pi rho."
    chunks = chunk_text(text, size=50, overlap=0)
    assert all(len(c) <= 50 for c in chunks)
    assert chunks[0] == "Alpha beta gamma. Delta epsilon."
    assert chunks[-1].endswith("rho.")
    assert " ".join(chunks).split() == text.split()
    overlapping = chunk_text("word " * 100, size=60, overlap=20)
    assert all(len(c) <= 60 for c in overlapping)
    assert overlapping[1].startswith(overlapping[0][-15:].strip().split(" ", 1)[-1])


def test_no_endpoint_says_what_to_set() -> None:
    import pytest

    from a2amesh.builtins.agents import ModelSettings
    from a2amesh.errors import LlmError

    with pytest.raises(LlmError, match="with OPENAI_BASE_URL"):
        ModelSettings(base_url=None, api_key=None, model=None).chat_model()


async def test_embeddings_without_endpoint_or_offline_model_say_how_to_enable_them() -> None:
    """No endpoint and no offline extra: the error names both ways; the offline model refuses another model's
    name instead of mixing vectors of two models; an endpoint always takes precedence."""
    import pytest

    from a2amesh.builtins.agents import ModelSettings
    from a2amesh.builtins.embedders import LocalEmbeddings
    from a2amesh.errors import LlmError

    bare = ModelSettings(base_url=None, api_key=None, model=None, offline=False)
    with pytest.raises(LlmError, match=r"OPENAI_BASE_URL .*pip install 'a2amesh\[offline\]'"):
        bare.embedder()
    assert bare.default_embedding_model == "text-embedding-3-small"
    offline = ModelSettings(base_url=None, api_key=None, model=None, offline=True)
    assert offline.default_embedding_model == "all-MiniLM-L6-v2"
    local = offline.embedder()
    assert isinstance(local, LocalEmbeddings)
    with pytest.raises(LlmError, match="'text-embedding-3-small' needs an embeddings endpoint"):
        await local.embed(["x"], model="text-embedding-3-small")
    await local.aclose()
    endpoint = ModelSettings(base_url="http://127.0.0.1:9/v1", api_key=None, model=None, offline=True)
    assert (endpoint.offline, endpoint.default_embedding_model) == (False, "text-embedding-3-small")


def test_unknown_tool_agents_are_warnings_naming_the_tool() -> None:
    _, report = validate_data(
        wf({"id": "a", "type": "tool_loop", "tools": ["lookpu", {"workflow": "sub"}, "m:f"]}),
        known_agents={"lookup", "sub"},
    )
    assert not report.errors
    (warning,) = report.warnings
    assert (warning.node_id, warning.field) == ("a", "tools[0].agent")
    assert "no agent 'lookpu' is known yet (did you mean 'lookup'?)" in str(warning)


def test_memory_config_gives_defaults_and_can_disable_memory() -> None:
    """memoryConfig fills the scope and top_k of memory nodes that set none; enabled: false answers them inline."""
    nodes = """
nodes:
  - {id: find, type: memory_read, query: q}
  - {id: own, type: memory_read, query: q, top_k: 9, agent: mine}
  - {id: keep, type: memory_write, depends_on: [find], content: "{{find.output.text}}"}
  - {id: after, type: prompt, depends_on: [keep], template: "found: {{find.output.text}}"}
"""
    d = definition("memoryConfig: {agent: shared_brain, topK: 3, minScore: 0.2}\n" + nodes)
    reads = {BUILTIN_AGENTS["memory_read"]: lambda i: {"entries": [], "text": "- x"} if i["op"] == "read" else {}}
    sim = Sim(d, reads)
    sim.run({})
    sent = {c.node_id: c.input for c in sim.dispatched}
    find, own = sent["find"], sent["own"]
    assert isinstance(find, dict)
    assert isinstance(own, dict)
    assert (find["agent"], find["top_k"], find["min_score"]) == ("shared_brain", 3, 0.2)
    assert (own["agent"], own["top_k"]) == ("mine", 9)
    off = Sim(definition("memoryConfig: {enabled: false}\n" + nodes), {})
    state = off.run({})
    assert state.status == "completed", state.error
    assert off.dispatched == []
    assert state.outputs["after"] == {"text": "found: "}
    kept = state.outputs["keep"]
    assert isinstance(kept, dict)
    assert kept["disabled"] is True


# --- MCP servers ---------------------------------------------------------------------------------


def test_mcp_servers_of_agent_config_and_node_merge_by_name() -> None:
    """A node's server replaces the agent_config server of its name; both reach the built-in agent's input."""
    from a2amesh.workflow.dag.agent_nodes import AgentConfig

    config = AgentConfig.model_validate(
        {"mcpServers": [{"name": "calc", "url": "http://127.0.0.1:1/mcp"}, {"name": "files", "command": "srv -v"}]}
    )
    node = ToolLoopNode.model_validate(
        {"id": "a", "type": "tool_loop", "mcp_servers": [{"name": "calc", "url": "https://calc.example/mcp"}]}
    )
    data = node.call_input(config, 10)
    assert isinstance(data, dict)
    assert data["mcp_servers"] == [
        {"name": "calc", "url": "https://calc.example/mcp"},
        {"name": "files", "command": ["srv", "-v"]},
    ]


def test_bad_mcp_servers_are_refused_with_their_path() -> None:
    def one(server: dict[str, Any], node_type: str = "llm") -> str:
        (issue,) = issues(wf({"id": "a", "type": node_type, "mcp_servers": [server]}))
        assert issue.node_id == "a"
        return str(issue)

    assert one({"name": "x", "url": "ftp://host/mcp"}).startswith(
        "error: nodes[a].mcp_servers[0].url: 'ftp://host/mcp' is not an http(s) URL with a host"
    )
    assert "is not an http(s) URL" in one({"name": "x", "url": "http:///mcp"})
    assert "the command is empty" in one({"name": "x", "command": []})
    assert "the command is empty" in one({"name": "x", "command": [" "]})
    assert "found neither" in one({"name": "x"})
    assert "found both" in one({"name": "x", "url": "http://h/mcp", "command": ["a"]})
    assert "headers are for a url" in one({"name": "x", "command": ["a"], "headers": {"A": "b"}})
    assert "env is for a command" in one({"name": "x", "url": "http://h/mcp", "env": {"A": "b"}})
    assert "mcp_servers[0].name: String should match pattern" in one({"name": "bad_name", "url": "http://h/mcp"})
    twice = [{"name": "x", "url": "http://h/mcp"}, {"name": "x", "command": ["a"]}]
    (issue,) = issues(wf({"id": "a", "type": "tool_loop", "mcp_servers": twice}))
    assert "two MCP servers are named 'x'" in str(issue), str(issue)
    (issue,) = issues(wf({"id": "a", "type": "llm"}, agentConfig={"mcpServers": [{"name": "x", "url": "nope"}]}))
    assert str(issue).startswith("error: agent_config.mcp_servers[0].url: 'nope' is not an http(s) URL"), str(issue)


def test_tools_node_needs_tools_or_mcp_servers() -> None:
    (issue,) = issues(wf({"id": "l", "type": "llm"}, {"id": "t", "type": "tools", "depends_on": ["l"]}))
    assert (issue.node_id, issue.field) == ("t", "tools")
    assert "needs tools or mcp_servers" in str(issue)
    servers = [{"name": "calc", "url": "http://127.0.0.1:1/mcp"}]
    assert not issues(
        wf({"id": "l", "type": "llm"}, {"id": "t", "type": "tools", "depends_on": ["l"], "mcp_servers": servers})
    )
    assert not issues(
        wf(
            {"id": "l", "type": "llm"},
            {"id": "t", "type": "tools", "depends_on": ["l"]},
            agentConfig={"mcpServers": servers},
        )
    )


def test_mcp_headers_stay_out_of_reprs() -> None:
    from a2amesh.workflow.dag.agent_nodes import McpServerRef

    ref = McpServerRef.model_validate(
        {"name": "x", "url": "http://h/mcp", "headers": {"Authorization": "Bearer s3cret"}}
    )
    assert "s3cret" not in repr(ref)
