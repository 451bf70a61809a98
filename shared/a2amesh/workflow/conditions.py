"""Workflow conditions (SPEC §5.3): ``when``, switch cases, ``conditional`` and ``loop`` conditions.

A condition is a small Python-like expression evaluated with simpleeval. Templates in it are never
pasted as text: each becomes a variable bound to the resolved value, so quoting mistakes and
injection are impossible.

- ``{{x}}`` binds the value itself (number, boolean, null, string, list, object);
- ``'{{x}}'`` (SAM's pre-quoted style) binds the value as text (:func:`~a2amesh.workflow.templates.to_text`),
  and a template inside a longer literal (``'id-{{x}}'``) is joined into that text;
- a numeric string compared with a number is compared as a number (and flagged at load time),
  a ``"true"``/``"false"`` string compared with a boolean as a boolean;
- ``true``, ``false``, ``null`` and ``none`` are literals in any case.

Allowed: comparisons (``== != < <= > >=``, ``in``, ``not in``, ``is``, ``is not``), ``and``/``or``/``not``,
arithmetic (``+ - * / // % **``), ``x if c else y``, indexing, list and tuple literals, and the
functions in :data:`FUNCTIONS`. Refused at load time: attribute access, dunder names, imports,
lambdas, comprehensions, f-strings, assignment, any other function. Exponents and the size of
strings and lists built by an expression are bounded.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import simpleeval

from a2amesh.diagnostics import did_you_mean
from a2amesh.errors import A2AMeshError
from a2amesh.jsontext import JsonValue
from a2amesh.workflow.templates import (
    Reference,
    TemplateError,
    TemplateScope,
    find_templates,
    json_kind,
    parse_reference,
    resolve_reference,
    to_text,
)

__all__ = [
    "FUNCTIONS",
    "LITERALS",
    "MAX_CONDITION_LENGTH",
    "MAX_TEXT_LENGTH",
    "Binding",
    "CompiledCondition",
    "ConditionError",
    "compile_condition",
    "evaluate",
]

MAX_CONDITION_LENGTH: Final = 10_000
"""The longest condition accepted, in characters."""
MAX_TEXT_LENGTH: Final = 100_000
"""The longest string or list an expression may build (by ``+`` or ``*``)."""
MAX_EXPONENT: Final = 1_000
MAX_INT_BITS: Final = 100_000

LITERALS: Final[Mapping[str, JsonValue]] = {"true": True, "false": False, "null": None, "none": None}
"""Literal names, matched in any case."""


class ConditionError(A2AMeshError, ValueError):
    """A condition is malformed, uses something not allowed, or failed to evaluate.

    Attributes:
        expression: the condition as written.
        problem: what is wrong.
    """

    def __init__(self, expression: str, problem: str) -> None:
        self.expression = expression
        self.problem = problem
        super().__init__(f"condition {expression!r}: {problem}")


# --- functions -------------------------------------------------------------------------------


def _len(value: JsonValue) -> int:
    if value is None:
        return 0
    if isinstance(value, str | list | tuple | dict):
        return len(value)
    raise TypeError(f"len() needs text, a list or an object, not {_kind(value)}")


def _lower(value: JsonValue) -> str:
    return to_text(value).lower()


def _upper(value: JsonValue) -> str:
    return to_text(value).upper()


def _contains(container: JsonValue, item: JsonValue) -> bool:
    if container is None:
        return False
    if isinstance(container, str):
        return to_text(item) in container
    if isinstance(container, list | tuple | dict):
        return item in container
    raise TypeError(f"contains() needs text, a list or an object as its first argument, not {_kind(container)}")


def _startswith(text: JsonValue, prefix: JsonValue) -> bool:
    return to_text(text).startswith(to_text(prefix))


def _endswith(text: JsonValue, suffix: JsonValue) -> bool:
    return to_text(text).endswith(to_text(suffix))


def _converter(cast: type[int] | type[float]) -> Callable[[JsonValue], int | float]:
    """The condition function ``int(x)`` or ``float(x)``: a number, or text that reads as one."""
    name = cast.__name__

    def convert(value: JsonValue) -> int | float:
        if isinstance(value, str):
            number = _number_in(value)
            if number is None:
                raise ValueError(f"{name}() cannot read {value!r} as a number")
            return cast(number)
        if isinstance(value, bool | int | float):
            return cast(value)
        raise TypeError(f"{name}() needs a number or numeric text, not {_kind(value)}")

    return convert


_to_int = _converter(int)
_to_float = _converter(float)


FUNCTIONS: Final[Mapping[str, Callable[..., JsonValue]]] = {
    "len": _len,
    "lower": _lower,
    "upper": _upper,
    "contains": _contains,
    "startswith": _startswith,
    "endswith": _endswith,
    "int": _to_int,
    "float": _to_float,
    "str": to_text,
}
"""The functions a condition may call: ``len(x)`` (null → 0), ``lower(x)``, ``upper(x)``,
``contains(container, item)``, ``startswith(text, prefix)``, ``endswith(text, suffix)``,
``int(x)``, ``float(x)``, ``str(x)`` (the text form used for ``'{{x}}'``)."""

_ARITY: Final = {"contains": 2, "startswith": 2, "endswith": 2}


# --- operators -------------------------------------------------------------------------------

_NUMBER_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


_KIND_WORDS: Final = {
    "boolean": "a boolean",
    "number": "a number",
    "string": "text",
    "list": "a list",
    "object": "an object",
}
"""How a condition's error messages name a :func:`json_kind` (null and non-JSON types as they are)."""


