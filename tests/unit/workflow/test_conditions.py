"""Conditions (SPEC §5.3): the corpus of the seeds and SAM examples, the language, and the sandbox."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from a2amesh.workflow.conditions import (
    FUNCTIONS,
    CompiledCondition,
    ConditionError,
    compile_condition,
    evaluate,
)
from a2amesh.workflow.loader import read_document
from a2amesh.workflow.templates import UNSET, RefKind, TemplateScope

SHARED = Path(__file__).resolve().parents[3].parent / "shared"
COMPAT = SHARED / "compat" / "sam"
SEEDS = SHARED / "seeds"


# --- corpus extraction -----------------------------------------------------------------------


def _conditions_in(value: Any, path: str = "") -> list[tuple[str, str]]:
    """(path, text) of every ``condition``/``when`` string of a raw workflow block."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key in ("condition", "when") and isinstance(item, str):
                found.append((where, item))
            else:
                found.extend(_conditions_in(item, where))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(_conditions_in(item, f"{path}[{index}]"))
    return found


def _compat_cases() -> list[Any]:
    cases = []
    for path in sorted(COMPAT.glob("*.yaml")):
        data, _ = read_document(path)
        for app in data.get("apps", []) if isinstance(data, dict) else []:
            if str(app.get("app_module", "")).endswith("workflow.app"):
                block = app["app_config"]["workflow"]
                ids = frozenset(node["id"] for node in block["nodes"])
                for where, text in _conditions_in(block):
                    cases.append(pytest.param(text, ids, id=f"{path.name}:{app['app_config']['name']}:{where}"))
    return cases


def _seed_cases() -> list[Any]:
    cases = []
    pattern = re.compile(r"^\s*-?\s*(?:condition|when):\s*(\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')\s*$", re.MULTILINE)
    for path in sorted(SEEDS.glob("*.txt")):
        for match in pattern.finditer(path.read_text(encoding="utf-8")):
            text = ast.literal_eval(match.group(1))
            cases.append(pytest.param(text, None, id=f"{path.name}:{text}"))
    return cases


def _nest(path: tuple[str, ...], leaf: Any) -> Any:
    value = leaf
    for segment in reversed(path):
        value = [None] * int(segment) + [value] if segment.isdigit() else {segment: value}
    return value


def _scope(compiled: CompiledCondition, value: Any) -> TemplateScope:
    """A scope in which every template of the condition resolves to ``value``."""
    workflow_input: Any = {}
    outputs: dict[str, Any] = {}
    map_item: Any = UNSET
    for ref in compiled.references:
        if ref.kind is RefKind.INPUT:
            workflow_input = _nest(ref.path, value)
        elif ref.kind is RefKind.NODE:
            assert ref.node_id is not None
            outputs[ref.node_id] = _nest(ref.path, value)
        elif ref.kind is RefKind.MAP_ITEM:
            map_item = _nest(ref.path, value)
    return TemplateScope(
        workflow_input=workflow_input, outputs=outputs, map_item=map_item, map_index=0, loop_iteration=0
    )


def _candidates(compiled: CompiledCondition) -> list[Any]:
    """Values around each literal of the condition: the literal itself and its neighbours."""
    literals = [n.value for n in ast.walk(compiled.tree) if isinstance(n, ast.Constant)]
    literals += [v for v in compiled.literal_names.values() if not isinstance(v, dict | list)]
    values: list[Any] = []
    for literal in literals:
        if isinstance(literal, bool):
            values += [literal, not literal]
        elif isinstance(literal, int | float):
            values += [literal, literal + 1, literal - 1]
        elif isinstance(literal, str):
            values += [literal, literal + "_other"]
    return values


def _check_live(text: str, ids: frozenset[str] | None) -> None:
    compiled = compile_condition(text, ids)
    assert compiled.bindings, "every corpus condition reads a template"
    outcomes = {evaluate(compiled, _scope(compiled, value)) for value in _candidates(compiled)}
    assert outcomes == {True, False}, f"{text!r} should be true for some values and false for others"


def test_the_corpus_is_there() -> None:
    """Guards against silently testing nothing when ../shared is missing."""
    assert len(_compat_cases()) >= 15
    assert len(_seed_cases()) >= 4


@pytest.mark.parametrize(("text", "ids"), _compat_cases())
def test_compat_condition(text: str, ids: frozenset[str]) -> None:
    """Every SAM example condition compiles against its workflow and evaluates both ways, without error."""
    _check_live(text, ids)
    assert compile_condition(text, ids).warnings == ()


@pytest.mark.parametrize(("text", "ids"), _seed_cases())
def test_seed_condition(text: str, ids: None) -> None:
    """Every condition written in the seeds compiles and evaluates both ways."""
    _check_live(text, ids)


