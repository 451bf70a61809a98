"""The one template resolver of a2amesh workflows (SPEC §5.2).

Every templated value of a definition (node inputs, instructions, map items, review prompts,
``output_mapping``) and every template inside a condition goes through this module.

Forms::

    {{workflow.input.x}}      the workflow input (aliases: workflow.parameters.x, and input.x
                              when no node is named ``input``)
    {{node_id.output.x.0}}    a field of a node's output; digits index lists
    {{_map_item.x}}           the current map item (alias ``item`` when no node is named ``item``)
    {{_map_index}}            its index
    {{_loop_iteration}}       the loop iteration, from 0
    {{workflow.status}}       the execution status, set for exit handlers
    {{workflow.error}}        the execution error, set for exit handlers

A string that is exactly one template keeps the JSON type of the value; templates inside a longer
string are substituted as text (:func:`to_text`). ``{coalesce: [...]}`` and ``{concat: [...]}``
combine values. Dict keys are never templated.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Final

from a2amesh.diagnostics import did_you_mean
from a2amesh.errors import A2AMeshError
from a2amesh.jsontext import JsonValue

__all__ = [
    "JSON_KINDS",
    "OPERATORS",
    "UNSET",
    "Unset",
    "RefKind",
    "Reference",
    "TemplateError",
    "TemplateScope",
    "check",
    "find_templates",
    "has_templates",
    "iter_templates",
    "json_kind",
    "operator_of",
    "parse_reference",
    "references",
    "render",
    "resolve",
    "resolve_reference",
    "to_text",
]


OPERATORS: Final = ("coalesce", "concat")
JSON_KINDS: Final = frozenset({"null", "boolean", "number", "string", "list", "object"})
"""What :func:`json_kind` names a JSON value."""


class Unset:
    _instance: Unset | None = None

    def __new__(cls) -> Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Final = Unset()
"""Marks a scope value that is not defined here (e.g. ``_map_item`` outside a map)."""


class TemplateError(A2AMeshError, ValueError):
    """A template is malformed, names an unknown node, or cannot be resolved.

    Attributes:
        template: the template as written (``{{a.output.b}}``), or the text holding a broken one.
        problem: what is wrong.
        path: where the template sits in the definition (``input.value``), or ``""``.
    """

    def __init__(self, template: str, problem: str, path: str = "") -> None:
        self.template = template
        self.problem = problem
        self.path = path
        where = f"{path}: " if path else ""
        super().__init__(f"{where}{template}: {problem}")

    def at(self, path: str) -> TemplateError:
        """The same error, located at ``path`` (used when the caller knows where the value sits)."""
        return TemplateError(self.template, self.problem, path)


class RefKind(StrEnum):
    """What a template refers to."""

    INPUT = "input"
    NODE = "node"
    MAP_ITEM = "map_item"
    MAP_INDEX = "map_index"
    LOOP_ITERATION = "loop_iteration"
    STATUS = "status"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Reference:
    """One parsed template expression.

    Attributes:
        kind: what it refers to.
        expression: the text between the braces, stripped.
        node_id: the node, for ``RefKind.NODE``.
        path: the fields and list indexes after the root (``("items", "0")``).
    """

    kind: RefKind
    expression: str
    node_id: str | None = None
    path: tuple[str, ...] = ()

    @property
    def template(self) -> str:
        """The template as it would be written."""
        return "{{" + self.expression + "}}"


_MAP_ITEM_ROOTS = ("_map_item", "item")
_SPECIAL_ROOTS = frozenset({"workflow", "_map_item", "_map_index", "_loop_iteration"})
_WORKFLOW_FIELDS = ("input", "parameters", "status", "error")


def _is_segment(segment: str) -> bool:
    if segment.isdigit() and segment.isascii():
        return True
    if not segment or not (segment[0].isascii() and (segment[0].isalpha() or segment[0] == "_")):
        return False
    return all(ch.isascii() and (ch.isalnum() or ch in "_-") for ch in segment)


def parse_reference(expression: str, node_ids: Collection[str] | None = None) -> Reference:
    """Parse the text between ``{{`` and ``}}``.

    Args:
        expression: e.g. ``"workflow.input.x"`` or ``" step1.output.items.0 "``.
        node_ids: every node id of the definition. When given, a node id not among them is an
            error; when ``None``, any node id is accepted. The aliases ``input`` and ``item``
            apply only when no node has that id.

    Returns:
        The parsed reference.

    Raises:
        TemplateError: bad syntax, an unknown ``workflow.`` field, a node reference without
            ``.output``, or an unknown node id.
    """
    text = expression.strip()
    template = "{{" + text + "}}"
    if not text:
        raise TemplateError(template, "empty template")
    segments = text.split(".")
    if not all(_is_segment(s) for s in segments):
        raise TemplateError(
            template,
            "bad template syntax: expected dotted names such as workflow.input.x, node_id.output.field "
            "or node_id.output.items.0",
        )
    root, rest = segments[0], tuple(segments[1:])
    ids = node_ids if node_ids is not None else ()
    if root == "workflow":
        return _parse_workflow(template, text, rest)
    if root in _MAP_ITEM_ROOTS and not (root == "item" and "item" in ids):
        return Reference(RefKind.MAP_ITEM, text, path=rest)
    if root in ("_map_index", "_loop_iteration"):
        if rest:
            raise TemplateError(template, f"{root} is a number and has no fields")
        kind = RefKind.MAP_INDEX if root == "_map_index" else RefKind.LOOP_ITERATION
        return Reference(kind, text)
    if root == "input" and "input" not in ids:
        return Reference(RefKind.INPUT, text, path=rest)
    if root[0].isdigit():
        raise TemplateError(template, "bad template syntax: a template starts with a name, not a number")
    if node_ids is not None and root not in node_ids:
        raise TemplateError(template, f"unknown node {root!r}{did_you_mean(root, node_ids)}")
    if not rest or rest[0] != "output":
        raise TemplateError(
            template, f"a node reference reads its output: write {{{{{root}.output}}}} or {{{{{root}.output.field}}}}"
        )
    return Reference(RefKind.NODE, text, node_id=root, path=rest[1:])


def _parse_workflow(template: str, text: str, rest: tuple[str, ...]) -> Reference:
    if not rest or rest[0] not in _WORKFLOW_FIELDS:
        got = f" {rest[0]!r}" if rest else ""
        raise TemplateError(
            template,
            f"unknown workflow field{got}{did_you_mean(rest[0] if rest else '', _WORKFLOW_FIELDS)}; "
            "expected workflow.input.<field>, workflow.parameters.<field>, workflow.status or workflow.error",
        )
    head, tail = rest[0], rest[1:]
    if head in ("input", "parameters"):
        return Reference(RefKind.INPUT, text, path=tail)
    if tail:
        raise TemplateError(template, f"workflow.{head} is text and has no fields")
    return Reference(RefKind.STATUS if head == "status" else RefKind.ERROR, text)


def find_templates(text: str) -> list[tuple[int, int, str]]:
    """Find the templates in a string.

    Args:
        text: any string.

    Returns:
        ``(start, end, expression)`` for each ``{{…}}`` in order; ``text[start:end]`` is the
        template with its braces, ``expression`` the stripped text between them.

    Raises:
        TemplateError: a ``{{`` is never closed, or templates are nested.
    """
    found: list[tuple[int, int, str]] = []
    pos = 0
    while (start := text.find("{{", pos)) >= 0:
        end = text.find("}}", start + 2)
        if end < 0:
            raise TemplateError(_excerpt(text, start), "'{{' is never closed with '}}'")
        inner = text[start + 2 : end]
        if "{{" in inner:
            raise TemplateError(_excerpt(text, start), "templates cannot be nested")
        found.append((start, end + 2, inner.strip()))
        pos = end + 2
    return found


def _excerpt(text: str, start: int) -> str:
    piece = text[start : start + 40]
    return piece + ("…" if len(text) > start + 40 else "")


def has_templates(value: JsonValue) -> bool:
    """Whether a value holds any template or operator (so resolving it may change it)."""
    if isinstance(value, str):
        return "{{" in value
    if isinstance(value, Mapping):
        return operator_of(value) is not None or any(has_templates(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(has_templates(v) for v in value)
    return False


def operator_of(value: Mapping[str, JsonValue]) -> str | None:
    """The operator name if ``value`` is ``{coalesce: …}`` or ``{concat: …}`` (a one-key mapping)."""
    if len(value) == 1:
        (key,) = value
        if key in OPERATORS:
            return str(key)
    return None


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def iter_templates(value: JsonValue, path: str = "") -> Iterator[tuple[str, str]]:
    """Walk a value and yield ``(path, expression)`` for every template in it.

    Args:
        value: any JSON value, operators included.
        path: the location of ``value`` in the definition, used to build each yielded path.

    Yields:
        The location of the string holding the template, and the template's expression.

    Raises:
        TemplateError: a string holds an unclosed or nested template.
    """
    if isinstance(value, str):
        try:
            spans = find_templates(value)
        except TemplateError as exc:
            raise exc.at(path) from None
        for _, _, expression in spans:
            yield path, expression
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from iter_templates(item, _join(path, str(key)))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from iter_templates(item, _join(path, index))


def check(value: JsonValue, *, node_ids: Collection[str] | None, path: str = "") -> list[TemplateError]:
    """Check every template and operator in a value at load time, without resolving anything.

    Args:
        value: a templated value of the definition.
        node_ids: every node id of the definition (``None`` skips the unknown-node check).
        path: where the value sits, for the error messages.

    Returns:
        One error per bad template or operator (empty when all is well).
    """
    errors: list[TemplateError] = []
    if isinstance(value, str):
        try:
            spans = find_templates(value)
        except TemplateError as exc:
            return [exc.at(path)]
        for _, _, expression in spans:
            try:
                parse_reference(expression, node_ids)
            except TemplateError as exc:
                errors.append(exc.at(path))
    elif isinstance(value, Mapping):
        operator = operator_of(value)
        if operator is not None and not isinstance(value[operator], list):
            errors.append(TemplateError(operator, f"{operator} takes a list of values", path))
        for key, item in value.items():
            errors.extend(check(item, node_ids=node_ids, path=_join(path, str(key))))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            errors.extend(check(item, node_ids=node_ids, path=_join(path, index)))
    return errors


def references(value: JsonValue, node_ids: Collection[str] | None = None) -> set[str]:
    """The node ids whose output a value refers to (templates that fail to parse are ignored).

    Args:
        value: any templated value, or a condition string.
        node_ids: every node id of the definition, so the ``input``/``item`` aliases are decided
            as at run time; ``None`` treats them as aliases.
    """
    found: set[str] = set()
    try:
        pairs = list(iter_templates(value))
    except TemplateError:
        return found
    for _, expression in pairs:
        try:
            ref = parse_reference(expression, None if node_ids is None else _ids_for_aliases(node_ids))
        except TemplateError:
            continue
        if ref.kind is RefKind.NODE and ref.node_id is not None:
            found.add(ref.node_id)
    return found


class _AliasOnly(Collection[str]):
    """Answers ``in`` for the alias decision, but accepts every node id (no unknown-node check)."""

    def __init__(self, ids: Collection[str]) -> None:
        self._ids = ids

    def __contains__(self, item: object) -> bool:
        return True if item not in ("input", "item") else item in self._ids

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)


def _ids_for_aliases(ids: Collection[str]) -> Collection[str]:
    return _AliasOnly(ids)


@dataclass(frozen=True, slots=True)
class TemplateScope:
    """Everything a template can see at one point of one execution.

    The engine builds one per node attempt (and one for ``output_mapping`` and exit handlers).

    Attributes:
        workflow_input: the execution's input.
        outputs: the output of every node that *completed*, by node id. A node that was skipped,
            not taken, failed or has not run is absent, and references to it resolve to null.
        node_ids: every node id of the definition; a reference to an id outside it is an error.
            Empty means "unknown": then any absent id resolves to null.
        map_item: the current map item, or ``UNSET`` outside a map iteration.
        map_index: the current map index, or ``None`` outside a map iteration.
        loop_iteration: the current loop iteration (from 0), or ``None`` outside a loop.
        workflow_status: the execution status, for exit handlers.
        workflow_error: the execution error, for exit handlers.
    """

    workflow_input: JsonValue = field(default_factory=dict)
    outputs: Mapping[str, JsonValue] = field(default_factory=dict)
    node_ids: frozenset[str] = frozenset()
    map_item: JsonValue | Unset = UNSET
    map_index: int | None = None
    loop_iteration: int | None = None
    workflow_status: str | None = None
    workflow_error: str | None = None

    def with_outputs(self, outputs: Mapping[str, JsonValue]) -> TemplateScope:
        """A copy with these node outputs (replacing the current ones)."""
        return replace(self, outputs=outputs)

    def with_map_item(self, item: JsonValue, index: int) -> TemplateScope:
        """A copy for one map iteration."""
        return replace(self, map_item=item, map_index=index)

    def with_loop_iteration(self, iteration: int) -> TemplateScope:
        """A copy for one loop iteration."""
        return replace(self, loop_iteration=iteration)

    def with_status(self, status: str | None, error: str | None = None) -> TemplateScope:
        """A copy for exit handlers, with the execution's status and error."""
        return replace(self, workflow_status=status, workflow_error=error)

    def _parse(self, expression: str) -> Reference:
        if self.node_ids:
            known = self.node_ids if self.outputs.keys() <= self.node_ids else self.node_ids.union(self.outputs)
            return _parse_known(expression, known)
        return parse_reference(expression, _AliasOnly(self.outputs.keys()))


@functools.lru_cache(maxsize=4096)
def _parse_known(expression: str, node_ids: frozenset[str]) -> Reference:
    """:func:`parse_reference` of a definition's template, parsed once (a node's input is resolved every attempt)."""
    return parse_reference(expression, node_ids)


def to_text(value: JsonValue) -> str:
    """How a value reads when substituted into a longer string (and in ``'{{x}}'`` conditions).

    Strings as they are, null as ``""``, booleans as ``true``/``false``, numbers as Python writes
    them, lists and objects as JSON.
    """
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    return json.dumps(value, ensure_ascii=False, default=str)


def resolve(value: JsonValue, scope: TemplateScope, *, path: str = "") -> JsonValue:
    """Resolve every template and operator in a value.

    Args:
        value: any JSON value of the definition (a string, or dicts/lists holding strings).
        scope: what the templates can see.
        path: where the value sits in the definition (``input``), used in error messages.

    Returns:
        A new value; strings that are exactly one template keep the referenced value's type.

    Raises:
        TemplateError: a template is malformed, names an unknown node, reads a field that a
            completed node's output does not have, or uses ``_map_item``/``_loop_iteration``
            outside a map/loop.
    """
    return _resolve(value, scope, path, lenient=False)


def render(value: JsonValue, scope: TemplateScope, *, path: str = "") -> str:
    """Resolve a value and return it as text (for instructions and prompts)."""
    return to_text(resolve(value, scope, path=path))


def _resolve(value: JsonValue, scope: TemplateScope, path: str, lenient: bool) -> JsonValue:
    if isinstance(value, str):
        return _resolve_string(value, scope, path, lenient)
    if isinstance(value, Mapping):
        operator = operator_of(value)
        if operator is not None:
            return _apply(operator, value[operator], scope, _join(path, operator), lenient)
        return {key: _resolve(item, scope, _join(path, str(key)), lenient) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_resolve(item, scope, _join(path, index), lenient) for index, item in enumerate(value)]
    return value


def _resolve_string(text: str, scope: TemplateScope, path: str, lenient: bool) -> JsonValue:
    try:
        spans = find_templates(text)
    except TemplateError as exc:
        raise exc.at(path) from None
    if not spans:
        return text
    if len(spans) == 1 and spans[0][0] == 0 and spans[0][1] == len(text):
        return resolve_reference(spans[0][2], scope, lenient=lenient, path=path)
    pieces: list[str] = []
    last = 0
    for start, end, expression in spans:
        pieces.append(text[last:start])
        pieces.append(to_text(resolve_reference(expression, scope, lenient=lenient, path=path)))
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


def _apply(operator: str, operands: JsonValue, scope: TemplateScope, path: str, lenient: bool) -> JsonValue:
    if not isinstance(operands, list):
        raise TemplateError(operator, f"{operator} takes a list of values", path)
    if operator == "coalesce":
        for index, operand in enumerate(operands):
            result = _resolve(operand, scope, _join(path, index), lenient=True)
            if result is not None:
                return result
        return None
    values = [_resolve(operand, scope, _join(path, index), lenient) for index, operand in enumerate(operands)]
    present = [v for v in values if v is not None]
    if not present:
        return None
    lists = [v for v in present if isinstance(v, list)]
    if len(lists) == len(present):
        return [item for v in lists for item in v]
    return "".join(to_text(v) for v in present)


def resolve_reference(expression: str, scope: TemplateScope, *, lenient: bool = False, path: str = "") -> JsonValue:
    """Resolve one template expression (the text between the braces).

    Args:
        expression: e.g. ``"step1.output.items.0"``.
        scope: what the template can see.
        lenient: treat a missing field of a completed node (and ``_map_item`` outside a map) as
            null instead of an error, as inside ``coalesce``.
        path: where the template sits, for error messages.

    Returns:
        The referenced value (null for skipped/not-run nodes and missing input keys).

    Raises:
        TemplateError: see :func:`resolve`.
    """
    try:
        ref = scope._parse(expression)
        return _lookup(ref, scope, lenient)
    except TemplateError as exc:
        raise exc.at(path) from None


def _lookup(ref: Reference, scope: TemplateScope, lenient: bool) -> JsonValue:
    if ref.kind is RefKind.INPUT:
        return _walk_data(ref, scope.workflow_input, "the workflow input", lenient)
    if ref.kind is RefKind.STATUS:
        return scope.workflow_status
    if ref.kind is RefKind.ERROR:
        return scope.workflow_error
    if ref.kind is RefKind.MAP_ITEM:
        if isinstance(scope.map_item, Unset):
            return _outside(ref, "a map iteration (the target node of a map)", lenient)
        return _walk_data(ref, scope.map_item, "the map item", lenient)
    if ref.kind is RefKind.MAP_INDEX:
        if scope.map_index is None:
            return _outside(ref, "a map iteration (the target node of a map)", lenient)
        return scope.map_index
    if ref.kind is RefKind.LOOP_ITERATION:
        if scope.loop_iteration is None:
            return _outside(ref, "a loop iteration (the target node of a loop, or its condition)", lenient)
        return scope.loop_iteration
    assert ref.node_id is not None
    if ref.node_id not in scope.outputs:
        return None
    return _walk_output(ref, scope.outputs[ref.node_id], lenient)


def _outside(ref: Reference, where: str, lenient: bool) -> JsonValue:
    if lenient:
        return None
    raise TemplateError(ref.template, f"only defined inside {where}")


def _step(container: JsonValue, segment: str) -> tuple[bool, JsonValue]:
    if isinstance(container, Mapping):
        return (True, container[segment]) if segment in container else (False, None)
    if isinstance(container, list | tuple) and segment.isdigit():
        index = int(segment)
        return (True, container[index]) if index < len(container) else (False, None)
    return False, None


def json_kind(value: JsonValue) -> str:
    """The JSON kind of a value, for error messages: one of :data:`JSON_KINDS`, else its Python type's name."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _kind_of(value: JsonValue) -> str:
    kind = json_kind(value)
    if kind == "null":
        return "null value"
    return kind if kind in JSON_KINDS else "object"


def _walk_data(ref: Reference, value: JsonValue, what: str, lenient: bool) -> JsonValue:
    """Walk input-like data: a missing key is null; looking inside a scalar is an error."""
    current = value
    for depth, segment in enumerate(ref.path):
        if current is None:
            return None
        if not isinstance(current, Mapping | list | tuple):
            if lenient:
                return None
            where = ".".join(ref.path[:depth]) or what
            raise TemplateError(ref.template, f"{where} is a {_kind_of(current)}, it has no field {segment!r}")
        found, current = _step(current, segment)
        if not found:
            return None
    return current


def _walk_output(ref: Reference, output: JsonValue, lenient: bool) -> JsonValue:
    """Walk a completed node's output: every step must exist."""
    current = output
    for depth, segment in enumerate(ref.path):
        found, following = _step(current, segment)
        if not found:
            if lenient:
                return None
            where = ".".join((f"{ref.node_id}.output", *ref.path[:depth]))
            if isinstance(current, list | tuple) and segment.isdigit():
                problem = f"{where} has {len(current)} item(s), there is no index {segment}"
            elif isinstance(current, Mapping):
                fields = ", ".join(map(str, list(current)[:10])) or "none"
                problem = f"{where} has no field {segment!r} (fields: {fields})"
            else:
                problem = f"{where} is a {_kind_of(current)}, it has no field {segment!r}"
            raise TemplateError(ref.template, f"node {ref.node_id!r} completed but {problem}")
        current = following
    return current
