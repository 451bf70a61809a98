"""Task records in Redis: claims, state writes, cancel marks, subscribers, listing (SPEC §3.3, §3.6)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from a2amesh.errors import StateConflict
from a2amesh.protocol import Message, Part, Role, Task, TaskState, TaskStatus
from a2amesh.protocol.base import utc_timestamp
from a2amesh.protocol.jsonrpc import JsonRpcId
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis, Scripts, dedicated_client, load_script, now_ms
from a2amesh.store.shards import newest

CANCELED_TEXT = "canceled by request"
"""The status message of a task stored CANCELED by a CancelTask."""


@dataclass(frozen=True, slots=True)
class Subscriber:
    """A reply subject that wants a task's answers, and the JSON-RPC id of the request that asked for them.

    One member of the task's subscriber set: ``{subject} {id as JSON}`` (a reply subject has no space). A member
    without an id (a subject alone) is answered with the task id as ``id``.
    """

    subject: str
    request_id: JsonRpcId = None
    has_id: bool = True

    def member(self) -> str:
        """The set member that stores it."""
        return f"{self.subject} {json.dumps(self.request_id)}" if self.has_id else self.subject

    @classmethod
    def parse(cls, member: str) -> Subscriber:
        """A stored member, read."""
        subject, _, raw = member.partition(" ")
        if raw:
            try:
                value = json.loads(raw)
            except ValueError:
                value = ...
            if value is None or isinstance(value, str | int | float):
                return cls(subject, value)
        return cls(subject, None, has_id=False)

    def answer_id(self, task_id: str) -> JsonRpcId:
        """The ``id`` its answers carry: its request's, else the task id."""
        return self.request_id if self.has_id else task_id


@dataclass
class TaskRecordView:
    """What a task script returned: an outcome, the stored state and Task, and extra subscribers."""

    outcome: str
    state: TaskState | None
    task: Task | None
    subscribers: list[Subscriber] = field(default_factory=list)
    owner: str = ""
    fence: str = ""
    """A claim's fencing token (``claimed`` only): the writes of the claim's worker carry it."""


def task_record_json(task: Task) -> str:
    """A Task as its record stores it (ProtoJSON text)."""
    return task.model_dump_json(by_alias=True, exclude_none=True)


def record_view(raw: list[Any], *, owner_index: int | None = None, fence_index: int | None = None) -> TaskRecordView:
    """What a task script returned (``task_record.lua``), read; ``owner_index``/``fence_index``: the position
    of the owner (``task_cancel.lua``) or the fencing token (``task_claim.lua``) before the subscribers."""
    outcome, state, record = str(raw[0]), str(raw[1] or ""), str(raw[2] or "")
    rest = [str(x) for x in raw[3:]]
    owner = fence = ""
    if owner_index is not None:
        owner, rest = (rest[0] if rest else ""), rest[1:]
    if fence_index is not None:
        fence, rest = (rest[0] if rest else ""), rest[1:]
    return TaskRecordView(
        outcome=outcome,
        state=TaskState(state) if state else None,
        task=Task.model_validate_json(record) if record else None,
        subscribers=[Subscriber.parse(s) for s in rest],
        owner=owner,
        fence=fence,
    )


def canceled_task(task: Task) -> Task:
    """``task`` as a CancelTask stores it: CANCELED, with :data:`CANCELED_TEXT` as its status message."""
    message = Message(
        message_id=f"{task.id}-canceled",
        role=Role.AGENT,
        parts=[Part.of_text(CANCELED_TEXT)],
        task_id=task.id,
        context_id=task.context_id,
    )
    status = TaskStatus(state=TaskState.CANCELED, timestamp=utc_timestamp(), message=message)
    return task.model_copy(update={"status": status})


