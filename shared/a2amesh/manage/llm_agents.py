"""LLM agents defined through the API (seed 003 ``create_agent``/``update_agent``, seed 004 ``agentConfig``).

An LLM agent is configuration — model, system prompt, peers, guardrail, history, schemas — so it is stored
like a workflow (versions, ETags, restore, delete) and served by the pooled ``a2amesh llm-host`` process,
each as its own A2A agent. The document is an agent definition (SPEC §8) with an ``llm:`` block. What a
stored definition may not do, because the host runs it with its own credentials: name Python ``tools``
(code runs from processes started from YAML), a ``handler`` (Python agents stay processes), a ``base_url``
or an ``api_key_env`` (the host's endpoint and key are used, so a definition cannot send the key elsewhere).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from a2amesh.agent.definition import AgentDefinition, parse_agent
from a2amesh.errors import ConfigError
from a2amesh.jsontext import content_digest
from a2amesh.manage.definitions import DefinitionIssue, DefinitionKind, InvalidWorkflow, Validated
from a2amesh.store.definitions import LLM_AGENTS, META_KEYS, definition_body

__all__ = ["LLM_AGENT_DEFINITIONS", "stored_llm_agent", "validate_llm_agent"]

_HOST_ONLY = {
    "handler": "Python agents run as processes started from their YAML (a2amesh agent FILE), not from the store",
    "llm.tools": "Python tools are not allowed in a stored LLM agent (peers and workflows become its tools)",
    "llm.base_url": "a stored LLM agent uses the host's endpoint (OPENAI_BASE_URL)",
    "llm.api_key_env": "a stored LLM agent uses the host's key (OPENAI_API_KEY)",
}


def stored_llm_agent(document: Any, source: str) -> AgentDefinition:
    """The agent definition of a stored document (its settings keys left out).

    Raises:
        ConfigError: not a valid agent definition.
    """
    return parse_agent(definition_body(document), source)


def _host_only(document: dict[str, Any]) -> list[DefinitionIssue]:
    raw = document.get("llm")
    llm: dict[str, Any] = raw if isinstance(raw, dict) else {}
    present = {"handler": document.get("handler") is not None}
    for key in ("tools", "base_url", "api_key_env"):
        present[f"llm.{key}"] = bool(llm.get(key)) if key == "tools" else llm.get(key) is not None
    return [
        DefinitionIssue(path=path, field=path, message=message) for path, message in _HOST_ONLY.items() if present[path]
    ]


def validate_llm_agent(
    document: Any, *, workflow_id: str | None = None, known_agents: Collection[str] | None = None
) -> Validated:
    """Check a stored LLM agent's document: a valid agent definition (SPEC §8) with ``llm:`` and nothing the
    host must own; ``workflow_id`` (a path's id) must be its ``name``.

    Raises:
        InvalidWorkflow: with every error found.
    """
    if not isinstance(document, dict):
        kind = "null" if document is None else type(document).__name__
        raise InvalidWorkflow(
            [DefinitionIssue(path="", message=f"expected a mapping (an agent definition), got {kind}")]
        )
    errors = [
        DefinitionIssue(path=key, field=key, message=f"{key} must be true or false")
        for key in META_KEYS
        if key in document and not isinstance(document[key], bool)
    ]
    errors += _host_only(document)
    name = document.get("name")
    if workflow_id is not None and isinstance(name, str) and name != workflow_id:
        message = f"the definition's name {name!r} is not the id in the path, {workflow_id!r}"
        errors.append(DefinitionIssue(path="name", field="name", message=message))
    if errors:
        raise InvalidWorkflow(errors)
    try:
        agent = stored_llm_agent(document, str(name or workflow_id or "<body>"))
    except ConfigError as e:
        suggestion = None
        problem = e.problem
        if "(did you mean " in problem:
            problem, _, rest = problem.partition(" (did you mean ")
            suggestion = rest.rstrip("?)").strip("'\"")
        issue = DefinitionIssue(path=e.field, field=e.field or None, message=problem, suggestion=suggestion)
        raise InvalidWorkflow([issue]) from None
    warnings = []
    if known_agents is not None:
        for peer in agent.peers:
            if not any(ch in peer for ch in "*?[") and peer not in known_agents:
                message = f"no live agent or workflow is named {peer!r} yet"
                warnings.append(DefinitionIssue(path="peers", field="peers", message=message))
    return Validated(
        id=agent.name,
        name=agent.name,
        description=agent.description or None,
        format="llm",
        digest=content_digest(document),
        warnings=warnings,
        enabled=document.get("enabled"),
        mcp_export=document.get("mcpExport"),
    )


LLM_AGENT_DEFINITIONS = DefinitionKind(
    LLM_AGENTS, "LLM agent", validate_llm_agent, lambda subjects, id_, event: subjects.agent_event(id_, event)
)
"""The kind of :class:`~a2amesh.manage.definitions.DefinitionService` that stores LLM agents."""
