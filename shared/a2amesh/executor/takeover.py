"""Leases and takeovers: renew what this replica owns, take over what nobody does.

Every running execution is owned under a lease (``owner:epoch``) that its replica renews every
``lease_ttl/3``; a renewal refused stops the runner before any side effect. The executor's tick
(:meth:`Takeover.tick`) fires due timers of owned executions, brings back parked ones whose review
timer is due, releases the leases of replicas whose presence expired (a crash, found before their leases
expire: :mod:`a2amesh.executor.presence`), and adopts executions whose lease expired or was released
(:meth:`Takeover.adopt`). A finished execution
whose answer never went out is answered again, a bounded number of times (:meth:`Takeover.retry_final`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from a2amesh import faults, metrics, tracing
from a2amesh.errors import TransportError
from a2amesh.executor.context import ExecutorContext, stored_reply_to
from a2amesh.executor.runner import ExecutionRunner, open_runner
from a2amesh.store.executions import ExecutionRecord
from a2amesh.store.tasks import cancellers_of
from a2amesh.worker.control import answer_canceller
from a2amesh.worker.replies import ReplyInfo
from a2amesh.workflow.events import TimerFired

__all__ = ["FINAL_REPLY_BACKOFF", "FINAL_REPLY_MAX_BACKOFF", "FINAL_REPLY_TRIES", "Takeover"]

FINAL_REPLY_TRIES = 6
"""Takeover tries to publish a finished execution's unanswered final before giving it up (docs/protocol.md §6)."""
FINAL_REPLY_BACKOFF = 1.0
"""Seconds before the second such try; doubled for each next one, at most :data:`FINAL_REPLY_MAX_BACKOFF`."""
FINAL_REPLY_MAX_BACKOFF = 60.0

_WAKE = TimerFired(timer_id="__wake__")