def _kind(value: JsonValue) -> str:
    kind = json_kind(value)
    return _KIND_WORDS.get(kind, kind)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number_in(text: str) -> int | float | None:
    stripped = text.strip()
    if not _NUMBER_RE.fullmatch(stripped):
        return None
    if re.fullmatch(r"[+-]?\d+", stripped):
        return int(stripped)
    number = float(stripped)
    return number if math.isfinite(number) else None


def _coerce(left: JsonValue, right: JsonValue) -> tuple[JsonValue, JsonValue]:
    """Numeric text against a number compares as numbers; true/false text against a bool as bools."""
    if isinstance(left, str) and _is_number(right):
        number = _number_in(left)
        return (left, right) if number is None else (number, right)
    if isinstance(right, str) and _is_number(left):
        number = _number_in(right)
        return (left, right) if number is None else (left, number)
    if isinstance(left, str) and isinstance(right, bool) and left.strip().lower() in ("true", "false"):
        return left.strip().lower() == "true", right
    if isinstance(right, str) and isinstance(left, bool) and right.strip().lower() in ("true", "false"):
        return left, right.strip().lower() == "true"
    return left, right


def _comparison(compare: Callable[[Any, Any], Any]) -> Callable[[JsonValue, JsonValue], bool]:
    def apply(left: JsonValue, right: JsonValue) -> bool:
        a, b = _coerce(left, right)
        try:
            return bool(compare(a, b))
        except TypeError:
            raise TypeError(f"cannot compare {_kind(a)} ({a!r}) with {_kind(b)} ({b!r})") from None

    return apply


Operand: TypeAlias = Any
"""An arithmetic operand: a JSON value whose kind Python's own operator checks (its TypeError is the condition's
error, with the kinds named)."""


def _in(item: JsonValue, container: JsonValue) -> bool:
    if isinstance(container, str) and not isinstance(item, str):
        item = to_text(item)
    if container is None:
        raise TypeError(f"cannot look for {item!r} in null")
    if not isinstance(container, str | list | tuple | dict):
        raise TypeError(f"cannot look for {item!r} in {_kind(container)}")
    return item in container


def _not_in(item: JsonValue, container: JsonValue) -> bool:
    return not _in(item, container)


def _sized(value: Operand) -> bool:
    return isinstance(value, str | list | tuple)


def _add(left: Operand, right: Operand) -> Operand:
    if _sized(left) and _sized(right) and len(left) + len(right) > MAX_TEXT_LENGTH:
        raise ValueError(f"the result would be longer than {MAX_TEXT_LENGTH}")
    return left + right


def _mul(left: Operand, right: Operand) -> Operand:
    for seq, count in ((left, right), (right, left)):
        if _sized(seq) and isinstance(count, int) and len(seq) * max(count, 0) > MAX_TEXT_LENGTH:
            raise ValueError(f"the result would be longer than {MAX_TEXT_LENGTH}")
    if isinstance(left, int) and isinstance(right, int) and left.bit_length() + right.bit_length() > MAX_INT_BITS:
        raise ValueError("the number would be too large")
    return left * right


def _mod(left: Operand, right: Operand) -> Operand:
    if not (_is_number(left) and _is_number(right)):
        raise TypeError("% works on numbers only (text formatting is not available)")
    return left % right


def _pow(base: Operand, exponent: Operand) -> Operand:
    if not (_is_number(base) and _is_number(exponent)):
        raise TypeError(f"** needs numbers, not {_kind(base)} and {_kind(exponent)}")
    if abs(exponent) > MAX_EXPONENT:
        raise ValueError(f"exponent {exponent} is above the limit of {MAX_EXPONENT}")
    if isinstance(base, int) and isinstance(exponent, int) and max(base.bit_length(), 1) * exponent > MAX_INT_BITS:
        raise ValueError("the number would be too large")
    return base**exponent


