"""The template resolver (SPEC §5.2), including every template of the seeds and the SAM compat corpus."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from a2amesh.jsontext import JsonValue
from a2amesh.workflow.loader import read_document
from a2amesh.workflow.templates import (
    UNSET,
    RefKind,
    TemplateError,
    TemplateScope,
    check,
    find_templates,
    iter_templates,
    parse_reference,
    references,
    render,
    resolve,
    resolve_reference,
    to_text,
)

SHARED = Path(__file__).resolve().parents[3].parent / "shared"
COMPAT = SHARED / "compat" / "sam"
SEEDS = SHARED / "seeds"
CONDITION_KEYS = {"condition", "when"}


# --- corpus extraction -----------------------------------------------------------------------


def _workflow_blocks() -> list[tuple[str, str, dict[str, Any]]]:
    """(file, workflow name, raw workflow block) for every workflow app of the compat corpus."""
    blocks = []
    for path in sorted(COMPAT.glob("*.yaml")):
        data, _ = read_document(path)
        for app in data.get("apps", []) if isinstance(data, dict) else []:
            if str(app.get("app_module", "")).endswith("workflow.app"):
                config = app["app_config"]
                blocks.append((path.name, config["name"], config["workflow"]))
    return blocks


def _strings(value: Any, path: str = "") -> list[tuple[str, str, str]]:
    """(path, key, string) for every string holding a template in a raw value."""
    found = []
    if isinstance(value, str) and "{{" in value:
        found.append((path, path.rsplit(".", 1)[-1], value))
    elif isinstance(value, dict):
        for key, item in value.items():
            found.extend(_strings(item, f"{path}.{key}" if path else str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(_strings(item, f"{path}[{index}]"))
    return found


def _compat_template_cases() -> list[Any]:
    cases = []
    for file, name, block in _workflow_blocks():
        ids = frozenset(node["id"] for node in block["nodes"])
        for path, key, text in _strings(block):
            if key in CONDITION_KEYS:
                continue
            for _, _, expression in find_templates(text):
                cases.append(pytest.param(ids, text, expression, id=f"{file}:{name}:{path}:{expression}"))
    return cases


def _seed_templates() -> list[str]:
    found: list[str] = []
    for path in sorted(SEEDS.glob("*.txt")):
        for expression in re.findall(r"\{\{(.*?)\}\}", path.read_text(encoding="utf-8")):
            if expression.strip() not in found:
                found.append(expression.strip())
    return found


def _nest(path: tuple[str, ...], leaf: Any) -> Any:
    value = leaf
    for segment in reversed(path):
        if segment.isdigit():
            value = [None] * int(segment) + [value]
        else:
            value = {segment: value}
    return value


def _merge(a: Any, b: Any) -> Any:
    if isinstance(a, dict) and isinstance(b, dict):
        merged = dict(a)
        for key, value in b.items():
            merged[key] = _merge(merged[key], value) if key in merged else value
        return merged
    return b


def _scope_for(expressions: list[str], ids: frozenset[str] | None) -> tuple[TemplateScope, dict[str, Any]]:
    """A scope in which every expression resolves to a distinct marker; returns the expected values."""
    workflow_input: Any = {}
    outputs: dict[str, Any] = {}
    map_item: Any = UNSET
    expected: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for expression in expressions:
        ref = parse_reference(expression, ids)
        marker: object = {"marker": expression}
        if ref.kind is RefKind.INPUT:
            workflow_input = _merge(workflow_input, _nest(ref.path, marker))
        elif ref.kind is RefKind.NODE:
            assert ref.node_id is not None
            outputs[ref.node_id] = _merge(outputs.get(ref.node_id, {}), _nest(ref.path, marker))
        elif ref.kind is RefKind.MAP_ITEM:
            map_item = _merge({} if map_item is UNSET else map_item, _nest(ref.path, marker))
        elif ref.kind is RefKind.MAP_INDEX:
            marker = extra["map_index"] = 7
        elif ref.kind is RefKind.LOOP_ITERATION:
            marker = extra["loop_iteration"] = 3
        else:
            marker = extra["workflow_status"] = "failed"
        expected[expression] = marker
    scope = TemplateScope(
        workflow_input=workflow_input,
        outputs=outputs,
        node_ids=ids or frozenset(outputs),
        map_item=map_item,
        map_index=extra.get("map_index", 0 if map_item is not UNSET else None),
        loop_iteration=extra.get("loop_iteration"),
        workflow_status=extra.get("workflow_status"),
    )
    return scope, expected


# --- the corpus ------------------------------------------------------------------------------


def test_the_corpus_is_there() -> None:
    """Guards against silently testing nothing when ../shared is missing."""
    assert len(_workflow_blocks()) >= 17
    assert len(_compat_template_cases()) > 100
    assert len(_seed_templates()) >= 10


@pytest.mark.parametrize(("ids", "text", "expression"), _compat_template_cases())
def test_compat_template_resolves(ids: frozenset[str], text: str, expression: str) -> None:
    """Every template of every SAM example parses against its workflow and resolves to the right value."""
    spans = find_templates(text)
    scope, expected = _scope_for([e for _, _, e in spans], ids)
    assert resolve("{{" + expression + "}}", scope) == expected[expression]
    if len(spans) == 1 and spans[0][:2] == (0, len(text)):
        assert resolve(text, scope) == expected[expression]
    else:
        rendered = text
        for _, _, other in spans:
            rendered = rendered.replace("{{" + other + "}}", to_text(expected[other]), 1)
        assert resolve(text, scope) == rendered


_SEED_PLACEHOLDERS = {"path.to.value"}
"""Seed 001 writes ``{{path.to.value}}`` to describe the syntax; it is not a reference to anything."""


@pytest.mark.parametrize("expression", _seed_templates())
def test_seed_template(expression: str) -> None:
    """Every template written in the seeds parses and resolves (the syntax placeholder is refused clearly)."""
    if expression in _SEED_PLACEHOLDERS:
        with pytest.raises(TemplateError, match=r"\.output"):
            parse_reference(expression)
        return
    scope, expected = _scope_for([expression], None)
    assert resolve("{{" + expression + "}}", scope) == expected[expression]


# --- resolution rules ------------------------------------------------------------------------

SCOPE = TemplateScope(
    workflow_input={"x": 5, "nested": {"list": [10, 20]}, "name": "Ada"},
    outputs={
        "a": {"items": ["p", "q"], "obj": {"k": 1}, "n": 2.5, "flag": True, "none": None},
        "b": "plain",
    },
    node_ids=frozenset({"a", "b", "skipped", "later"}),
)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{workflow.input.x}}", 5),
        ("{{workflow.parameters.x}}", 5),
        ("{{input.x}}", 5),
        ("{{ workflow.input.nested.list.1 }}", 20),
        ("{{workflow.input}}", SCOPE.workflow_input),
        ("{{a.output.items.0}}", "p"),
        ("{{a.output.obj}}", {"k": 1}),
        ("{{a.output.flag}}", True),
        ("{{a.output.none}}", None),
        ("{{a.output}}", SCOPE.outputs["a"]),
        ("{{b.output}}", "plain"),
    ],
)
def test_single_template_keeps_json_type(template: str, expected: Any) -> None:
    """A value that is exactly one template keeps the JSON type of what it refers to."""
    assert resolve(template, SCOPE) == expected


def test_templates_in_text_are_substituted_as_text() -> None:
    """Inside a longer string, values become text: JSON for objects/lists, true/false, null as empty."""
    text = (
        "x={{workflow.input.x}} items={{a.output.items}} obj={{a.output.obj}} f={{a.output.flag}} n=[{{a.output.none}}]"
    )
    assert resolve(text, SCOPE) == 'x=5 items=["p", "q"] obj={"k": 1} f=true n=[]'
    assert render("{{a.output.n}}", SCOPE) == "2.5"


def test_missing_input_key_is_null() -> None:
    """A missing key of the workflow input resolves to null, at any depth."""
    assert resolve("{{workflow.input.nope}}", SCOPE) is None
    assert resolve("{{workflow.input.nope.deeper.0}}", SCOPE) is None
    assert resolve("{{workflow.input.nested.list.9}}", SCOPE) is None


def test_input_field_of_a_scalar_is_an_error() -> None:
    """Looking inside a number of the input is a mistake worth reporting."""
    with pytest.raises(TemplateError, match="is a number"):
        resolve("{{workflow.input.x.y}}", SCOPE)


def test_node_not_run_is_null() -> None:
    """A node that was skipped, not taken, failed or has not run resolves to null."""
    assert resolve("{{skipped.output.anything.0}}", SCOPE) is None
    assert resolve({"v": "{{later.output}}"}, SCOPE) == {"v": None}


def test_missing_field_of_completed_node_names_the_path() -> None:
    """A missing field of a completed node is an error naming node, path and where the template sits."""
    with pytest.raises(TemplateError) as caught:
        resolve({"value": "{{a.output.obj.missing}}"}, SCOPE, path="input")
    message = str(caught.value)
    assert "input.value" in message
    assert "{{a.output.obj.missing}}" in message
    assert "a.output.obj has no field 'missing'" in message
    with pytest.raises(TemplateError, match="no index 5"):
        resolve("{{a.output.items.5}}", SCOPE)


def test_unknown_node_is_an_error() -> None:
    """A reference to a node the definition does not have is refused, with a suggestion."""
    with pytest.raises(TemplateError, match=r"unknown node 'aa' \(did you mean 'a'\?\)"):
        resolve("{{aa.output.x}}", SCOPE)


def test_input_alias_gives_way_to_a_node_named_input() -> None:
    """{{input.x}} is the workflow input only when no node is named input."""
    scope = TemplateScope(workflow_input={"x": 1}, outputs={"input": {"x": 2}}, node_ids=frozenset({"input"}))
    assert resolve("{{input.output.x}}", scope) == 2
    with pytest.raises(TemplateError, match=r"\.output"):
        resolve("{{input.x}}", scope)
    assert parse_reference("input.x", ["other"]).kind is RefKind.INPUT


def test_map_and_loop_variables() -> None:
    """_map_item (alias item), _map_index and _loop_iteration come from the scope."""
    scope = SCOPE.with_map_item({"id": "i1", "tags": ["t"]}, 4).with_loop_iteration(2)
    assert resolve("{{_map_item.id}}", scope) == "i1"
    assert resolve("{{item.tags.0}}", scope) == "t"
    assert resolve("{{_map_item}}", scope) == {"id": "i1", "tags": ["t"]}
    assert resolve("{{_map_index}}", scope) == 4
    assert resolve("iteration_{{_loop_iteration}}", scope) == "iteration_2"
    assert resolve("{{_map_item.absent}}", scope) is None


def test_map_and_loop_variables_outside_their_node_are_errors() -> None:
    """Using _map_item or _loop_iteration where none is defined is an error, not a silent null."""
    with pytest.raises(TemplateError, match="map iteration"):
        resolve("{{_map_item}}", SCOPE)
    with pytest.raises(TemplateError, match="loop iteration"):
        resolve("{{_loop_iteration}}", SCOPE)


def test_workflow_status_and_error() -> None:
    """Exit handlers see workflow.status and workflow.error; elsewhere they are null."""
    assert resolve("{{workflow.status}}", SCOPE) is None
    scope = SCOPE.with_status("failed", "node a failed")
    assert resolve("{{workflow.status}}: {{workflow.error}}", scope) == "failed: node a failed"


def test_coalesce() -> None:
    """coalesce returns the first non-null operand; missing fields inside it count as null."""
    value: JsonValue = {
        "coalesce": ["{{skipped.output.x}}", "{{a.output.obj.missing}}", "{{a.output.none}}", "{{a.output.n}}"]
    }
    assert resolve(value, SCOPE) == 2.5
    assert resolve({"coalesce": ["{{skipped.output.x}}", "random"]}, SCOPE) == "random"
    assert resolve({"coalesce": ["{{skipped.output.x}}"]}, SCOPE) is None


def test_concat() -> None:
    """concat joins text, or concatenates lists when every operand is a list; nulls are skipped."""
    assert resolve({"concat": ["{{workflow.input.name}}", "-", "{{workflow.input.x}}"]}, SCOPE) == "Ada-5"
    assert resolve({"concat": ["{{a.output.items}}", ["r"], "{{skipped.output}}"]}, SCOPE) == ["p", "q", "r"]
    assert resolve({"concat": ["{{a.output.items}}", "!"]}, SCOPE) == '["p", "q"]!'
    assert resolve({"concat": ["{{skipped.output}}"]}, SCOPE) is None


def test_resolution_recurses_and_leaves_keys_alone() -> None:
    """Dicts and lists are resolved at every depth; keys are never templated; other values pass through."""
    value: JsonValue = {
        "{{workflow.input.x}}": [{"deep": "{{a.output.items.1}}"}, 3, None, {"op": {"coalesce": [None, 1]}}]
    }
    assert resolve(value, SCOPE) == {"{{workflow.input.x}}": [{"deep": "q"}, 3, None, {"op": 1}]}
    assert resolve({"coalesce": [None, 1], "other": 2}, SCOPE) == {"coalesce": [None, 1], "other": 2}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{{workflow.input.x", "never closed"),
        ("{{}}", "empty template"),
        ("{{a.output.x y}}", "bad template syntax"),
        ("{{a.output[0]}}", "bad template syntax"),
        ("{{a.result}}", "reads its output"),
        ("{{a}}", "reads its output"),
        ("{{workflow.inputs.x}}", "unknown workflow field 'inputs' (did you mean 'input'?)"),
        ("{{workflow.status.x}}", "has no fields"),
        ("{{_map_index.x}}", "has no fields"),
        ("{{9.output}}", "starts with a name"),
        ("{{ {{a.output}} }}", "nested"),
    ],
)
def test_bad_template_syntax(text: str, problem: str) -> None:
    """Malformed templates are refused at load time with a precise problem."""
    errors = check(text, node_ids={"a"}, path="input.v")
    assert len(errors) == 1
    assert problem in errors[0].problem
    assert errors[0].path == "input.v"


def test_check_reports_unknown_nodes_and_bad_operators() -> None:
    """Load-time checks find unknown node ids and operators without a list."""
    errors = check(
        {"x": "{{ghost.output}}", "y": {"coalesce": "{{a.output}}"}, "z": ["{{a.output}}"]},
        node_ids={"a"},
        path="input",
    )
    assert [(e.path, e.problem) for e in errors] == [
        ("input.x", "unknown node 'ghost'"),
        ("input.y", "coalesce takes a list of values"),
    ]


def test_references_and_iteration() -> None:
    """references() lists the nodes a value reads; iter_templates() says where each template sits."""
    value: JsonValue = {
        "a": "{{n1.output.x}} and {{n2.output}}",
        "b": [{"coalesce": ["{{workflow.input.q}}", "{{n3.output}}"]}],
    }
    assert references(value) == {"n1", "n2", "n3"}
    assert references("{{input.output.x}} {{item}} {{input.y}}", node_ids={"input"}) == {"input"}
    assert references("{{input.y}}") == set()
    assert list(iter_templates(value, "input")) == [
        ("input.a", "n1.output.x"),
        ("input.a", "n2.output"),
        ("input.b[0].coalesce[0]", "workflow.input.q"),
        ("input.b[0].coalesce[1]", "n3.output"),
    ]


def test_resolve_reference_lenient() -> None:
    """The lenient mode used by coalesce turns missing fields into null."""
    assert resolve_reference("a.output.zz", SCOPE, lenient=True) is None
    with pytest.raises(TemplateError):
        resolve_reference("a.output.zz", SCOPE)


def test_yaml_round_trip_of_scalars() -> None:
    """Numbers and booleans from YAML inputs survive a single-template resolution unchanged."""
    data = yaml.safe_load("x: 1.0\ny: true\nz: null\n")
    scope = TemplateScope(workflow_input=data)
    assert [resolve(f"{{{{workflow.input.{k}}}}}", scope) for k in "xyz"] == [1.0, True, None]
