"""Agent definitions (``agent_cards/*.yaml``, SPEC §8): the model, the loader and the card they publish."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from a2amesh.config import Settings
from a2amesh.diagnostics import did_you_mean, field_path
from a2amesh.errors import ConfigError
from a2amesh.ids import NAME_RE
from a2amesh.protocol import AgentCapabilities, AgentCard, AgentExtension, AgentInterface, AgentSkill, codes


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SkillSpec(_Strict):
    """A skill shown on the card."""

    id: str
    name: str
    description: str = ""
    tags: list[str] = Field(default_factory=list)
    examples: list[str] | None = None


class GuardrailSpec(_Strict):
    """An out-of-scope gate run before the tool loop."""

    prompt: str = Field(description="Instruction for the check; the model answers whether the request is in scope.")
    reject_message: str = Field(description="The answer given to a rejected request.")


class LlmSpec(_Strict):
    """An LLM agent's model, prompt and tools."""

    model: str | None = Field(default=None, description="Model name; A2AMESH_LLM_MODEL when omitted.")
    base_url: str | None = Field(default=None, description="OpenAI-compatible endpoint; OPENAI_BASE_URL when omitted.")
    api_key_env: str | None = Field(default=None, description="Name of the env var holding the API key.")
    system_prompt: str = ""
    tools: list[str] = Field(default_factory=list, description="Python tools as module:function.")
    max_iterations: int = Field(default=10, ge=1)
    temperature: float | None = None
    timeout: float = Field(default=60.0, gt=0, description="Seconds per model call.")
    max_http_retries: int = Field(default=3, ge=0)
    guardrail: GuardrailSpec | None = None
    history: bool = False
    stream: bool = True


class AgentDefinition(_Strict):
    """One agent, as written in its YAML file."""

    name: str = Field(description="Agent name, [A-Za-z0-9_-]+.")
    description: str = ""
    version: str = "1.0.0"
    skills: list[SkillSpec] = Field(default_factory=list)
    input_schema: dict[str, Any] | None = None
    output_schema: dict[str, Any] | None = None
    handler: str | None = Field(default=None, description="A Python agent: module:function.")
    llm: LlmSpec | None = None
    peers: list[str] = Field(default_factory=list, description="Discovered agents this agent may call (globs).")
    max_retries: int = Field(default=2, ge=0)
    max_concurrency: int | None = Field(default=None, ge=1)
    replicas: int = Field(default=1, ge=1)
    timeout: float | None = Field(default=None, gt=0, description="Seconds a task may run.")
    mcp_export: bool = Field(default=True, description="Whether MCP servers expose this agent as a tool.")

    @field_validator("name")
    @classmethod
    def _valid_name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError(f"{v!r} must match [A-Za-z0-9_-]+")
        return v

    @field_validator("handler")
    @classmethod
    def _valid_handler(cls, v: str | None) -> str | None:
        if v is not None and (v.count(":") != 1 or not all(v.split(":"))):
            raise ValueError(f"{v!r} must be module:function")
        return v

    @model_validator(mode="after")
    def _one_kind(self) -> AgentDefinition:
        if (self.handler is None) == (self.llm is None):
            raise ValueError("an agent has exactly one of handler (a Python agent) and llm (an LLM agent)")
        return self

    @property
    def kind(self) -> str:
        """``python`` or ``llm``."""
        return "python" if self.handler else "llm"

    def card(self, namespace: str, *, agent_type: str = "agent") -> AgentCard:
        """The A2A card of this agent."""
        extensions = [
            AgentExtension(uri=codes.EXT_AGENT_TYPE, params={"type": agent_type}),
            AgentExtension(
                uri=codes.EXT_SCHEMAS, params={"input_schema": self.input_schema, "output_schema": self.output_schema}
            ),
        ]
        if not self.mcp_export:
            extensions.append(AgentExtension(uri=codes.EXT_MCP, params={"export": False}))
        return AgentCard(
            name=self.name,
            description=self.description,
            version=self.version,
            supported_interfaces=[AgentInterface.on_mesh(namespace, self.name)],
            capabilities=AgentCapabilities(streaming=True, push_notifications=False, extensions=extensions),
            skills=[AgentSkill(**s.model_dump()) for s in self.skills],
        )


def _problem(err: dict[str, Any], data: Any) -> tuple[str, str]:
    loc = tuple(err["loc"])
    field = field_path(loc) or "(top level)"
    if err["type"] == "extra_forbidden":
        parent_model: type[BaseModel] = AgentDefinition
        if loc and loc[0] == "llm":
            parent_model = LlmSpec
        elif loc and loc[0] == "skills":
            parent_model = SkillSpec
        return field, f"unknown field{did_you_mean(str(loc[-1]), list(parent_model.model_fields))}"
    msg = str(err["msg"]).removeprefix("Value error, ")
    return field, msg


def parse_agent(data: Any, source: str) -> AgentDefinition:
    """Validate a decoded agent definition.

    Raises:
        ConfigError: naming the source, the field and the problem.
    """
    if not isinstance(data, dict):
        raise ConfigError(source, "", "an agent definition must be a YAML mapping")
    try:
        return AgentDefinition.model_validate(data)
    except ValidationError as e:
        field, problem = _problem(dict(e.errors()[0]), data)
        raise ConfigError(source, field, problem) from e


def load_agent_file(path: str | Path) -> AgentDefinition:
    """Read and validate an agent YAML file.

    Raises:
        ConfigError: unreadable file, bad YAML, or an invalid field (file, field, problem).
    """
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(str(p), "", f"cannot read agent file: {e.strerror}") from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise ConfigError(str(p), "", f"not valid YAML{where}: {getattr(e, 'problem', e)}") from e
    return parse_agent(data, str(p))


def llm_settings_missing(definition: AgentDefinition, settings: Settings) -> str:
    """What to set before an LLM agent can start (``""`` when nothing is missing, or it is no LLM agent): the
    endpoint and the model come from its ``llm:`` block, else from ``OPENAI_BASE_URL`` / ``A2AMESH_LLM_MODEL``."""
    spec = definition.llm
    if spec is None:
        return ""
    missing = []
    if not (spec.base_url or settings.llm_base_url):
        missing.append("OPENAI_BASE_URL (an OpenAI-compatible endpoint, e.g. http://localhost:11434/v1)")
    if not (spec.model or settings.llm_model):
        missing.append("A2AMESH_LLM_MODEL (the model's name at that endpoint)")
    return " and ".join(missing)
