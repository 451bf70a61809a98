"""Workflow executions in Redis: records, checkpoints, event logs, leases, timers and indexes (SPEC §7).

Per execution (every key carries the ``{execution_id}`` hash tag, so each script runs on Redis Cluster):

- ``exec:{id}`` (hash): the record — workflow, digest, status, task and context ids, input, output,
  error, usage, timings, lease ``epoch``, ``cancel`` mark, ``final_published``, the caller's reply info;
- ``exec:{id}:state``: the engine's :class:`~a2amesh.workflow.dag.state.ExecutionState`, checkpointed
  after every step — whole, or split: the state without its ``nodes``, each node instance then kept in
- ``exec:{id}:state_nodes`` (hash, field = node path, value = ``ordinal JSON``), so a step writes only the
  instances it changed, and the state's ``outputs`` likewise (when split too) in
- ``exec:{id}:state_outputs`` (hash, field = node id, value = ``ordinal JSON``): a step writes only the outputs
  it changed (:meth:`ExecutionStore.state` puts the three back together);
- ``exec:{id}:nodes`` (hash): one record per node instance (field = node path);
- ``exec:{id}:events`` (stream, MAXLEN ~): the append-only event log;
- ``exec:{id}:applied`` (set): node results already applied, ``path#iteration@attempt``;
- ``exec:{id}:timers`` (zset): armed timers by due time (ms);
- ``exec:{id}:lease``: ``owner:epoch`` with a TTL, renewed by the owner.

Namespace-wide indexes, each partitioned in shards (``{idx:N}``, the shard of the execution id; readers merge
them, :mod:`a2amesh.store.shards`): ``execs`` (by start), ``execs:wf:{workflow}`` (by start),
``execs:status:{s}`` (by start; a paused execution is under ``paused``, moved there and back when it pauses
and resumes), ``timers`` (execution → next due, polled by owners) and ``leases`` (execution → lease expiry,
scanned for takeovers); and ``exec:{parent}:children`` (a parent's sub-workflow executions, by start). Index
writes are not part of the guarded scripts (they span slots); each is harmless when stale and repaired by
the next write.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, cast

from a2amesh.config import Settings
from a2amesh.jsontext import dumps_text
from a2amesh.protocol import Task
from a2amesh.store.keys import Keys
from a2amesh.store.presence import ExecutorPresence, presence_ttl
from a2amesh.store.redis import Redis, Scripts, auto_pipeline, dedicated_client, load_script, now_ms
from a2amesh.store.shards import by_shard, earliest, newest
from a2amesh.store.tasks import TaskRecordView, record_view, task_record_json

__all__ = [
    "CommitResult",
    "CreateResult",
    "ExecutionRecord",
    "ExecutionStore",
    "Listed",
    "assemble_state",
    "now_ms",
]

EVENTS_MAXLEN = 2000
"""Approximate bound of one execution's event log."""

_COMMIT_KEYS_KEPT = 4096
"""Executions whose commit keys a store keeps made (then it starts over)."""


def _strs(values: Any) -> list[str]:
    """Redis replies (decoded) as a list of str, whatever redis-py's broad types say."""
    return [str(v) for v in values or []]


def _dumps(value: Any) -> str:
    return dumps_text(value, default=str)


_SPLIT_PARTS = ("nodes", "outputs")
"""The members of a state a split checkpoint may keep in hashes of their own (``null`` in the state)."""


def _split_part(raw: Mapping[Any, Any]) -> dict[str, Any]:
    """A member of a split checkpoint from its hash (field → ``"ordinal JSON"``), in its order."""
    entries = [(str(field), str(value).split(" ", 1)) for field, value in raw.items()]
    ordered = sorted((int(ordinal), field, text) for field, (ordinal, text) in entries)
    return {field: json.loads(text) for _, field, text in ordered}


def assemble_state(text: str, nodes: Mapping[Any, Any], outputs: Mapping[Any, Any]) -> str:
    """A checkpointed state (JSON) put back together from its ``state`` text and its split parts' hashes
    (``state_nodes``, ``state_outputs``); a whole state as it is."""
    if not text.endswith("null}"):
        return text  # a whole state (a split one ends with its last split part, null)
    data = json.loads(text)
    parts = zip(_SPLIT_PARTS, (nodes, outputs), strict=True)
    split = [(name, raw) for name, raw in parts if name in data and data[name] is None]
    if not split:
        return text  # a whole state whose last member is null
    for name, raw in split:
        data[name] = _split_part(raw)
    return _dumps(data)


