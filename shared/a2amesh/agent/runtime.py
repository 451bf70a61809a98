"""Build the runtime of an agent definition file: a Python agent or an LLM agent."""

from __future__ import annotations

from pathlib import Path

from a2amesh.agent.definition import load_agent_file
from a2amesh.agent.node_handler import NodeHandler
from a2amesh.agent.python_agent import AgentRuntime, PythonAgent
from a2amesh.config import Settings
from a2amesh.errors import ConfigError


def build_runtime(path: Path, settings: Settings) -> AgentRuntime:
    """Load ``path`` and build its runtime, wrapped in the node handler (SPEC §4).

    Raises:
        ConfigError: the file is invalid, its handler cannot be imported, or an LLM agent has no endpoint.
    """
    definition = load_agent_file(path)
    if definition.handler is not None:
        return NodeHandler(PythonAgent.from_definition(definition, base_dir=path.resolve().parent, source=str(path)))
    try:
        from a2amesh.agent.llm_agent import LlmAgent
    except ImportError as e:  # pragma: no cover - the LLM agent ships with the node-handler work
        raise ConfigError(str(path), "llm", "LLM agents are not available in this build") from e
    return NodeHandler(
        LlmAgent.from_definition(definition, settings=settings, base_dir=path.resolve().parent, source=str(path))
    )
