"""Settings of the MCP server: which agents and workflows become tools, how tools are named, call limits.

Built once at the edge (``a2amesh mcp``, the gateway's settings) by :meth:`McpSettings.load`; the library
never reads the environment.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from a2amesh.config import load_settings, split_list

ENV_FIELDS: dict[str, str] = {
    "A2AMESH_MCP_INCLUDE": "include",
    "A2AMESH_MCP_EXCLUDE": "exclude",
    "A2AMESH_MCP_TOOL_NAMES": "tool_names",
    "A2AMESH_MCP_CALL_TIMEOUT": "call_timeout",
    "A2AMESH_MCP_ELICITATION": "elicitation",
}

_LISTS = ("include", "exclude")


class McpSettings(BaseModel):
    """Every setting of the MCP server (stdio and the gateway's ``/mcp``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    include: list[str] = Field(
        default_factory=lambda: ["*"], description="Glob patterns of agent/workflow names exposed as tools."
    )
    exclude: list[str] = Field(default_factory=list, description="Glob patterns of names never exposed (wins).")
    tool_names: Literal["name", "agent_skill"] = Field(
        default="name",
        description="'name': one tool per agent or workflow, named after it; "
        "'agent_skill': one tool per skill, named '{agent}_{skill}' (Solace Agent Mesh's form).",
    )
    call_timeout: float | None = Field(
        default=None, gt=0, description="Seconds a tool call may run; the mesh's call_timeout when unset."
    )
    elicitation: bool = Field(
        default=True, description="Ask the MCP client's user to answer human reviews (when the client can)."
    )

    def exposes(self, name: str) -> bool:
        """Whether the agent or workflow ``name`` passes the include and exclude patterns."""
        if any(fnmatch.fnmatchcase(name, p) for p in self.exclude):
            return False
        return any(fnmatch.fnmatchcase(name, p) for p in self.include)

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> McpSettings:
        """Defaults < environment (``A2AMESH_MCP_*``) < explicit overrides (None values are ignored).

        Raises:
            ConfigError: naming the variable, the value and the problem.
        """
        env = os.environ if environ is None else environ

        def prepare(values: dict[str, Any]) -> None:
            for field in _LISTS:
                if isinstance(values.get(field), str):
                    values[field] = split_list(values[field])

        return load_settings(cls, ENV_FIELDS, environ=env, overrides=overrides, source="mcp", prepare=prepare)
