"""Python handlers of the example agents in this folder (found beside the YAML files)."""

from __future__ import annotations

from typing import Any


async def echo(input: Any, ctx: Any) -> Any:
    """Return the input unchanged."""
    return input


async def validate_order(order: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Check an order's lines add up to its total and nothing is out of stock."""
    reasons = []
    items = order.get("items", [])
    if not items:
        reasons.append("the order has no items")
    computed = round(sum(i.get("quantity", 0) * i.get("unit_price", 0) for i in items), 2)
    if "total" in order and abs(computed - float(order["total"])) > 0.005:
        reasons.append(f"total {order['total']} does not match the items ({computed})")
    for i in items:
        if i.get("quantity", 0) <= 0:
            reasons.append(f"item {i.get('sku')} has a non-positive quantity")
    return {"order_id": order.get("order_id"), "valid": not reasons, "reasons": reasons, "computed_total": computed}


async def text_stats(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Count words, lines and characters of a text, reporting progress as it goes."""
    text = str(input.get("text", ""))
    await ctx.emit_status("counting")
    words = text.split()
    return {
        "words": len(words),
        "lines": len(text.splitlines()) or (1 if text else 0),
        "characters": len(text),
        "longest_word": max(words, key=len) if words else None,
    }