@dataclass(frozen=True, slots=True)
class ExecutionRecord:
    """The ``exec:{id}`` hash, typed (read when an execution is looked up, never per event).

    :meth:`from_fields` and :meth:`to_fields` map it to the stored fields and back, unchanged: the Lua
    scripts read and write those fields by name (``status``, ``epoch``, ``cancel``,
    ``final_published``), so the layout is the store's contract. Fields this class does not name are
    kept in ``extra``.

    Attributes:
        workflow: the workflow's name.
        digest: the content hash of the pinned definition.
        status: ``running``, ``paused``, ``completed``, ``failed`` or ``canceled``.
        task_id: the workflow task's id.
        context_id: the A2A context.
        input: the input (JSON text).
        output: the output (JSON text; empty until finished).
        error: the error of a failed execution.
        usage: token usage (JSON text).
        reply: how the caller wants its answer (``ReplyInfo`` JSON).
        review: the review a paused execution asks for (JSON text).
        reused_from: the execution a retry reused outputs of.
        call_depth: the depth of the call chain.
        epoch: the lease epoch.
        created: creation time (ms).
        finished: finish time (ms), if finished.
        cancel: marked for cancellation.
        final_published: the final answer went out.
        resumer: who resumed a nested pause at this leaf (reply subject).
        schedule: the schedule of a scheduled run.
        fire: a scheduled run's fire time (epoch seconds).
        extra: every other stored field, as stored.
    """

    workflow: str = ""
    digest: str = ""
    status: str = ""
    task_id: str = ""
    context_id: str = ""
    input: str = ""
    output: str = ""
    error: str = ""
    usage: str = ""
    reply: str = ""
    review: str = ""
    reused_from: str = ""
    call_depth: int = 0
    epoch: int = 0
    created: int | None = None
    finished: int | None = None
    cancel: bool = False
    final_published: bool = False
    resumer: str = ""
    schedule: str = ""
    fire: int | None = None
    extra: dict[str, str] = field(default_factory=dict)

    _TEXT: ClassVar[tuple[str, ...]] = (
        "workflow",
        "digest",
        "status",
        "task_id",
        "context_id",
        "input",
        "output",
        "error",
        "usage",
        "reply",
        "review",
        "reused_from",
        "resumer",
        "schedule",
    )
    _INT: ClassVar[tuple[str, ...]] = ("call_depth", "epoch")
    _OPTIONAL_INT: ClassVar[tuple[str, ...]] = ("created", "finished", "fire")
    _FLAG: ClassVar[tuple[str, ...]] = ("cancel", "final_published")

    @classmethod
    def from_fields(cls, raw: Mapping[str, str]) -> ExecutionRecord:
        """The record of the stored fields (a field missing or not a number reads as its default)."""
        known: dict[str, Any] = {}
        extra: dict[str, str] = {}
        names = {f.name for f in fields(cls)}
        for name, value in raw.items():
            if name in cls._TEXT:
                known[name] = value
            elif name in cls._INT:
                known[name] = int(value) if value.lstrip("-").isdigit() else 0
            elif name in cls._OPTIONAL_INT:
                known[name] = int(value) if value.lstrip("-").isdigit() else None
            elif name in cls._FLAG:
                known[name] = value == "1"
            if name not in names or not _round_trips(name, value):
                extra[name] = value  # kept as stored (unknown, or a value the typed field would respell)
        return cls(**known, extra=extra)

    def to_fields(self) -> dict[str, str]:
        """The stored fields (as :meth:`from_fields` read them: fields that were absent stay absent)."""
        out: dict[str, str] = {}
        for name in self._TEXT:
            value = getattr(self, name)
            if value:
                out[name] = value
        for name in self._INT:
            value = getattr(self, name)
            if value:
                out[name] = str(value)
        for name in self._OPTIONAL_INT:
            value = getattr(self, name)
            if value is not None:
                out[name] = str(value)
        for name in self._FLAG:
            if getattr(self, name):
                out[name] = "1"
        out.update(self.extra)
        return out


