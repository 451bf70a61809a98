"""The JSON Schema of the workflow definition format, generated from the pydantic models.

``docs/workflow-schema.json`` is this module's output; a unit test keeps the two equal.
Regenerate with ``python -m a2amesh.workflow.schema_export docs/workflow-schema.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from a2amesh.workflow.dag.definition import WorkflowDefinition

__all__ = ["SCHEMA_ID", "render_schema", "workflow_json_schema"]

SCHEMA_ID = "https://a2amesh.dev/schemas/workflow-definition.json"


def workflow_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a workflow definition block.

    Every field appears under its snake_case name and under each accepted alias (camelCase, SAM
    and Argo spellings); durations accept seconds or text such as ``"30s"``.
    """
    schema = WorkflowDefinition.model_json_schema(mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        **schema,
        "title": "a2amesh workflow definition",
    }


def render_schema() -> str:
    """The schema as the text of ``docs/workflow-schema.json``."""
    return json.dumps(workflow_json_schema(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the schema to the path given, or print it."""
    args = sys.argv[1:] if argv is None else argv
    text = render_schema()
    if args:
        Path(args[0]).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