class Takeover:
    """Renews this replica's leases and takes over executions nobody owns (see the module docstring).

    Args:
        ctx: the replica's collaborators.

    Attributes:
        final_reply_tries: tries to publish an unanswered final before giving up.
        final_reply_backoff: seconds before the second try (doubled for each next one).
    """

    def __init__(self, ctx: ExecutorContext) -> None:
        self.ctx = ctx
        self.final_reply_tries = FINAL_REPLY_TRIES
        self.final_reply_backoff = FINAL_REPLY_BACKOFF
        self._final_tries: dict[str, tuple[int, float]] = {}  # unanswered finals: (failed tries, next try)

    async def renew_loop(self) -> None:
        """Renew the leases of the executions driven here every ``lease_ttl/3``; stop a runner whose lease is
        lost."""
        ctx = self.ctx
        runners = ctx.drivers.runners
        while True:
            await asyncio.sleep(ctx.settings.lease_ttl / 3)
            tokens = {i: r.token for i, r in runners.items() if not r.lost and not r.state.finished}
            if not tokens:
                continue
            faults.crash_point("before_lease_renew")
            try:
                held = await ctx.store.renew(tokens)
            except Exception as e:
                ctx.log.warning("lease.renew_failed", error=str(e) or type(e).__name__)
                continue
            for execution_id, ok in held.items():
                runner = runners.get(execution_id)
                if not ok and runner is not None:
                    ctx.log.warning("execution.lease_lost", execution_id=execution_id)
                    runner.lost = True
                    runner.inbox.put_nowait(_WAKE)

    async def tick(self) -> None:
        """Fire due timers of owned executions; take over executions whose lease expired."""
        ctx = self.ctx
        runners = ctx.drivers.runners
        for execution_id in await ctx.store.due():
            runner = runners.get(execution_id)
            if runner is not None:
                await ctx.store.reindex_timers(execution_id, runner.poke())
            elif not ctx.stopping() and ctx.free_slots() > 0:
                await self.adopt(execution_id)  # a parked (paused) execution whose review timer is due
        if ctx.stopping():
            return
        for instance in await ctx.store.presence.dead():
            if instance != ctx.instance:
                released = await ctx.store.presence.release_dead(instance)
                ctx.log.info("executor.presence_expired", dead=instance, released=len(released))
        if ctx.free_slots() <= 0:
            return
        for execution_id in await ctx.store.orphaned():
            if execution_id not in runners and ctx.free_slots() > 0:
                await self.adopt(execution_id)

    async def adopt(self, execution_id: str) -> bool:
        """Take over an execution whose lease expired (or answer a finished one that never answered)."""
        ctx = self.ctx
        outcome, epoch = await ctx.store.acquire(execution_id, ctx.instance)
        if outcome == "finished":
            record = await ctx.store.execution(execution_id) or ExecutionRecord()
            if not record.final_published:
                await self.retry_final(execution_id, record)
            else:
                await ctx.store.mark_published(execution_id)  # a stray takeover entry: drop it
            return False
        if outcome != "acquired":
            return False
        record = await ctx.store.execution(execution_id) or ExecutionRecord()
        workflow = record.workflow
        if workflow:
            # the listing entries ride in the create's pipeline, not its script: written again in case one
            # was lost with the connection, the ones already there kept
            parent = ReplyInfo.model_validate_json(record.reply or "{}").parent_execution
            await ctx.store.index_created(
                execution_id,
                workflow=workflow,
                status=record.status or "running",
                timers={},
                repair=True,
                parent=parent,
                at=record.created,
            )
        raw = await ctx.store.state(execution_id)
        engine = await ctx.engine_for(record.digest)
        if raw is None or engine is None:
            ctx.log.error("execution.cannot_resume", execution_id=execution_id, digest=record.digest)
            await ctx.store.release(execution_id, f"{ctx.instance}:{epoch}", handover=False)
            return False
        reply = ReplyInfo.model_validate_json(record.reply or "{}")
        runner = open_runner(ctx.deps, engine, raw, epoch=epoch, reply=reply)  # a scheduled branch run: its graph
        if record.cancel:
            runner.cancel()
            cancellers = cancellers_of(record.extra.get("canceled_by"), record.extra.get("canceled_also"))
            if cancellers:
                ctx.background.spawn(
                    self._answer_cancellers(runner, cancellers), name=f"answer-cancellers-{execution_id}"
                )
        next_due = min(runner.state.timers.values(), default=None)
        await ctx.store.reindex_timers(execution_id, None if next_due is None else int(next_due * 1000))
        ctx.log.info("execution.adopted", execution_id=execution_id, epoch=epoch, paused=runner.parked)
        tracing.event(runner.span, "a2amesh.takeover", {"a2amesh.epoch": epoch, "a2amesh.instance": ctx.instance})
        if metrics.enabled:
            metrics.takeover(runner.state.workflow)
        if runner.parked:
            # a paused execution taken back for a due review timer, or one whose pause was not answered yet
            runner.poke()
            ctx.drivers.launch(runner, [], before=runner.republish_pause)
        else:
            ctx.drivers.launch(runner, [], before=runner.resume_calls)
        return True

    async def _answer_cancellers(self, runner: ExecutionRunner[Any], cancellers: list[str]) -> None:
        """Answer the CancelTasks that marked an execution whose holder died: every replica that got one left it
        to that holder, so they are answered here, once the cancellation applied by this takeover is stored."""
        ctx = self.ctx
        await asyncio.shield(runner.finished)
        task = await ctx.tasks.get(runner.task_id)
        if task is not None and task.status.state.terminal:
            for canceller in cancellers:
                await answer_canceller(ctx.bus, canceller, runner.state.workflow, task, log=ctx.log)

    async def retry_final(self, execution_id: str, record: ExecutionRecord) -> None:
        """Publish the answer of a finished execution that was never answered: a few tries with backoff, then
        give up with one log line (the final task stays in Redis, where GetTask answers it)."""
        tries, next_at = self._final_tries.get(execution_id, (0, 0.0))
        if time.monotonic() < next_at:
            return
        try:
            await self._publish_orphaned_final(execution_id, record)
        except TransportError as e:
            tries += 1
            if tries < self.final_reply_tries:
                delay = min(self.final_reply_backoff * 2 ** (tries - 1), FINAL_REPLY_MAX_BACKOFF)
                self._final_tries[execution_id] = (tries, time.monotonic() + delay)
                return
            self._final_tries.pop(execution_id, None)
            self.ctx.log.error(
                "execution.final_undeliverable",
                execution_id=execution_id,
                workflow=record.workflow,
                reply_to=stored_reply_to(record),
                tries=tries,
                error=str(e),
            )
            await self.ctx.store.mark_published(execution_id)  # given up: no replica tries it again
            return
        self._final_tries.pop(execution_id, None)

    async def _publish_orphaned_final(self, execution_id: str, record: ExecutionRecord) -> None:
        ctx = self.ctx
        raw = await ctx.store.state(execution_id)
        engine = await ctx.engine_for(record.digest)
        if raw is None or engine is None:
            return
        reply = ReplyInfo.model_validate_json(record.reply or "{}")
        runner = open_runner(ctx.deps, engine, raw, epoch=record.epoch or 1, reply=reply)
        await runner.publish_final()
