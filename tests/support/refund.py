"""The refund workflow the review tests share: an agent proposes, a human reviews (and may edit), an agent pays."""

from __future__ import annotations

from typing import Any


async def propose(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"amount": input["amount"]}


async def pay(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"paid": input["amount"]}


def refund_workflow(name: str = "refund", *, header: str = "") -> str:
    """The refund DAG under ``name``; ``header`` adds top-level YAML lines (a description, schemas)."""
    return f"""
name: {name}
{header}nodes:
  - {{id: propose, type: agent, agent_name: propose, input: {{amount: "{{{{workflow.input.amount}}}}"}}}}
  - id: review
    type: human_review
    depends_on: [propose]
    prompt: "Refund {{{{propose.output.amount}}}}?"
    data: "{{{{propose.output}}}}"
    edit_schema: {{type: object, properties: {{amount: {{type: number, maximum: 100}}}}, required: [amount]}}
  - {{id: pay, type: agent, agent_name: pay, depends_on: [review], input: "{{{{review.output}}}}"}}
output_mapping: {{paid: "{{{{pay.output.paid}}}}"}}
"""


REFUND = refund_workflow()
