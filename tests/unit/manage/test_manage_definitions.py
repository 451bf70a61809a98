"""Validation of definitions as the management API writes them: ids, formats, settings, errors with paths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from a2amesh.manage.definitions import InvalidWorkflow, parse_body, validate_definition
from a2amesh.store.definitions import definition_body

REPO = Path(__file__).resolve().parents[3]
DAG = {"name": "flow", "nodes": [{"id": "a", "type": "agent", "agent_name": "worker"}]}
SIMPLE = {
    "id": "pair",
    "name": "Two agents talking",
    "nodes": [
        {"id": "a1", "type": "agent", "config": {"agentId": "worker"}},
        {"id": "a2", "type": "agent", "config": {"agentId": "worker"}},
    ],
    "edges": [{"id": "e1", "from": "a1", "to": "a2"}, {"id": "e2", "from": "a2", "to": "a1"}],
    "maxRounds": 10,
}


def errors_of(document: Any, **kwargs: Any) -> list[dict[str, Any]]:
    with pytest.raises(InvalidWorkflow) as failure:
        validate_definition(document, **kwargs)
    return [issue.model_dump() for issue in failure.value.errors]


def test_ids_and_formats_of_the_three_shapes() -> None:
    """A DAG is named by ``name``; seed 000's developer id is kept; seed 003's id wins over a free-text name."""
    dag = validate_definition(DAG)
    assert (dag.id, dag.name, dag.format) == ("flow", "flow", "dag")
    chat = validate_definition(json.loads((REPO / "workflows" / "2nchat.json").read_text()))
    assert (chat.id, chat.format) == ("2nChat", "graph")
    simple = validate_definition(SIMPLE)
    assert (simple.id, simple.name, simple.format) == ("pair", "Two agents talking", "simple")


def test_sam_app_config_is_named_by_its_app() -> None:
    """A SAM app config with one workflow app is stored under that app's name."""
    sam = {
        "apps": [
            {"name": "x", "app_module": "sam.workflow.app", "app_config": {"name": "samflow", "workflow": DAG}},
        ]
    }
    checked = validate_definition(sam)
    assert (checked.id, checked.format) == ("samflow", "dag")


def test_settings_are_read_apart_and_stripped_for_the_loader() -> None:
    """Top-level enabled / mcpExport set the store's settings, are not definition fields, and must be booleans."""
    checked = validate_definition({**DAG, "enabled": False, "mcpExport": False})
    assert (checked.enabled, checked.mcp_export) == (False, False)
    assert definition_body({**DAG, "enabled": False}) == DAG
    assert errors_of({**DAG, "enabled": "yes"})[0]["path"] == "enabled"


def test_unknown_agents_are_warnings_with_paths() -> None:
    """An agent the mesh does not know yet is a warning naming node and field, not an error."""
    checked = validate_definition(DAG, known_agents={"other"})
    assert [(w.node, w.field) for w in checked.warnings] == [("a", "agent_name")]
    assert validate_definition(DAG, known_agents={"worker"}).warnings == []


def test_path_id_must_match() -> None:
    """A PUT's path id must be the definition's own id (its ``id``, else its ``name``)."""
    [error] = errors_of(DAG, workflow_id="other")
    assert error["path"] == "name"
    assert "'flow'" in error["message"]
    assert "'other'" in error["message"]
    assert errors_of(SIMPLE, workflow_id="x")[0]["path"] == "id"


@pytest.mark.parametrize(
    ("document", "path", "message"),
    [
        ([1, 2], "", "expected a mapping"),
        (None, "", "got null"),
        ({"name": "x"}, "", "no workflow found"),
        ({"name": "bad name", "nodes": []}, "name", "must match"),
        ({"name": "x", "nodes": [{"id": "a", "type": "agent", "agent_name": "w", "timout": 1}]}, "nodes[a].timout", ""),
        (
            {
                "name": "x",
                "nodes": [
                    {"id": "a", "type": "agent", "agent_name": "w", "depends_on": ["b"]},
                    {"id": "b", "type": "agent", "agent_name": "w", "depends_on": ["a"]},
                ],
            },
            "nodes[",
            "cycle",
        ),
    ],
)
def test_invalid_documents(document: Any, path: str, message: str) -> None:
    """Each invalid document is refused with an error that says where and what."""
    errors = errors_of(document)
    assert any(e["path"].startswith(path) and message in e["message"] for e in errors), errors


def test_suggestion_is_split_from_the_message() -> None:
    """The loader's did-you-mean becomes the ``suggestion`` field."""
    [error] = errors_of({"name": "x", "nodes": [{"id": "a", "type": "agent", "agent_name": "w", "timout": 1}]})
    assert error == {
        "path": "nodes[a].timout",
        "node": "a",
        "field": "timout",
        "message": "unknown field",
        "suggestion": "timeout",
    }


def test_parse_body_json_and_yaml() -> None:
    """JSON by default, YAML for YAML media types; syntax errors say where; YAML tags cannot read files."""
    assert parse_body(b'{"a": 1}', "application/json") == {"a": 1}
    assert parse_body(b"a: 1\n", "application/yaml; charset=utf-8") == {"a": 1}
    with pytest.raises(InvalidWorkflow, match="JSON error at line 1, column 2"):
        parse_body(b"{oops", "application/json")
    with pytest.raises(InvalidWorkflow, match="YAML error at line 3"):
        parse_body(b"a: 1\nb: [\n", "application/yaml")
    with pytest.raises(InvalidWorkflow, match="constructor for the tag '!include'"):
        parse_body(b"a: !include /etc/passwd\n", "application/yaml")
    with pytest.raises(InvalidWorkflow, match="not UTF-8"):
        parse_body(b"\xff\xfe", "application/json")


def test_parse_body_refuses_alias_bombs_and_deep_nesting() -> None:
    """A few lines of nested YAML aliases, or a deeply nested JSON, are refused before anything expands them."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    with pytest.raises(InvalidWorkflow, match="more than 100000 values"):
        parse_body("\n".join(lines).encode(), "application/yaml")
    with pytest.raises(InvalidWorkflow, match="deeper than 64 levels"):
        parse_body(b"[" * 100 + b"]" * 100, "application/json")
    with pytest.raises(InvalidWorkflow, match="deeper than 64 levels"):
        parse_body(b"[" * 100_000 + b"]" * 100_000, "application/json")
