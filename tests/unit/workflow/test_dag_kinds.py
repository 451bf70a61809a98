"""The DAG node-kind registry: one handler per node type, one per container type, nothing left to a fallback."""

from __future__ import annotations

import typing

from pydantic import TypeAdapter

from a2amesh.workflow.dag.kinds import KINDS
from a2amesh.workflow.dag.nodes import Node


def _node_types() -> set[str]:
    """Every ``type`` the ``Node`` union accepts, read from its JSON schema."""
    schema = TypeAdapter(Node).json_schema()
    types: set[str] = set()
    for sub in schema["$defs"].values():
        kind = sub.get("properties", {}).get("type", {})
        if "const" in kind:
            types.add(kind["const"])
        elif "enum" in kind and len(kind["enum"]) == 1:
            types.add(kind["enum"][0])
    return types


def test_every_node_type_has_a_starter_and_no_other_type_does() -> None:
    types = _node_types()
    assert len(types) == len(typing.get_args(typing.get_args(Node)[0])), types
    assert set(KINDS.start) == types


def test_the_containers_have_a_child_handler_and_only_they() -> None:
    assert set(KINDS.child_done) == {"map", "loop", "fork"}