def _numeric(apply: Callable[[Any, Any], Any], symbol: str) -> Callable[[Operand, Operand], Operand]:
    def checked(left: Operand, right: Operand) -> Operand:
        if not (_is_number(left) and _is_number(right)):
            raise TypeError(f"{symbol} needs numbers, not {_kind(left)} and {_kind(right)}")
        return apply(left, right)

    return checked


_OPERATORS: Final[dict[type[ast.AST], Callable[..., JsonValue]]] = {
    ast.Add: _add,
    ast.Sub: _numeric(operator.sub, "-"),
    ast.Mult: _mul,
    ast.Div: _numeric(operator.truediv, "/"),
    ast.FloorDiv: _numeric(operator.floordiv, "//"),
    ast.Mod: _mod,
    ast.Pow: _pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Not: operator.not_,
    ast.Eq: _comparison(operator.eq),
    ast.NotEq: _comparison(operator.ne),
    ast.Lt: _comparison(operator.lt),
    ast.LtE: _comparison(operator.le),
    ast.Gt: _comparison(operator.gt),
    ast.GtE: _comparison(operator.ge),
    ast.In: _in,
    ast.NotIn: _not_in,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}

_ALLOWED: Final = (
    ast.Expression,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.BinOp,
    ast.Compare,
    ast.Call,
    ast.Name,
    ast.Load,
    ast.Constant,
    ast.List,
    ast.Tuple,
    ast.IfExp,
    ast.Subscript,
    ast.Slice,
    *_OPERATORS,
)

_REFUSED: Final[dict[type[ast.AST], str]] = {
    ast.Lambda: "lambdas are not allowed",
    ast.ListComp: "comprehensions are not allowed",
    ast.SetComp: "comprehensions are not allowed",
    ast.DictComp: "comprehensions are not allowed",
    ast.GeneratorExp: "comprehensions are not allowed",
    ast.JoinedStr: "f-strings are not allowed",
    ast.NamedExpr: "assignment is not allowed",
    ast.Starred: "* unpacking is not allowed",
    ast.Dict: "object literals are not supported",
    ast.Set: "set literals are not supported",
    ast.Await: "await is not allowed",
    ast.Yield: "yield is not allowed",
    ast.YieldFrom: "yield is not allowed",
}


# --- compilation -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Binding:
    """One template of a condition, bound to a variable.

    Attributes:
        name: the variable that stands for it in the rewritten expression.
        expression: the template expression (text between the braces).
        as_text: the template was quoted (``'{{x}}'``) or sits inside a string literal, so it
            binds the text form of the value.
    """

    name: str
    expression: str
    as_text: bool


@dataclass(frozen=True, eq=False)
class CompiledCondition:
    """A checked condition, ready to evaluate many times.

    Attributes:
        source: the condition as written.
        rewritten: the expression with every template replaced by its variable.
        bindings: the templates, in order of appearance.
        tree: the parsed, whitelisted expression.
        literal_names: the literal names used (``TRUE``, ``null``…) and their values.
        warnings: load-time warnings (e.g. quoted numbers compared with numbers).
        references: the parsed templates (checked against the node ids given to
            :func:`compile_condition`, if any).
    """

    source: str
    rewritten: str
    bindings: tuple[Binding, ...]
    tree: ast.Expression
    literal_names: Mapping[str, JsonValue]
    warnings: tuple[str, ...]
    references: tuple[Reference, ...]


