"""The base of every DAG definition model: snake_case, camelCase and Solace Agent Mesh / Argo spellings.

Unknown fields are refused with a did-you-mean, a field given twice (in two spellings) is refused, and
the JSON Schema lists every accepted spelling. :mod:`a2amesh.workflow.dag.nodes` and
:mod:`a2amesh.workflow.dag.definition` build on :class:`DefinitionModel`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from a2amesh.diagnostics import did_you_mean

__all__ = ["DefinitionModel", "also_accepts", "as_list", "camel_case", "field_problem"]


def camel_case(name: str) -> str:
    """``input_schema_override`` → ``inputSchemaOverride``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


_SPELLINGS: dict[type[BaseModel], dict[str, str]] = {}


def field_problem(field: str, problem: str) -> PydanticCustomError:
    """An error about one field, raised from a model-level check (the field lands in ``ctx``)."""
    return PydanticCustomError("definition_field", "{field}: {problem}", {"field": field, "problem": problem})


def _schema_aliases(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """Add each accepted alias to a model's JSON Schema, so editors accept SAM/Argo spellings too."""
    if not issubclass(model, DefinitionModel):
        return
    properties: dict[str, Any] = schema.get("properties", {})
    spellings = model.spellings()
    for spelling, field in spellings.items():
        if spelling != field and field in properties:
            described = {k: v for k, v in properties[field].items() if k not in ("title", "description")}
            properties[spelling] = {"description": f"Alias of `{field}`.", **described}
    required: list[str] = schema.get("required", [])
    alternatives = []
    for field in list(required):
        names = [field, *(s for s, f in spellings.items() if f == field and s != field)]
        if len(names) > 1:
            required.remove(field)
            alternatives.append({"anyOf": [{"required": [name]} for name in names]})
    if not required:
        schema.pop("required", None)
    if alternatives:
        schema.setdefault("allOf", []).extend(alternatives)


class DefinitionModel(BaseModel):
    """Base of every definition model: frozen, strict about fields, lenient about spellings."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_schema_aliases)

    field_aliases: ClassVar[Mapping[str, str]] = {}
    """Spellings accepted besides snake_case and camelCase, mapped to the field they mean."""

    @classmethod
    def spellings(cls) -> dict[str, str]:
        """Every accepted key of this model, mapped to the field it sets."""
        cached = _SPELLINGS.get(cls)
        if cached is None:
            cached = {}
            for name in cls.model_fields:
                cached[name] = name
                cached.setdefault(camel_case(name), name)
            for alias, name in cls.field_aliases.items():
                cached[alias] = name
                cached.setdefault(camel_case(alias), name)
            _SPELLINGS[cls] = cached
        return cached

    @model_validator(mode="before")
    @classmethod
    def _accept_spellings(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        spellings = cls.spellings()
        normalized: dict[str, Any] = {}
        given_as: dict[str, str] = {}
        unknown: list[tuple[str, str]] = []
        for key, value in data.items():
            name = spellings.get(str(key))
            if name is None:
                unknown.append((str(key), _suggest(str(key), spellings)))
                continue
            if name in given_as:
                raise field_problem(name, f"given twice, as {given_as[name]!r} and {str(key)!r}")
            given_as[name] = str(key)
            normalized[name] = value
        if unknown:
            listed = ", ".join(repr(key) + hint for key, hint in unknown)
            raise PydanticCustomError(
                "unknown_field", "unknown field(s): {fields}", {"fields": listed, "unknown": unknown}
            )
        return cls._prepare(normalized)

    @classmethod
    def _prepare(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Hook for subclasses: adjust the normalized input before field validation."""
        return data


def _suggest(key: str, spellings: Mapping[str, str]) -> str:
    hint = did_you_mean(key, spellings)
    if not hint:
        lowered = {s.lower().replace("_", ""): s for s in spellings}
        match = lowered.get(key.lower().replace("_", "").replace("-", ""))
        hint = f" (did you mean {match!r}?)" if match else ""
    return hint


def also_accepts(*alternatives: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """A field ``json_schema_extra`` adding the shorthand forms a before-validator accepts."""

    def extend(schema: dict[str, Any]) -> None:
        if "anyOf" not in schema:
            core = {key: schema.pop(key) for key in list(schema) if key not in ("title", "description", "default")}
            schema["anyOf"] = [core]
        schema["anyOf"][:0] = alternatives

    return extend


def as_list(value: Any) -> Any:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return value
