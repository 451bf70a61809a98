"""Python tools of the example LLM agent ``order_assistant`` (found beside its YAML file)."""

from __future__ import annotations

from typing import Literal

_STATUSES: dict[str, Literal["received", "packed", "shipped", "delivered"]] = {
    "A-17": "shipped",
    "A-18": "packed",
}


def order_status(order_id: str) -> dict[str, str]:
    """Where an order is in its journey.

    Args:
        order_id: the order number, e.g. A-17.
    """
    return {"order_id": order_id, "status": _STATUSES.get(order_id, "unknown")}