def compile_condition(text: str, node_ids: Collection[str] | None = None) -> CompiledCondition:
    """Check a condition and prepare it for evaluation.

    Args:
        text: the condition as written in the definition.
        node_ids: every node id of the definition; when given, templates naming other nodes are
            errors (and the ``input``/``item`` aliases are decided as at run time).

    Returns:
        The compiled condition, with its load-time warnings.

    Raises:
        ConditionError: bad syntax, a bad template, or anything outside the allowed language.
    """
    if not isinstance(text, str):
        raise ConditionError(repr(text), f"a condition is text, not {_kind(text)}")
    if len(text) > MAX_CONDITION_LENGTH:
        raise ConditionError(text[:60] + "…", f"longer than {MAX_CONDITION_LENGTH} characters")
    if not text.strip():
        raise ConditionError(text, "empty condition")
    rewritten, bindings = _rewrite(text)
    references: list[Reference] = []
    for binding in bindings:
        try:
            references.append(parse_reference(binding.expression, node_ids))
        except TemplateError as exc:
            raise ConditionError(text, str(exc)) from None
    try:
        tree = ast.parse(f"(\n{rewritten}\n)", mode="eval")
    except SyntaxError as exc:
        raise ConditionError(text, f"syntax error: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ConditionError(text, f"cannot parse: {type(exc).__name__}") from None
    bound = {b.name: b for b in bindings}
    literal_names = _check_tree(text, tree, bound)
    warnings = tuple(_warnings(tree, bound))
    return CompiledCondition(text, rewritten, tuple(bindings), tree, literal_names, warnings, tuple(references))


def _rewrite(text: str) -> tuple[str, list[Binding]]:
    """Replace each template by a variable; quoted templates bind text."""
    prefix = "_t"
    while prefix in text:
        prefix = "_" + prefix
    bindings: list[Binding] = []

    def bind(expression: str, as_text: bool) -> str:
        name = f"{prefix}{len(bindings)}"
        bindings.append(Binding(name, expression, as_text))
        return name

    out: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("{{", i):
            end = text.find("}}", i + 2)
            if end < 0:
                raise ConditionError(text, "'{{' is never closed with '}}'")
            out.append(f" {bind(text[i + 2 : end].strip(), as_text=False)} ")
            i = end + 2
        elif text[i] in "'\"":
            end = _string_end(text, i)
            out.append(_rewrite_literal(text, text[i + 1 : end], text[i], bind))
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out), bindings


def _string_end(text: str, start: int) -> int:
    quote = text[start]
    j = start + 1
    while j < len(text) and text[j] != quote:
        j += 2 if text[j] == "\\" else 1
    if j >= len(text):
        raise ConditionError(text, f"a string starting at position {start} is never closed")
    return j


def _rewrite_literal(text: str, body: str, quote: str, bind: Callable[[str, bool], str]) -> str:
    try:
        spans = find_templates(body)
    except TemplateError as exc:
        raise ConditionError(text, exc.problem) from None
    if not spans:
        return f"{quote}{body}{quote}"
    if len(spans) == 1 and spans[0][0] == 0 and spans[0][1] == len(body):
        return f" {bind(spans[0][2], True)} "
    parts: list[str] = []
    last = 0
    for start, end, expression in spans:
        if start > last:
            parts.append(f"{quote}{body[last:start]}{quote}")
        parts.append(bind(expression, True))
        last = end
    if last < len(body):
        parts.append(f"{quote}{body[last:]}{quote}")
    return " (" + " + ".join(parts) + ") "


def _check_tree(text: str, tree: ast.Expression, bound: Mapping[str, Binding]) -> dict[str, JsonValue]:
    """Refuse everything outside the condition language; return the literal names used."""
    if isinstance(tree.body, ast.Tuple):
        raise ConditionError(text, "a condition is one expression (found a comma-separated list)")
    literal_names: dict[str, JsonValue] = {}
    callees = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    nodes = list(ast.walk(tree))
    for node in nodes:
        refused = _REFUSED.get(type(node))
        if refused:
            raise ConditionError(text, refused)
        if isinstance(node, ast.Attribute):
            raise ConditionError(
                text, f"attribute access ('.{node.attr}') is not allowed; use the functions {', '.join(FUNCTIONS)}"
            )
    for node in nodes:
        if not isinstance(node, _ALLOWED):
            raise ConditionError(text, f"{_describe_node(node)} is not allowed")
        if isinstance(node, ast.Call):
            _check_call(text, node)
        elif isinstance(node, ast.Name) and id(node) not in callees:
            _check_name(text, node, bound, literal_names)
        elif isinstance(node, ast.Constant):
            _check_constant(text, node)
    return literal_names


def _describe_node(node: ast.AST) -> str:
    symbols = {
        ast.BitAnd: "&",
        ast.BitOr: "|",
        ast.BitXor: "^",
        ast.Invert: "~",
        ast.LShift: "<<",
        ast.RShift: ">>",
        ast.MatMult: "@",
    }
    symbol = symbols.get(type(node))
    return f"the operator {symbol}" if symbol else type(node).__name__


def _check_call(text: str, node: ast.Call) -> None:
    if not isinstance(node.func, ast.Name):
        raise ConditionError(text, f"only these functions can be called: {', '.join(FUNCTIONS)}")
    name = node.func.id
    if name not in FUNCTIONS:
        hint = did_you_mean(name, FUNCTIONS)
        raise ConditionError(text, f"calling {name!r} is not allowed{hint}; functions: {', '.join(FUNCTIONS)}")
    if node.keywords:
        raise ConditionError(text, f"{name}() takes no keyword arguments")
    expected = _ARITY.get(name, 1)
    if len(node.args) != expected:
        raise ConditionError(text, f"{name}() takes {expected} argument(s), got {len(node.args)}")


