"""An LLM agent as an AGENT node of a graph workflow (seed 000, docs/graphs.md): one model call per node run.

The request carries the ``graph_node_request`` control part (the routes the node may take, the tools it may
ask for, the workflow's instruction) and the conversation so far. The model sees the conversation, the agent's
system prompt and the routes, and answers in one of three ways, which become the node's answer:

- it calls ``route_to`` with one of the routes to other agents: ``{"next": route, "message"?}``;
- it asks for the workflow's tools (``end`` among them in a conversational workflow): ``{"tool_calls": [...]}``,
  which the workflow's TOOL_EXECUTOR node runs (or, for ``end``, which ends the turn);
- it answers in text: that text is the answer to the user, ``{"next": "END", "message": text}`` when the node
  has an ``END`` route (answering ends the turn), else ``{"message": text}``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from a2amesh.agent.context import TaskContext, TaskOutcome
from a2amesh.protocol import TaskState

if TYPE_CHECKING:
    from a2amesh.agent.llm_agent import LlmAgent

__all__ = ["ROUTE_TOOL", "graph_turn"]

ROUTE_TOOL = "route_to"
END = "END"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _conversation(value: Any, me: str) -> list[dict[str, Any]]:
    """The workflow's conversation as chat messages: other agents' turns and tool results as plain text, so
    any OpenAI-compatible model reads them (no tool-call ids to match)."""
    raw = value.get("messages") if isinstance(value, dict) else None
    if not isinstance(raw, list):
        return [{"role": "user", "content": _text(value)}]
    out: list[dict[str, Any]] = []
    for m in raw:
        if not isinstance(m, dict):
            continue
        role, name, content = m.get("role"), m.get("name"), m.get("content")
        if role == "assistant":
            if content is None:
                continue
            said = _text(content) if name in (None, me) else f"[{name}] {_text(content)}"
            out.append({"role": "assistant", "content": said})
        elif role == "tool":
            out.append({"role": "user", "content": f"(result of the tool {name or ''}) {_text(content)}"})
        elif role == "system":
            out.append({"role": "system", "content": _text(content)})
        else:
            out.append({"role": "user", "content": _text(content)})
    return out


def _tool_spec(item: dict[str, Any]) -> dict[str, Any]:
    parameters = item.get("parameters") or {"type": "object", "properties": {}}
    return {
        "type": "function",
        "function": {"name": item["name"], "description": item.get("description", ""), "parameters": parameters},
    }


def _routes(request: dict[str, Any]) -> list[str]:
    """The routes to other agents: every allowed ``next`` but ``END`` and those that lead to a tool executor
    (reached by asking for a tool, not by naming it)."""
    given = request.get("route_kinds")
    kinds: dict[str, Any] = given if isinstance(given, dict) else {}
    allowed = [v for v in request.get("allowed_next") or [] if isinstance(v, str)]
    return [v for v in allowed if v != END and kinds.get(v, "AGENT") not in ("TOOL_EXECUTOR", "END")]


async def graph_turn(agent: LlmAgent, ctx: TaskContext, request: dict[str, Any]) -> TaskOutcome:
    """Run the node once: one model call, its answer as the node's answer (see the module docstring)."""
    me = str(request.get("node_name") or agent.definition.name)
    routes = _routes(request)
    allowed = [v for v in request.get("allowed_next") or [] if isinstance(v, str)]
    tools = [t for t in request.get("tools") or [] if isinstance(t, dict) and isinstance(t.get("name"), str)]
    guidance = [agent.spec.system_prompt.strip() or f"You are {agent.definition.name}. {agent.definition.description}"]
    guidance.append(f"In this conversation you are the agent named {me!r}.")
    if routes:
        guidance.append(
            f"To hand the conversation to another agent, call `{ROUTE_TOOL}` with `next` set to one of: "
            + ", ".join(routes)
            + "."
        )
    if END in allowed:
        guidance.append("To answer the user yourself, reply with the answer as plain text; that ends your turn.")
    if request.get("instruction"):
        guidance.append(str(request["instruction"]))
    specs = [_tool_spec(t) for t in tools]
    if routes:
        specs.insert(
            0,
            _tool_spec(
                {
                    "name": ROUTE_TOOL,
                    "description": "Hand the conversation to another agent.",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "next": {"type": "string", "enum": routes, "description": "The agent to hand over to."},
                            "note": {"type": "string", "description": "What that agent should know (optional)."},
                        },
                        "required": ["next"],
                    },
                }
            ),
        )
    messages = [{"role": "system", "content": "\n\n".join(guidance)}, *_conversation(ctx.input, me)]
    c = await agent.model.complete(messages, tools=specs or None)
    ctx.usage.add(
        model=c.model,
        purpose="chat",
        prompt_tokens=c.prompt_tokens,
        completion_tokens=c.completion_tokens,
        total_tokens=c.total_tokens,
    )
    answer: dict[str, Any] = {}
    calls: list[dict[str, Any]] = []
    chosen: str | None = None
    for call in c.tool_calls:
        try:
            arguments = json.loads(call.arguments or "{}")
        except ValueError:
            arguments = {}
        if not isinstance(arguments, dict):
            arguments = {}
        if call.name == ROUTE_TOOL:
            chosen = chosen or (arguments.get("next") if isinstance(arguments.get("next"), str) else None)
        else:
            calls.append({"id": call.id, "name": call.name, "arguments": arguments})
    if c.content:
        answer["message"] = c.content
    if calls:
        answer["tool_calls"] = calls
    elif chosen is not None:
        answer["next"] = chosen
    elif END in allowed:
        answer["next"] = END
    return TaskOutcome(state=TaskState.COMPLETED, output=answer)
