"""Python handlers of the example agents the example workflows in ../workflows call."""

from __future__ import annotations

from typing import Any


async def price_line(line: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Price one order line: quantity × unit price, 5 % off from 10 units."""
    quantity = int(line.get("quantity", 0))
    gross = quantity * float(line.get("unit_price", 0))
    discount = 0.05 if quantity >= 10 else 0.0
    return {"sku": line.get("sku"), "quantity": quantity, "line_total": round(gross * (1 - discount), 2)}


async def notify(message: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Pretend to send a notification on a channel; answer what was sent."""
    channel = message.get("channel", "email")
    text = str(message.get("message", ""))
    await ctx.emit_status(f"sending on {channel}")
    return {"channel": channel, "sent": True, "message": text}


async def job_status(job: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Report a job's progress: it is ready from the third check on (iteration 2)."""
    iteration = int(job.get("iteration", 0))
    ready = iteration >= int(job.get("ready_after", 2))
    return {"job": job.get("job"), "iteration": iteration, "ready": ready, "progress": min(100, 40 * (iteration + 1))}