class TaskStore:
    """The task records of one namespace.

    Args:
        redis: the process's Redis client.
        keys: the namespace's key builder.
        retention: seconds a written task record is kept.
    """

    def __init__(self, redis: Redis, keys: Keys, *, retention: float, queued_ttl: float) -> None:
        self._r = redis
        self._k = keys
        self._retention = int(retention)
        self._queued_ttl = int(queued_ttl)
        self._scripts = Scripts(redis, "task_claim", "task_write", durable=True)
        # connections of their own: renewals must not wait behind thousands of final writes
        self._renew_redis = dedicated_client(redis)
        self._renew_scripts = Scripts(self._renew_redis, "claim_renew")
        self._checkpoints = Scripts(redis, "task_checkpoint")
        self._cancel = redis.register_script(load_script("task_cancel"))
        self._cancel_final = redis.register_script(load_script("task_cancel_final"))
        self._subscribe = redis.register_script(load_script("task_subscribe"))
        self._complete_canceled = redis.register_script(load_script("task_complete_canceled"))

    async def claim(self, task: Task, agent: str, instance: str, claim_ttl: float) -> TaskRecordView:
        """Claim ``task`` for ``instance``: ``claimed`` (with its fencing token, ``view.fence``), ``done``
        (already final), ``canceled`` or ``busy``."""
        args = [
            instance,
            int(claim_ttl * 1000),
            now_ms(),
            task.to_json_bytes(),  # task_record_json's text as UTF-8, without decoding it to encode it again
            task.status.state.value,
            agent,
            max(self._retention, self._queued_ttl),
        ]

        def build(pipe: Any) -> None:
            self._scripts.queue(pipe, "task_claim", self._k.task_record(task.id), args)
            pipe.execute_command("ZADD", self._k.agent_tasks(agent, self._k.shard(task.id)), now_ms(), task.id)

        raw, _ = await self._scripts.run(build)
        return record_view(raw, fence_index=3)

    async def renew(
        self, task_ids: list[str], instance: str, claim_ttl: float, fences: dict[str, str] | None = None
    ) -> tuple[set[str], set[str]]:
        """Extend the claims of running tasks in one round trip.

        ``fences``: the claims' fencing tokens by task id; a task given one is renewed only while no later
        claim took it over, and its claim is taken back if it lapsed meanwhile with nobody taking over.
        Returns the tasks whose claim another instance took over, and the tasks that carry a cancel mark.
        """
        if not task_ids:
            return set(), set()
        ttl = int(claim_ttl * 1000)
        scripts = self._renew_scripts
        fences = fences or {}

        def build(pipe: Any) -> None:
            for task_id in task_ids:
                fence = fences.get(task_id, "")
                if fence:
                    keys = [self._k.claim(task_id), self._k.task(task_id)]
                    scripts.queue(pipe, "claim_renew", keys, [instance, ttl, fence])
                else:
                    scripts.queue(pipe, "claim_renew", [self._k.claim(task_id)], [instance, ttl])
                pipe.hget(self._k.task(task_id), "cancel")

        raw = await scripts.run(build)
        lost = {t for i, t in enumerate(task_ids) if not raw[2 * i]}
        canceled = {t for i, t in enumerate(task_ids) if raw[2 * i + 1] == "1"}
        return lost, canceled

    async def aclose(self) -> None:
        """Close the connections kept for claim renewals."""
        await self._renew_redis.aclose()

    async def still_owner(self, task_id: str, instance: str, claim_ttl: float, fence: str) -> bool:
        """Whether the claim with token ``fence`` still holds the task; if so it is renewed (and taken back if
        it lapsed with nobody taking over), so its holder has ``claim_ttl`` before anyone else can claim it."""
        lost, _ = await self.renew([task_id], instance, claim_ttl, {task_id: fence})
        return task_id not in lost

    async def write(
        self,
        task: Task,
        agent: str,
        instance: str,
        *,
        release: bool,
        record: bytes | None = None,
        fence: str = "",
    ) -> TaskRecordView:
        """Store the task's current record; with ``release`` the claim is dropped (a final write).

        ``record``: the task's record already encoded (:func:`task_record_json`'s text as UTF-8 bytes), for
        a caller that sends the same JSON elsewhere. ``fence``: the writer's claim token. Returns ``written``,
        ``terminal`` (an earlier final stands and is returned instead) or ``fenced`` (a later claim took the
        task over: nothing written).
        """
        args = [
            instance,
            task.to_json_bytes() if record is None else record,
            task.status.state.value,
            now_ms(),
            self._retention,
            "1" if release else "0",
            fence,
        ]

        def build(pipe: Any) -> None:
            self._scripts.queue(pipe, "task_write", self._k.task_record(task.id), args)
            pipe.execute_command("ZADD", self._k.agent_tasks(agent, self._k.shard(task.id)), now_ms(), task.id)

        raw, _ = await self._scripts.run(build)
        return record_view(raw)

    async def mark_canceled(self, task_id: str) -> TaskRecordView:
        """Set the cancel mark: ``terminal`` (too late) or ``marked`` (with the live owner, if any)."""
        raw = await self._cancel(
            keys=[self._k.task(task_id), self._k.claim(task_id)], args=[now_ms(), self._queued_ttl]
        )
        return record_view(raw, owner_index=3)

    async def cancel(self, task_id: str, agent: str, request: str = "", *, workflow: bool = False) -> TaskRecordView:
        """CancelTask (``task_cancel_final.lua``): set the cancel mark, and store the task CANCELED when nobody holds
        it. Returns ``canceled`` (stored now, its subscribers with it; or stored already by this same ``request``,
        then without them), ``marked`` (a live claim: its ``owner`` stops the task and stores its final) or
        ``terminal`` (a final stands: it is returned); a ``workflow``'s task: ``execution`` when its execution exists
        (the executor cancels that).

        Raises:
            StateConflict: the record kept changing under the cancel (written between each read and the script).
        """
        key = self._k.task(task_id)
        for _ in range(50):
            record, updated = await self._r.hmget(key, ["record", "updated"])
            task = (
                Task.model_validate_json(record)
                if record
                else Task(id=task_id, status=TaskStatus(state=TaskState.SUBMITTED))
            )
            canceled = canceled_task(task)
            args: list[str | int] = [
                now_ms(),
                str(updated or ""),
                task_record_json(canceled),
                max(self._retention, 1),
                agent,
                request,
            ]
            keys = [*self._k.task_record(task_id), *([self._k.execution(task_id)] if workflow else [])]
            raw = await self._cancel_final(keys=keys, args=args)
            if str(raw[0]) != "moved":
                break
        else:
            raise StateConflict(f"task {task_id} kept changing while it was being canceled")
        outcome = str(raw[0])
        view = record_view(raw, owner_index=3 if outcome in ("marked", "terminal") else None)
        if outcome == "terminal":
            by, view.owner = view.owner, ""
            if request and by == request and view.state == TaskState.CANCELED:
                view.outcome = "canceled"  # this very CancelTask stored it (answered by another replica too)
            return view
        if view.outcome == "canceled":
            await self._r.zadd(self._k.agent_tasks(agent, self._k.shard(task_id)), {task_id: now_ms()})
        return view

    async def complete_canceled(self, stored: Task, request: Task) -> Task:
        """``stored``, the final found when ``request``'s task was pulled, completed with the request's context and
        history when it is the record of a CancelTask that reached the task before its request (it knew only the
        task id: ``task_complete_canceled.lua``); any other final is returned as it is. Returns the record stored."""
        if stored.context_id is not None or stored.status.state != TaskState.CANCELED or request.context_id is None:
            return stored
        message = stored.status.message
        status = (
            stored.status
            if message is None
            else stored.status.model_copy(
                update={"message": message.model_copy(update={"context_id": request.context_id})}
            )
        )
        completed = stored.model_copy(
            update={
                "context_id": request.context_id,
                "history": request.history,
                "status": status,
                "metadata": {**(request.metadata or {}), **(stored.metadata or {})} or None,
            }
        )
        raw = await self._complete_canceled(keys=[self._k.task(stored.id)], args=[task_record_json(completed)])
        return Task.model_validate_json(raw) if raw else stored

    async def cancellers(self, task_id: str) -> list[str]:
        """The CancelTasks of the task, as the control plane names them: its ``canceled_by`` first, then the later
        ones noted before its final (``cancellers.lua``)."""
        first, also = await self._r.hmget(self._k.task(task_id), ["canceled_by", "canceled_also"])
        return cancellers_of(first, also)

    async def is_canceled(self, task_id: str) -> bool:
        """Whether the task carries a cancel mark."""
        return await self._r.hget(self._k.task(task_id), "cancel") == "1"

    async def add_subscriber(self, task_id: str, subscriber: Subscriber) -> TaskRecordView:
        """Register a reply subject (with its request's id) for the task's answers: ``added``, or ``terminal`` with
        the final record (or the interrupted one: the subscriber is answered with it)."""
        raw = await self._subscribe(
            keys=[self._k.task(task_id), self._k.subscribers(task_id)], args=[subscriber.member(), self._queued_ttl]
        )
        return record_view(raw)

    async def subscribers(self, task_id: str) -> list[str]:
        """Reply subjects registered for the task."""
        members = await self._r.smembers(self._k.subscribers(task_id))
        return sorted({Subscriber.parse(str(s)).subject for s in members})

    async def get(self, task_id: str) -> Task | None:
        """The stored Task, or None."""
        record = await self._r.hget(self._k.task(task_id), "record")
        return Task.model_validate_json(record) if record else None

    async def owner(self, task_id: str) -> str | None:
        """The instance holding a live claim on the task."""
        value = await self._r.get(self._k.claim(task_id))
        return str(value) if value else None

    async def save_checkpoint(self, task_id: str, data: str, *, fence: str = "") -> bool:
        """Store a task's resumable progress (e.g. LLM tool-loop rounds); False when ``fence`` (the writer's
        claim token) was fenced off by a later claim, and nothing was stored."""
        return bool(await self._checkpoints.call("task_checkpoint", [self._k.task(task_id)], [data, fence]))

    async def checkpoint(self, task_id: str) -> str | None:
        """The task's last checkpoint."""
        value = await self._r.hget(self._k.task(task_id), "checkpoint")
        return str(value) if value else None

    async def list(
        self, agent: str, *, context_id: str | None, state: TaskState | None, offset: int, limit: int
    ) -> tuple[list[Task], int]:
        """An agent's tasks, newest first, filtered; returns (page, total matching)."""
        shards = [self._k.agent_tasks(agent, s) for s in self._k.shards]
        ids = [task_id for task_id, _ in await newest(self._r, shards, 5000)]
        tasks: list[Task] = []
        if ids:
            pipe = self._r.pipeline(transaction=False)
            for task_id in ids:
                pipe.hget(self._k.task(str(task_id)), "record")
            for record in await pipe.execute():
                if not record:
                    continue
                t = Task.model_validate_json(record)
                if context_id and t.context_id != context_id:
                    continue
                if state and t.status.state != state:
                    continue
                tasks.append(t)
        return tasks[offset : offset + limit], len(tasks)


def cancellers_of(first: str | bytes | None, also: str | bytes | None) -> list[str]:
    """The CancelTasks noted on a task or execution hash: ``canceled_by`` and then each of ``canceled_also``."""
    named = [_text(first), *_text(also).split("\n")]
    return [n for n in named if n]


def _text(value: str | bytes | None) -> str:
    return value.decode() if isinstance(value, bytes) else value or ""
