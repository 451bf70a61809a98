"""Human review through MCP elicitation: a paused run's ``review_request`` as a form, the form's answer as a resume.

Elicitation forms are flat (top-level properties of primitive types only), so the form holds ``decision``
(approve / edit / reject), ``reason``, and the edit: one field per property of ``edit_schema`` when it is a
flat object of primitives (pre-filled from the data under review; an edit changes the fields given), else one
``data`` field holding the edited data as JSON. The executor checks an edit against ``edit_schema``; a refused
edit is asked again with the refusal in the message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from a2amesh.protocol import Task
from a2amesh.protocol.vocabulary import REVIEW_REQUEST

DECISIONS = ("approve", "edit", "reject")
DECISION_FIELD = "decision"
REASON_FIELD = "reason"
JSON_FIELD = "data"
_PRIMITIVES = frozenset({"string", "number", "integer", "boolean"})
_FIELD_KEYS = ("type", "title", "description", "enum", "minimum", "maximum", "minLength", "maxLength", "format")


class AnswerError(ValueError):
    """A form answer that cannot be turned into a decision (says which field and why)."""


def review_request(task: Task) -> dict[str, Any] | None:
    """The ``review_request`` DataPart of a task paused for a human, or None."""
    message = task.status.message
    for part in message.parts if message is not None else []:
        if isinstance(part.data, dict) and part.data.get("type") == REVIEW_REQUEST:
            return dict(part.data)
    return None


def _flat_fields(edit_schema: Any) -> dict[str, dict[str, Any]] | None:
    """The edit schema's properties as form fields, or None when it is not a flat object of primitives."""
    if not isinstance(edit_schema, dict) or edit_schema.get("type") != "object":
        return None
    props = edit_schema.get("properties")
    if not isinstance(props, dict) or not props:
        return None
    fields: dict[str, dict[str, Any]] = {}
    for name, prop in props.items():
        if name in (DECISION_FIELD, REASON_FIELD) or not isinstance(prop, dict) or prop.get("type") not in _PRIMITIVES:
            return None
        fields[name] = {k: v for k, v in prop.items() if k in _FIELD_KEYS}
    return fields


@dataclass(frozen=True)
class ReviewForm:
    """The elicitation built from one review request."""

    review: dict[str, Any]

    @property
    def path(self) -> str | None:
        """The review's node path (sent back so the answer reaches that review)."""
        path = self.review.get("path")
        return str(path) if path else None

    def message(self, problem: str | None = None) -> str:
        """What the user reads: the prompt, the data under review, and a previous refusal if any."""
        lines = []
        if problem:
            lines += [f"Your last answer was refused: {problem}", ""]
        lines.append(str(self.review.get("prompt") or "A run waits for your review."))
        data = self.review.get("data")
        if data is not None:
            lines += ["", "Data under review:", json.dumps(data, indent=2, default=str)]
        lines += ["", "Approve it, reject it, or edit it (choose 'edit' and change the fields)."]
        return "\n".join(lines)

    def schema(self) -> dict[str, Any]:
        """The form's requested schema (flat, primitives only)."""
        props: dict[str, Any] = {
            DECISION_FIELD: {"type": "string", "title": "Decision", "enum": list(DECISIONS)},
            REASON_FIELD: {"type": "string", "title": "Reason", "description": "Why (kept with the decision)."},
        }
        fields = _flat_fields(self.review.get("edit_schema"))
        data = self.review.get("data")
        if fields is not None:
            for name, prop in fields.items():
                field = dict(prop)
                if isinstance(data, dict) and name in data and isinstance(data[name], str | int | float | bool):
                    field["default"] = data[name]
                props[name] = field
        else:
            props[JSON_FIELD] = {
                "type": "string",
                "title": "Edited data (JSON)",
                "description": "Only for 'edit': the data under review as you want it, as JSON.",
            }
        return {"type": "object", "properties": props, "required": [DECISION_FIELD]}

    def answer(self, content: dict[str, Any] | None) -> dict[str, Any]:
        """The resume body (``{"decision", "data"?, "reason"?, "path"?}``) for an accepted form's content.

        Raises:
            AnswerError: no or an unknown decision, or an edit whose data is not valid JSON.
        """
        content = content or {}
        decision = content.get(DECISION_FIELD)
        if decision not in DECISIONS:
            raise AnswerError(f"{DECISION_FIELD}: {decision!r} is not one of {', '.join(DECISIONS)}")
        body: dict[str, Any] = {"decision": decision}
        reason = content.get(REASON_FIELD)
        if isinstance(reason, str) and reason.strip():
            body["reason"] = reason.strip()
        if self.path:
            body["path"] = self.path
        if decision == "edit":
            body["data"] = self._edited(content)
        return body

    def _edited(self, content: dict[str, Any]) -> Any:
        fields = _flat_fields(self.review.get("edit_schema"))
        if fields is not None:
            data = self.review.get("data")
            edited = dict(data) if isinstance(data, dict) else {}
            edited.update({k: v for k, v in content.items() if k in fields and v is not None})
            return edited
        text = content.get(JSON_FIELD)
        if not isinstance(text, str) or not text.strip():
            raise AnswerError(f"{JSON_FIELD}: an edit needs the edited data as JSON")
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise AnswerError(f"{JSON_FIELD}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from e