def _check_name(text: str, node: ast.Name, bound: Mapping[str, Binding], literals: dict[str, JsonValue]) -> None:
    if node.id in bound:
        return
    if node.id.startswith("__"):
        raise ConditionError(text, f"dunder names ({node.id}) are not allowed")
    if node.id.lower() in LITERALS:
        literals[node.id] = LITERALS[node.id.lower()]
        return
    if node.id in FUNCTIONS:
        raise ConditionError(text, f"{node.id} is a function: call it, as {node.id}(...)")
    hint = did_you_mean(node.id, [*LITERALS, *FUNCTIONS])
    raise ConditionError(
        text,
        f"unknown name {node.id!r}{hint}: quote text ('{node.id}'), and write values as templates "
        "({{node.output.field}})",
    )


def _check_constant(text: str, node: ast.Constant) -> None:
    value = node.value
    if isinstance(value, bytes | complex) or value is Ellipsis:
        raise ConditionError(text, f"{type(value).__name__} literals are not supported")
    if isinstance(value, str) and len(value) > MAX_TEXT_LENGTH:
        raise ConditionError(text, f"a text literal is longer than {MAX_TEXT_LENGTH}")


def _warnings(tree: ast.Expression, bound: Mapping[str, Binding]) -> list[str]:
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands, operands[1:], strict=False):
            if isinstance(op, ast.In | ast.NotIn | ast.Is | ast.IsNot):
                continue
            for text_side, number_side in ((left, right), (right, left)):
                number = _numeric_literal(number_side)
                if number is None:
                    continue
                message = _text_vs_number(text_side, number, bound)
                if message:
                    found.append(message)
    return found


def _numeric_literal(node: ast.expr) -> str | None:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _numeric_literal(node.operand)
        return None if inner is None else ("-" if isinstance(node.op, ast.USub) else "") + inner
    if isinstance(node, ast.Constant) and _is_number(node.value):
        return repr(node.value)
    return None


def _text_vs_number(node: ast.expr, number: str, bound: Mapping[str, Binding]) -> str | None:
    if isinstance(node, ast.Name) and node.id in bound and bound[node.id].as_text:
        template = "{{" + bound[node.id].expression + "}}"
        return (
            f"'{template}' is quoted, so it is text compared with the number {number}; it is compared "
            f"as a number at run time, write {template} without quotes to compare the value itself"
        )
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return f"the text {node.value!r} is compared with the number {number}; it is compared as a number at run time"
    return None


# --- evaluation ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=2048)
def _compile_cached(text: str) -> CompiledCondition:
    return compile_condition(text)


def evaluate(condition: str | CompiledCondition, scope: TemplateScope) -> bool:
    """Evaluate a condition against a scope.

    Args:
        condition: the condition text (compiled and cached on first use) or a compiled condition.
        scope: what its templates can see (see :class:`~a2amesh.workflow.templates.TemplateScope`).

    Returns:
        The truth of the condition.

    Raises:
        ConditionError: the condition is invalid, one of its templates cannot be resolved, or
            evaluating it failed (type mismatch, division by zero, a size limit). Never a silent
            ``False``.
    """
    compiled = condition if isinstance(condition, CompiledCondition) else _compile_cached(condition)
    names: dict[str, JsonValue] = dict(compiled.literal_names)
    for binding in compiled.bindings:
        try:
            value = resolve_reference(binding.expression, scope)
        except TemplateError as exc:
            raise ConditionError(compiled.source, str(exc)) from None
        names[binding.name] = to_text(value) if binding.as_text else value
    evaluator = simpleeval.EvalWithCompoundTypes(operators=dict(_OPERATORS), functions=dict(FUNCTIONS), names=names)
    try:
        result = evaluator.eval(compiled.rewritten, previously_parsed=compiled.tree.body)
    except ConditionError:
        raise
    except Exception as exc:  # whatever an expression raises becomes its node's error, never a silent False
        raise ConditionError(compiled.source, _explain(exc)) from exc
    return bool(result)


def _explain(exc: Exception) -> str:
    if isinstance(exc, ZeroDivisionError):
        return "division by zero"
    if isinstance(exc, OverflowError):
        return "a number is too large"
    if isinstance(exc, IndexError | KeyError):
        return f"index or key not found: {exc}"
    if isinstance(exc, RecursionError):
        return "the expression is nested too deeply"
    return str(exc) or type(exc).__name__