def _round_trips(name: str, value: str) -> bool:
    """Whether the typed field holding ``value`` writes it back the same (else it is kept in ``extra``)."""
    if name in ExecutionRecord._TEXT:
        return value != ""
    if name in ExecutionRecord._FLAG:
        return value == "1"
    if name in ExecutionRecord._INT:
        return value.isdigit() and value == str(int(value)) and int(value) != 0
    return value.lstrip("-").isdigit() and value == str(int(value))


@dataclass(frozen=True)
class CreateResult:
    """Outcome of :meth:`ExecutionStore.create`.

    Attributes:
        created: the record was created now (this caller owns the execution at epoch 1).
        status: the status of the existing execution when not created.
        epoch: the lease epoch.
        lease: the current lease value (``owner:epoch``), if any.
        final_published: whether the existing execution's final answer was published.
        canceled: not created because its task was canceled before it started.
    """

    created: bool
    status: str
    epoch: int
    lease: str = ""
    final_published: bool = False
    canceled: bool = False


@dataclass(frozen=True, slots=True)
class Listed:
    """Where a new execution is listed (:meth:`ExecutionStore.create`, :meth:`ExecutionStore.index_created`).

    Attributes:
        workflow: its workflow (the by-workflow listing, and its task's listing).
        status: its status when listed (``running``, ``paused``, or a status it finished with at once).
        parent: the execution whose workflow node started it (listed as its child), if any.
    """

    workflow: str
    status: str
    parent: str = ""


@dataclass(frozen=True)
class CommitResult:
    """Outcome of :meth:`ExecutionStore.commit`: ``ok``, ``stale`` (lease lost) or ``duplicate``."""

    outcome: str
    detail: str = ""
    final_task: TaskRecordView | None = None  # a finishing step's task record write (``commit(final_task=…)``)

    @property
    def ok(self) -> bool:
        """The step was written."""
        return self.outcome == "ok"