# --- SAM semantics ---------------------------------------------------------------------------


def _s(**outputs: Any) -> TemplateScope:
    return TemplateScope(workflow_input={"priority": "high", "mode": "fast"}, outputs=outputs)


@pytest.mark.parametrize(
    ("text", "scope", "expected"),
    [
        ("'{{classify.output.category}}' == 'small'", _s(classify={"category": "small"}), True),
        ("'{{classify.output.category}}' == 'small'", _s(classify={"category": "large"}), False),
        ("{{check.output.ready}} == false", _s(check={"ready": False}), True),
        ("{{check.output.ready}} == FALSE", _s(check={"ready": False}), True),
        ("{{check.output.ready}} == True", _s(check={"ready": True}), True),
        ("{{check.output.ready}} == none", _s(check={"ready": None}), True),
        ("{{check.output.ready}} is Null", _s(check={"ready": None}), True),
        ("{{price.output.total}} > 500", _s(price={"total": 501}), True),
        ("{{price.output.total}} > 500", _s(price={"total": "700"}), True),
        ("'{{score.output.value}}' > 75", _s(score={"value": 80}), True),
        ("'{{score.output.value}}' > 75", _s(score={"value": 70}), False),
        ("'{{check.output.ready}}' == true", _s(check={"ready": True}), True),
        ("'{{check.output.ready}}' == 'true'", _s(check={"ready": True}), True),
        ("'{{input.priority}}' == 'high'", _s(), True),
        ("\"{{workflow.input.mode}}\" in ['fast', 'normal']", _s(), True),
        ("'{{workflow.input.mode}}' not in ('slow',)", _s(), True),
        ("'id-{{workflow.input.mode}}-x' == 'id-fast-x'", _s(), True),
        ("{{a.output.items}} == [1, 2] and len({{a.output.items}}) >= 2", _s(a={"items": [1, 2]}), True),
        ("not {{a.output.flag}} or {{a.output.n}} * 2 + 1 == 7", _s(a={"flag": True, "n": 3}), True),
        ("{{a.output.n}} ** 2 // 4 % 3 == 2 and -{{a.output.n}} < 0", _s(a={"n": 3}), True),
        ("'yes' if {{a.output.n}} > 1 else 'no'", _s(a={"n": 3}), True),
        ("{{a.output.items}}[0] == 'p'", _s(a={"items": ["p"]}), True),
        ("{{skipped.output.x}} == null", _s(), True),
        ("{{workflow.input.missing}} == None", _s(), True),
    ],
)
def test_semantics(text: str, scope: TemplateScope, expected: bool) -> None:
    """Templates bind values (quoted ones bind text), literals in any case, numeric text compares as numbers."""
    assert evaluate(text, scope) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("len({{a.output.s}}) == 5", True),
        ("len({{a.output.none}}) == 0", True),
        ("lower({{a.output.s}}) == 'hello'", True),
        ("upper({{a.output.s}}) == 'HELLO'", True),
        ("contains({{a.output.s}}, 'ell')", True),
        ("contains({{a.output.items}}, 2)", True),
        ("contains({{a.output.obj}}, 'k')", True),
        ("contains({{a.output.none}}, 'k')", False),
        ("startswith({{a.output.s}}, 'He')", True),
        ("endswith({{a.output.s}}, 'lo')", True),
        ("int({{a.output.num_text}}) == 42", True),
        ("int('3.7') == 3", True),
        ("float({{a.output.num_text}}) == 42.0", True),
        ("str({{a.output.flag}}) == 'true'", True),
        ("str({{a.output.items}}) == '[1, 2]'", True),
    ],
)
def test_function_whitelist(text: str, expected: bool) -> None:
    """Each documented function works."""
    scope = _s(a={"s": "Hello", "items": [1, 2], "obj": {"k": 1}, "num_text": "42", "flag": True, "none": None})
    assert evaluate(text, scope) is expected
    assert set(FUNCTIONS) == {"len", "lower", "upper", "contains", "startswith", "endswith", "int", "float", "str"}


def test_quoted_number_comparison_is_warned_about() -> None:
    """SAM's quoted numbers ('{{x}}' > 75) work, and load time says the quotes are misleading."""
    compiled = compile_condition("'{{score.output.value}}' > 75")
    assert len(compiled.warnings) == 1
    assert "compared as a number" in compiled.warnings[0]
    assert compile_condition("{{score.output.value}} > 75").warnings == ()
    assert compile_condition("'{{a.output.x}}' == 'small'").warnings == ()


