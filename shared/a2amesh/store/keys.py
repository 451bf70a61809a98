"""Every Redis key of a namespace, built here only.

Keys of one task share the hash tag ``{task_id}`` and keys of one execution share ``{execution_id}``,
so every multi-key script runs on Redis Cluster.

The namespace-wide indexes written for every task or execution (all executions, by workflow, by status,
an agent's tasks, leases, timers) are partitioned in :data:`INDEX_SHARDS` shards: a member goes to shard
:meth:`Keys.shard` of its id, whose keys share the hash tag ``{idx:N}`` (so one script moves an execution
between two status indexes of its shard), and a reader merges the shards. On a cluster the shards' slots
spread over the primaries instead of making one of them take every index write.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

INDEX_SHARDS = 8
"""Shards of every namespace-wide index (every process of a namespace must agree on it)."""


@dataclass(frozen=True)
class Keys:
    """Redis key names of one namespace."""

    ns: str = "a2amesh"

    @staticmethod
    def shard(member: str) -> int:
        """The index shard of a task or execution id."""
        return zlib.crc32(member.encode()) % INDEX_SHARDS

    @property
    def shards(self) -> range:
        """Every index shard."""
        return range(INDEX_SHARDS)

    def _idx(self, shard: int) -> str:
        return f"{self.ns}:{{idx:{shard}}}"

    # tasks (agent side)
    def task(self, task_id: str) -> str:
        """JSON task record (the A2A Task plus bookkeeping)."""
        return f"{self.ns}:task:{{{task_id}}}"

    def claim(self, task_id: str) -> str:
        """Live claim of a task: the owning instance, with a TTL renewed while it works."""
        return f"{self.ns}:claim:{{{task_id}}}"

    def subscribers(self, task_id: str) -> str:
        """Set of extra reply subjects that want a task's events (SubscribeToTask, duplicate sends)."""
        return f"{self.ns}:subs:{{{task_id}}}"

    def task_record(self, task_id: str) -> list[str]:
        """The keys a task record's write touches, in ``task_record.lua``'s order: record, claim, subscribers."""
        return [self.task(task_id), self.claim(task_id), self.subscribers(task_id)]

    def push_configs(self, task_id: str) -> str:
        """Hash of a task's push notification configs (JSON) by config id (``store/push.py``)."""
        return f"{self.ns}:push:{{{task_id}}}"

    def agent_tasks(self, agent: str, shard: int) -> str:
        """Sorted set of an agent's task ids by last update (ms), one shard of it."""
        return f"{self._idx(shard)}:tasks:{agent}"

    def context_lock(self, agent: str, context_id: str) -> str:
        """Fenced per-context lock of a conversational agent."""
        return f"{self.ns}:ctxlock:{agent}:{{{context_id}}}"

    def history(self, agent: str, context_id: str) -> str:
        """Conversation history of an agent per context."""
        return f"{self.ns}:history:{agent}:{{{context_id}}}"

    # artifacts (scope = "{context_id}/{task_id}")
    def artifact(self, scope: str, name: str) -> str:
        """Every version of one artifact (hash: ``next``, ``latest``, ``d:{version}`` data, ``m:{version}`` meta)."""
        return f"{self.ns}:artifact:{{{scope}}}:{name}"

    def artifact_names(self, scope: str) -> str:
        """Set of artifact names in a scope."""
        return f"{self.ns}:artifacts:{{{scope}}}"

    def artifact_scopes(self, context_id: str) -> str:
        """Set of the task ids of a context that hold artifacts (to refresh their TTL together)."""
        return f"{self.ns}:artifacts:ctx:{{{context_id}}}"

    # memory (seed 004's agent_memory): entries of one agent share the hash tag ``{agent}``
    def memory_entry(self, agent: str, entry_id: str) -> str:
        """One memory entry (hash: id, agent, user, key, content, metadata, created_at, updated_at, dimensions)."""
        return f"{self.ns}:mem:{{{agent}}}:{entry_id}"

    def memory_vectors(self, agent: str, user: str | None) -> str:
        """Embeddings of one memory scope (hash: entry id → base64 float32 vector)."""
        return f"{self.ns}:memvec:{{{agent}}}:" + (f"u:{user}" if user is not None else "shared")

    def memory_index(self, agent: str) -> str:
        """Sorted set of every memory entry id of an agent (all users) by last update (ms)."""
        return f"{self.ns}:memidx:{{{agent}}}"

    def memory_version(self, agent: str, user: str | None) -> str:
        """Counter of one memory scope, raised by every write and delete (readers cache vectors by it)."""
        return f"{self.ns}:memver:{{{agent}}}:" + (f"u:{user}" if user is not None else "shared")

    def memory_keys(self, agent: str, user: str | None) -> str:
        """Entry id by key in one memory scope (hash: key → entry id)."""
        return f"{self.ns}:memkey:{{{agent}}}:" + (f"u:{user}" if user is not None else "shared")

    # executions
    def execution(self, execution_id: str) -> str:
        """Execution record."""
        return f"{self.ns}:exec:{{{execution_id}}}"

    def execution_state(self, execution_id: str) -> str:
        """Engine state checkpoint of an execution."""
        return f"{self.ns}:exec:{{{execution_id}}}:state"

    def execution_state_nodes(self, execution_id: str) -> str:
        """Hash of the node instances of a split state checkpoint (field = node path)."""
        return f"{self.ns}:exec:{{{execution_id}}}:state_nodes"

    def execution_state_outputs(self, execution_id: str) -> str:
        """Hash of the node outputs of a split state checkpoint (field = node id)."""
        return f"{self.ns}:exec:{{{execution_id}}}:state_outputs"

    def execution_nodes(self, execution_id: str) -> str:
        """Hash of node records of an execution (field = node path)."""
        return f"{self.ns}:exec:{{{execution_id}}}:nodes"

    def execution_events(self, execution_id: str) -> str:
        """Append-only event log (stream) of an execution."""
        return f"{self.ns}:exec:{{{execution_id}}}:events"

    def execution_applied(self, execution_id: str) -> str:
        """Set of node results already applied (idempotency)."""
        return f"{self.ns}:exec:{{{execution_id}}}:applied"

    def execution_timers(self, execution_id: str) -> str:
        """Sorted set of an execution's armed timers (member = timer id, score = due ms)."""
        return f"{self.ns}:exec:{{{execution_id}}}:timers"

    def lease(self, execution_id: str) -> str:
        """Lease ``owner:epoch`` of an execution."""
        return f"{self.ns}:exec:{{{execution_id}}}:lease"

    def executions_index(self, shard: int) -> str:
        """Sorted set of every execution by start time, one shard of it."""
        return f"{self._idx(shard)}:execs"

    def executions_by_workflow(self, workflow: str, shard: int) -> str:
        """Sorted set of a workflow's executions by start time, one shard of it."""
        return f"{self._idx(shard)}:execs:wf:{workflow}"

    def executions_by_status(self, status: str, shard: int) -> str:
        """Sorted set of executions by start time, per status (``paused`` ones apart from ``running``), one shard
        of it (a shard's statuses share its hash tag: one script moves an execution between two)."""
        return f"{self._idx(shard)}:execs:status:{status}"

    def execution_children(self, execution_id: str) -> str:
        """Sorted set of the executions a workflow node of this execution started (sub-workflows), by start."""
        return f"{self.ns}:exec:{{{execution_id}}}:children"

    def definition(self, digest: str) -> str:
        """A workflow definition snapshot by content hash."""
        return f"{self.ns}:def:{digest}"

    def timers(self, shard: int) -> str:
        """Sorted set of executions by their next timer (member = execution id, score = due ms), one shard."""
        return f"{self._idx(shard)}:timers"

    def leases_index(self, shard: int) -> str:
        """Sorted set of running executions by lease expiry (ms), one shard of it."""
        return f"{self._idx(shard)}:leases"

    def executor_alive(self, instance: str) -> str:
        """Presence of an executor replica (``SET … PX``, renewed while it runs)."""
        return f"{self.ns}:executor:{instance}:alive"

    def executors_index(self) -> str:
        """Sorted set of executor replicas by the expiry (ms) of their presence key."""
        return f"{self.ns}:executors"

    def conversation_turn(self, workflow: str, context_id: str) -> str:
        """The execution id of a conversational graph workflow's latest turn on a contextId (SPEC §6)."""
        return f"{self.ns}:conv:{workflow}:{{{context_id}}}"

    def remote_slots(self, agent: str) -> str:
        """Sorted set of the tasks forwarded to a remote agent now (``mesh_concurrency``), scored by lease end."""
        return f"{self.ns}:remote:{agent}:slots"

    def remotes(self) -> str:
        """Hash of the remote agents declared through the management API (``remote:`` declaration JSON) by name."""
        return f"{self.ns}:remotes"

    # stored definitions (kind ``workflows`` or ``llm-agents``): every key shares the ``{defs}`` hash tag (one
    # script writes a head and a version)
    def definition_heads(self, kind: str) -> str:
        """Hash of every stored definition's head of a kind (``DefinitionHead`` JSON) by id."""
        return f"{self.ns}:{{defs}}:{kind}:heads"

    def definition_versions(self, kind: str, definition_id: str) -> str:
        """Hash of one definition's versions: ``d:{n}`` the document JSON, ``m:{n}`` the version's record."""
        return f"{self.ns}:{{defs}}:{kind}:versions:{definition_id}"

    # schedules: both keys share the ``{schedules}`` hash tag (one script updates them together)
    def schedules(self) -> str:
        """Hash of schedule state (``ScheduleState`` JSON) by schedule id ``{workflow}/{branch}``."""
        return f"{self.ns}:{{schedules}}"

    def schedule_timers(self) -> str:
        """Sorted set of schedule ids by the time (ms) an executor must look at them next."""
        return f"{self.ns}:{{schedules}}:due"