class ExecutionStore:
    """Execution state of one namespace.

    Args:
        redis: the process's Redis client (``decode_responses=True``).
        keys: the namespace's key builder.
        retention: seconds a finished execution's keys are kept.
        lease_ttl: seconds a lease lives without renewal.
    """

    @classmethod
    def for_settings(cls, redis: Redis, settings: Settings) -> ExecutionStore:
        """The namespace's executions, kept ``task_retention`` seconds, leased for ``lease_ttl``."""
        return cls(redis, Keys(settings.namespace), retention=settings.task_retention, lease_ttl=settings.lease_ttl)

    def __init__(self, redis: Redis, keys: Keys, *, retention: float, lease_ttl: float) -> None:
        self.redis = redis
        self.keys = keys
        self.retention = int(retention)
        self.lease_ttl_ms = int(lease_ttl * 1000)
        self._scripts = Scripts(redis, "exec_create", "exec_commit", "exec_index_finish", durable=True)
        self._lease_redis = dedicated_client(redis)
        self._lease_scripts = Scripts(self._lease_redis, "claim_renew")
        self.presence = ExecutorPresence(redis, self._lease_redis, keys, ttl=presence_ttl(lease_ttl))
        """Which executor replicas are alive (renewed on the lease connections)."""
        self._acquire = redis.register_script(load_script("lease_acquire"))
        self._release = redis.register_script(load_script("lease_release"))
        self._mark_cancel = redis.register_script(load_script("exec_mark_cancel"))
        self._park = redis.register_script(load_script("exec_park"))
        self._turn_take = redis.register_script(load_script("turn_take"))
        self._commit_keys_made: dict[str, tuple[str, ...]] = {}

    def _commit_keys(self, execution_id: str) -> tuple[str, ...]:
        """The keys :meth:`commit` writes, made once per execution (a runner commits every step)."""
        keys = self._commit_keys_made.get(execution_id)
        if keys is None:
            k = self.keys
            keys = (
                *self._exec_keys(execution_id),
                k.execution_applied(execution_id),
                k.execution_timers(execution_id),
                k.execution_state_nodes(execution_id),
                k.execution_state_outputs(execution_id),
            )
            if len(self._commit_keys_made) >= _COMMIT_KEYS_KEPT:
                self._commit_keys_made.clear()
            self._commit_keys_made[execution_id] = keys
        return keys

    def _exec_keys(self, execution_id: str) -> list[str]:
        k = self.keys
        return [
            k.execution(execution_id),
            k.execution_state(execution_id),
            k.lease(execution_id),
            k.execution_events(execution_id),
            k.execution_nodes(execution_id),
        ]

    # --- definitions --------------------------------------------------------------------------

    async def save_definition(self, digest: str, data: Mapping[str, Any]) -> None:
        """Snapshot a definition by content hash (kept as long as executions are)."""
        await self.redis.set(self.keys.definition(digest), _dumps(data), ex=self.retention)

    async def load_definition(self, digest: str) -> dict[str, Any] | None:
        """A snapshotted definition, or None."""
        raw = await self.redis.get(self.keys.definition(digest))
        return json.loads(raw) if raw else None

    # --- lifecycle ----------------------------------------------------------------------------

    async def create(
        self,
        execution_id: str,
        *,
        owner: str,
        state_json: str,
        fields: Mapping[str, Any],
        nodes: Mapping[str, str],
        events: Iterable[str],
        timers: Mapping[str, int],
        task: Task | None = None,
        listed: Listed | None = None,
    ) -> CreateResult:
        """Create the execution unless it exists (NX) or its task was canceled first, taking its lease at epoch 1.

        The takeover entry goes in the same round trip as the script, and so do the listing and timer
        entries when ``listed`` says where (else they are the caller's: :meth:`index_created`, written before
        the request that made the execution is acked). ``task``: the workflow task's record, written with the
        execution (same slot: the execution id is the task id).
        """
        k = self.keys
        now = now_ms()
        keys = [*self._exec_keys(execution_id), k.execution_timers(execution_id), *k.task_record(execution_id)]
        args = [
            owner,
            self.lease_ttl_ms,
            now,
            state_json,
            _dumps(dict(fields)),
            _dumps(dict(nodes)),
            _dumps(list(events)),
            _dumps(dict(timers)),
            EVENTS_MAXLEN,
            self.retention,
        ]
        if task is not None:
            args += [task_record_json(task), task.status.state.value]
        shard = k.shard(execution_id)
        indexes: list[str] = []

        def build(pipe: Any) -> None:
            self._scripts.queue(pipe, "exec_create", keys, args)
            # in the same round trip: an execution whose creator dies before its listing entries must still
            # be found by the takeover scan (NX: an existing execution's entry is kept; one added for an
            # execution not created here and not running is taken back below)
            pipe.zadd(k.leases_index(shard), {execution_id: now + self.lease_ttl_ms}, nx=True)
            if listed is not None:  # NX too: what they add for an execution not created here is taken back
                indexes[:] = self._queue_listing(pipe, execution_id, listed, timers, start=now, now=now, nx=True)

        raw, added, *listing = await self._scripts.run(build)
        taken_back = [key for key, n in zip(indexes, listing, strict=False) if n and raw[0] != "created"]
        if added and (raw[0] == "canceled" or (raw[0] == "exists" and raw[1] != "running")):
            taken_back.append(k.leases_index(shard))  # ours, for an execution not created here
        if taken_back:
            pipe = self.redis.pipeline(transaction=False)
            for key in taken_back:
                pipe.zrem(key, execution_id)
            await pipe.execute()
        if raw[0] == "exists":
            return CreateResult(False, str(raw[1]), int(raw[2] or 0), str(raw[3] or ""), raw[4] == "1")
        if raw[0] == "canceled":
            return CreateResult(False, "", 0, canceled=True)
        return CreateResult(True, str(fields.get("status", "running")), 1)

    async def index_created(
        self,
        execution_id: str,
        *,
        workflow: str,
        status: str,
        timers: Mapping[str, int],
        repair: bool = False,
        parent: str = "",
        at: int | None = None,
    ) -> None:
        """Add a just-created execution to the listing, lease and timer indexes and its workflow task to the
        workflow's task listing (see :meth:`create`).

        ``repair``: for an execution taken over, whose creator may have died between the create and these
        writes: the entries already there are kept (the listing's order), the lease entry is the taker's.
        ``parent``: the execution whose workflow node started this one (indexed as its child). ``at``: the
        start the listings sort by (the record's ``created``, so a listing's time range matches it).
        """
        k = self.keys
        now = now_ms()
        start = now if at is None else at
        shard = k.shard(execution_id)
        listed = Listed(workflow, status, parent)

        def build(pipe: Any) -> None:
            self._queue_listing(pipe, execution_id, listed, timers, start=start, now=now, nx=repair)
            # a finished one stays in the lease index until its answer is published (see mark_published)
            pipe.zadd(k.leases_index(shard), {execution_id: now + self.lease_ttl_ms})

        await auto_pipeline(self.redis).run(build)

    def _queue_listing(
        self,
        pipe: Any,
        execution_id: str,
        listed: Listed,
        timers: Mapping[str, int],
        *,
        start: int,
        now: int,
        nx: bool,
    ) -> list[str]:
        """Queue a new execution's listing and timer entries (and its task's listing entry); the sorted sets
        written, one ``ZADD`` each in that order (a parent's children set is followed by its ``EXPIRE``)."""
        k = self.keys
        shard = k.shard(execution_id)
        entries = [
            (k.executions_index(shard), start),
            (k.executions_by_workflow(listed.workflow, shard), start),
            (k.agent_tasks(listed.workflow, shard), now),
            (k.executions_by_status(listed.status, shard), start),
        ]
        if timers and listed.status == "running":
            entries.append((k.timers(shard), min(timers.values())))
        if listed.parent:
            entries.append((k.execution_children(listed.parent), start))
        for key, score in entries:
            pipe.zadd(key, {execution_id: score}, nx=nx)
        if listed.parent:
            pipe.expire(k.execution_children(listed.parent), self.retention)
        return [key for key, _ in entries]

    async def commit(
        self,
        execution_id: str,
        token: str,
        *,
        state_json: str,
        nodes: Mapping[str, str],
        events: Iterable[str],
        applied: Iterable[str],
        set_timers: Mapping[str, int],
        clear_timers: Iterable[str],
        fields: Mapping[str, Any],
        final_status: str | None = None,
        state_nodes: Mapping[str, str] | None = None,
        reset_state_nodes: bool = False,
        state_outputs: Mapping[str, str] | None = None,
        reset_state_outputs: bool = False,
        final_task: tuple[Task, str] | None = None,
    ) -> CommitResult:
        """Write one step if ``token`` still holds the lease; index updates ride in the same round trip.

        Args:
            execution_id: the execution.
            token: ``owner:epoch`` of the writer.
            state_json: the new engine state.
            nodes: changed node records by path.
            events: event log entries (JSON texts).
            applied: result keys this step applies (refused as ``duplicate`` if any was applied before).
            set_timers: timers armed (id → due ms).
            clear_timers: timers disarmed.
            fields: record fields to set.
            final_status: the execution's final status when this step finishes it (the listing index
                follows once it is answered: :meth:`mark_published`).
            state_nodes: a split checkpoint: ``state_json`` is the state without its ``nodes``, and these
                are the node instances changed (path → ``"ordinal JSON"``, ordinal = place in ``nodes``);
                None: ``state_json`` is the whole state (any split instances are dropped).
            reset_state_nodes: ``state_nodes`` holds every instance (replace the stored ones).
            state_outputs: the same for the state's ``outputs`` (``state_json`` then holds ``"outputs":null``):
                the outputs changed (node id → ``"ordinal JSON"``); None: ``state_json`` holds them (any split
                outputs are dropped).
            reset_state_outputs: ``state_outputs`` holds every output (replace the stored ones).
            final_task: with ``final_status``, the workflow task's final Task and the writer's instance:
                its record is written by the same script (as :meth:`TaskStore.write` with ``release``),
                so it is stored exactly when the finishing step is; the result carries what was written.
        """
        k = self.keys
        clear = list(clear_timers)
        keys = [*self._commit_keys(execution_id)]
        args = [
            token,
            now_ms(),
            state_json,
            _dumps(dict(nodes)),
            _dumps(list(events)),
            _dumps(list(applied)),
            _dumps(dict(set_timers)),
            _dumps(clear),
            _dumps(dict(fields)),
            "1" if final_status else "0",
            self.retention,
            EVENTS_MAXLEN,
            "" if state_nodes is None else _dumps(dict(state_nodes)),
            "1" if reset_state_nodes else "0",
            "" if state_outputs is None else _dumps(dict(state_outputs)),
            "1" if reset_state_outputs else "0",
        ]
        if final_task is not None and final_status:
            task, instance = final_task
            keys += k.task_record(execution_id)
            args += [instance, task_record_json(task), task.status.state.value]

        def build(pipe: Any) -> None:
            self._scripts.queue(pipe, "exec_commit", keys, args)
            if set_timers:
                pipe.zadd(k.timers(k.shard(execution_id)), {execution_id: min(set_timers.values())}, lt=True)

        raw = (await self._scripts.run(build))[0]
        finished = final_task is not None and final_status
        written = record_view(raw[2:]) if finished and len(raw) > 2 else None
        status = str(fields.get("status", ""))
        if raw[0] == "ok" and not final_status and len(raw) > 2 and "paused" in (status, raw[2]) and status != raw[2]:
            await self.index_status(execution_id, status)  # a pause or a resume: rare, off the step's round trip
        return CommitResult(str(raw[0]), str(raw[1] or "") if len(raw) > 1 else "", written)

    async def index_finished(self, execution_id: str, status: str) -> None:
        """Move a finished execution to its status in the listing index and out of the timer index.

        Written once the final answer is out, with :meth:`mark_published` (``ExecutionRunner.publish_final``),
        which a replica repeats for an execution that finished without answering, so a crash after the
        finishing commit loses nothing; alone when the answer could not be published.
        """
        await self._index_status(execution_id, status, finished=True)

    async def index_status(self, execution_id: str, status: str) -> None:
        """Move an execution that paused (``paused``) or resumed (``running``) to that status's listing index
        (:meth:`commit` does, when a step changes one to the other)."""
        await self._index_status(execution_id, status, finished=False)

    async def _index_status(self, execution_id: str, status: str, *, finished: bool) -> None:
        await self._scripts.run(lambda pipe: self._queue_index_status(pipe, execution_id, status, finished=finished))

    def _queue_index_status(self, pipe: Any, execution_id: str, status: str, *, finished: bool) -> None:
        k = self.keys
        shard = k.shard(execution_id)
        keys = [k.executions_by_status(s, shard) for s in ("running", "paused", status)]
        self._scripts.queue(pipe, "exec_index_finish", keys, [execution_id, now_ms()])
        if finished:
            pipe.zrem(k.timers(shard), execution_id)

    async def aclose(self) -> None:
        """Close the connections kept for lease renewals."""
        await self._lease_redis.aclose()

    async def mark_published(self, execution_id: str, *, finished: str | None = None) -> None:
        """Record that the final answer went out (until then the lease index keeps it for a takeover).

        ``finished``: the execution's final status, to move it to that status's listing and out of the timer
        index first, in the same round trip (:meth:`index_finished`, as the answer's publisher does).
        """

        def build(pipe: Any) -> None:
            if finished is not None:
                self._queue_index_status(pipe, execution_id, finished, finished=True)
            pipe.hset(self.keys.execution(execution_id), "final_published", "1")
            pipe.zrem(self.keys.leases_index(self.keys.shard(execution_id)), execution_id)

        if finished is None:
            await auto_pipeline(self.redis).run(build)
        else:
            await self._scripts.run(build)

    # --- leases --------------------------------------------------------------------------------

    async def acquire(self, execution_id: str, owner: str) -> tuple[str, int]:
        """Take over an execution: ``("acquired", epoch)``, or ``("held"|"finished"|"missing", 0)``."""
        raw = await self._acquire(
            keys=[self.keys.execution(execution_id), self.keys.lease(execution_id)], args=[owner, self.lease_ttl_ms]
        )
        leases = self.keys.leases_index(self.keys.shard(execution_id))
        if raw[0] == "acquired":
            await self.redis.zadd(leases, {execution_id: now_ms() + self.lease_ttl_ms})
            return "acquired", int(raw[1])
        if raw[0] == "missing":
            await self.redis.zrem(leases, execution_id)
        return str(raw[0]), 0

    async def renew(self, tokens: Mapping[str, str]) -> dict[str, bool]:
        """Renew leases in one round trip: execution id → still held."""
        if not tokens:
            return {}
        ids = list(tokens)
        expiry = now_ms() + self.lease_ttl_ms

        def build(pipe: Any) -> None:
            for execution_id in ids:
                self._lease_scripts.queue(
                    pipe, "claim_renew", [self.keys.lease(execution_id)], [tokens[execution_id], self.lease_ttl_ms]
                )
            for shard, members in by_shard(ids).items():
                pipe.zadd(self.keys.leases_index(shard), dict.fromkeys(members, expiry))

        # on connections of their own: a burst of commits in the main pool must not let leases lapse
        results = await self._lease_scripts.run(build)
        return {execution_id: bool(results[i]) for i, execution_id in enumerate(ids)}

    async def release(self, execution_id: str, token: str, *, handover: bool) -> None:
        """Give up a lease; with ``handover`` another replica may take the execution over at once."""
        released = await self._release(keys=[self.keys.lease(execution_id)], args=[token])
        if released and handover:
            await self.redis.zadd(self.keys.leases_index(self.keys.shard(execution_id)), {execution_id: 0})

    async def set_fields(self, execution_id: str, fields: Mapping[str, str]) -> None:
        """Set record fields outside a step (the caller's reply info after a pause answered it)."""
        key = self.keys.execution(execution_id)
        for name, value in fields.items():
            await self.redis.hset(key, name, value)

    async def park(self, execution_id: str, token: str, next_due_ms: int | None) -> bool:
        """Let a paused execution go: drop its lease and its takeover entry; index its next timer, if any.

        Returns False, keeping the lease, when the execution is marked for cancellation (``exec_park.lua``): its
        holder applies the cancellation instead.
        """
        outcome = await self._park(
            keys=[self.keys.execution(execution_id), self.keys.lease(execution_id)], args=[token]
        )
        if str(outcome) == "canceled":
            return False
        if str(outcome) == "stale":
            return True  # no longer ours: its indexes are its holder's
        shard = self.keys.shard(execution_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrem(self.keys.leases_index(shard), execution_id)
        if next_due_ms is None:
            pipe.zrem(self.keys.timers(shard), execution_id)
        else:
            pipe.zadd(self.keys.timers(shard), {execution_id: next_due_ms})
        await pipe.execute()
        return True

    async def orphaned(self, limit: int = 50) -> list[str]:
        """Executions whose lease expired by the index (candidates for a takeover)."""
        leases = [self.keys.leases_index(s) for s in self.keys.shards]
        return await earliest(self.redis, leases, "-inf", now_ms(), limit)

    async def due(self, limit: int = 200) -> list[str]:
        """Executions with a timer due by the index."""
        return await earliest(self.redis, [self.keys.timers(s) for s in self.keys.shards], "-inf", now_ms(), limit)

    async def reindex_timers(self, execution_id: str, next_due_ms: int | None) -> None:
        """Point the timer index at an execution's next timer (or drop it)."""
        timers = self.keys.timers(self.keys.shard(execution_id))
        if next_due_ms is None:
            await self.redis.zrem(timers, execution_id)
        else:
            await self.redis.zadd(timers, {execution_id: next_due_ms})

    async def due_timers(self, execution_id: str) -> list[str]:
        """Timer ids of an execution that are due."""
        return _strs(await self.redis.zrangebyscore(self.keys.execution_timers(execution_id), "-inf", now_ms()))

    async def lease_owner(self, execution_id: str) -> str:
        """The instance holding a live lease on the execution (it is running it), or ``""``."""
        held = str(await self.redis.get(self.keys.lease(execution_id)) or "")
        return held.rpartition(":")[0]

    # --- conversation turns (SPEC §3.8) ------------------------------------------------------------

    async def turn_pointer(self, workflow: str, context_id: str) -> str:
        """The context's turn pointer ``"{task} {previous task} {taken ms}"``, or ``""`` before the first turn."""
        return str(await self.redis.get(self.keys.conversation_turn(workflow, context_id)) or "")

    async def take_turn(self, workflow: str, context_id: str, expected: str, pointer: str) -> bool:
        """Move the context's turn pointer from ``expected`` to ``pointer`` (compare-and-set): False when
        another turn moved it first."""
        key = self.keys.conversation_turn(workflow, context_id)
        return bool(await self._turn_take(keys=[key], args=[expected, pointer]))

    # --- reads ---------------------------------------------------------------------------------

    async def mark_cancel(self, execution_id: str, request: str = "") -> tuple[str, str]:
        """Mark a running or paused execution for cancellation; returns its status ('' when unknown) and the
        CancelTask that marked it first (``request``: this one's name, kept when it is the first)."""
        raw = await self._mark_cancel(keys=[self.keys.execution(execution_id)], args=[request])
        return str(raw[0] or ""), str(raw[1] or "")

    async def record(self, execution_id: str) -> dict[str, str] | None:
        """The execution record, or None."""
        data = cast(dict[str, str], await self.redis.hgetall(self.keys.execution(execution_id)))
        return {str(k): str(v) for k, v in data.items()} if data else None

    async def execution(self, execution_id: str) -> ExecutionRecord | None:
        """The execution record, typed, or None."""
        raw = await self.record(execution_id)
        return None if raw is None else ExecutionRecord.from_fields(raw)

    async def state(self, execution_id: str) -> str | None:
        """The checkpointed engine state (JSON), or None (a split checkpoint is put back together)."""
        k = self.keys
        pipe = self.redis.pipeline(transaction=True)
        pipe.get(k.execution_state(execution_id))
        pipe.hgetall(k.execution_state_nodes(execution_id))
        pipe.hgetall(k.execution_state_outputs(execution_id))
        value, nodes, outputs = await pipe.execute()
        return None if not value else assemble_state(str(value), nodes, outputs)

    async def nodes(self, execution_id: str) -> dict[str, dict[str, Any]]:
        """Node records by path."""
        raw = cast(dict[str, str], await self.redis.hgetall(self.keys.execution_nodes(execution_id)))
        return {str(path): json.loads(value) for path, value in raw.items()}

    async def events(self, execution_id: str, count: int = EVENTS_MAXLEN) -> list[dict[str, Any]]:
        """The event log, oldest first."""
        entries = cast(
            list[tuple[str, dict[str, str]]],
            await self.redis.xrange(self.keys.execution_events(execution_id), count=count),
        )
        return [json.loads(fields["event"]) for _, fields in entries if "event" in fields]

    async def resolve_id(self, prefix: str) -> list[str]:
        """Execution ids starting with ``prefix`` (among the newest 10,000)."""
        if await self.redis.exists(self.keys.execution(prefix)):
            return [prefix]
        index = [self.keys.executions_index(s) for s in self.keys.shards]
        return [i for i, _ in await newest(self.redis, index, 10_000) if i.startswith(prefix)]

    async def list(
        self, *, workflow: str | None = None, status: str | None = None, limit: int = 50
    ) -> list[dict[str, str]]:
        """Execution records, newest first, optionally by workflow and status."""
        k = self.keys
        shards = [k.executions_by_workflow(workflow, s) if workflow else k.executions_index(s) for s in k.shards]
        span = max(limit * 20, 1000) if status else limit + 50  # read far ahead only when filtering by status
        ids = [i for i, _ in await newest(self.redis, shards, span + 1)]
        out: list[dict[str, str]] = []
        if not ids:
            return out
        pipe = self.redis.pipeline(transaction=False)
        for execution_id in ids:
            pipe.hgetall(k.execution(execution_id))
        gone = []
        for execution_id, record in zip(ids, await pipe.execute(), strict=True):
            if not record:
                gone.append(execution_id)
                continue
            if status and record.get("status") != status:
                continue
            out.append({"execution_id": execution_id, **record})
            if len(out) >= limit:
                break
        if gone:
            cleanup = self.redis.pipeline(transaction=False)
            for shard, members in by_shard(gone).items():
                cleanup.zrem(k.executions_index(shard), *members)
                if workflow:
                    cleanup.zrem(k.executions_by_workflow(workflow, shard), *members)
            await cleanup.execute()
        return out