@pytest.mark.parametrize(
    ("text", "scope", "problem"),
    [
        ("{{a.output.n}} > 'x'", _s(a={"n": 3}), "cannot compare"),
        ("{{a.output.missing}} == 1", _s(a={"n": 3}), "has no field 'missing'"),
        ("{{a.output.n}} / 0 > 1", _s(a={"n": 3}), "division by zero"),
        ("{{a.output.n}} in {{a.output.none}}", _s(a={"n": 3, "none": None}), "in null"),
        ("{{a.output.s}} - 1 == 0", _s(a={"s": "x"}), "needs numbers"),
        ("int({{a.output.s}}) == 1", _s(a={"s": "x"}), "cannot read"),
        ("{{a.output.items}}[5] == 1", _s(a={"items": []}), "index"),
        ("{{_map_item}} == 1", _s(), "map iteration"),
    ],
)
def test_evaluation_failure_is_an_error(text: str, scope: TemplateScope, problem: str) -> None:
    """A condition that fails to evaluate raises ConditionError naming it; it is never a silent false."""
    with pytest.raises(ConditionError) as caught:
        evaluate(text, scope)
    assert problem in str(caught.value)
    assert text in str(caught.value)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty condition"),
        ("{{a.output.x}} ==", "syntax error"),
        ("{{a.output.x}} == 'unclosed", "never closed"),
        ("{{a.output.x == 1", "never closed"),
        ("{{a.output.x}} == small", "unknown name 'small'"),
        ("{{a.output.x}} == Flase", "did you mean 'false'"),
        ("lenght({{a.output.x}}) == 1", "did you mean 'len'"),
        ("len({{a.output.x}}, 2) == 1", "takes 1 argument"),
        ("contains(x=1)", "keyword"),
        ("len == 1", "is a function"),
        ("{{a.output.x}} | 1", "the operator |"),
        ("{{a.output.x}} == {'k': 1}", "object literals"),
        ("1, 2", "one expression"),
        ("{{ghost.output.x}} == 1", "unknown node 'ghost'"),
        ("{{a.output}} == 1 and {{a.result}} == 2", "reads its output"),
    ],
)
def test_bad_conditions_are_refused_at_load_time(text: str, problem: str) -> None:
    """compile_condition reports bad syntax, unknown names and bad templates with a precise problem."""
    with pytest.raises(ConditionError) as caught:
        compile_condition(text, {"a"})
    assert problem in caught.value.problem


# --- the sandbox -----------------------------------------------------------------------------

ESCAPE_PAYLOADS = [
    # dunder access and attribute chains
    "().__class__.__bases__[0].__subclasses__()",
    "''.__class__.__mro__[1].__subclasses__()",
    "{{a.output.s}}.__class__",
    "{{a.output.s}}.upper()",
    "{{a.output.s}}.format",
    "__builtins__",
    "__import__",
    "_t0",
    # imports and dangerous builtins
    "__import__('os').system('id')",
    "import os",
    "open('/etc/passwd')",
    "eval('1+1')",
    "exec('x=1')",
    "getattr((), '__class__')",
    "type(1)",
    "compile('1', '', 'eval')",
    "globals()",
    # lambdas, comprehensions, generators, assignment, f-strings
    "(lambda: 1)()",
    "(lambda x: x)(1) == 1",
    "[x for x in [1, 2]]",
    "{x: 1 for x in [1]}",
    "{x for x in [1]}",
    "sum(x for x in [1])",
    "(y := 1)",
    "f'{1}'",
    "*[1]",
    # resource exhaustion
    "9**9**9",
    "10**10000",
    "2**1001",
    "(10**300)**300",
    "'a' * 10**9",
    "'ab' * 100000",
    "[1] * 10**9",
    "'x' * 99999 + 'y' * 99999",
    "'%999999999s' % 'a'",
    "1 << 100000",
    "int('9' * 99999) > 0",
    "len('" + "x" * 10_001 + "')",
]


@pytest.mark.parametrize("payload", ESCAPE_PAYLOADS)
def test_sandbox_refuses_escape_payloads(payload: str) -> None:
    """Each escape or exhaustion attempt is refused with ConditionError (at compile or evaluation time)."""
    scope = _s(a={"s": "text"})
    with pytest.raises(ConditionError):
        evaluate(payload, scope)


def test_template_values_are_never_code() -> None:
    """A value that looks like code is bound as data: injection through template values is impossible."""
    scope = _s(a={"s": "x' or __import__('os').system('id') or '"})
    assert evaluate("'{{a.output.s}}' == 'x'", scope) is False
    assert evaluate("{{a.output.s}} == \"x' or __import__('os').system('id') or '\"", scope) is True
