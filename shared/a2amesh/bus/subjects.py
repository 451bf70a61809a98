"""Every NATS subject, stream, consumer and KV bucket name of a namespace (SPEC §3.2), built here only."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Subjects:
    """Names of one namespace's subjects, streams, consumers and buckets."""

    ns: str = "a2amesh"

    @property
    def stream_prefix(self) -> str:
        """``{NS}``: the namespace upper-cased with ``-`` turned into ``_``."""
        return self.ns.upper().replace("-", "_")

    # streams
    @property
    def tasks_stream(self) -> str:
        """Work-queue stream of every agent's requests."""
        return f"{self.stream_prefix}_TASKS"

    @property
    def replies_stream(self) -> str:
        """Limits stream of every call's replies."""
        return f"{self.stream_prefix}_REPLIES"

    @property
    def events_stream(self) -> str:
        """Optional stream of lifecycle events."""
        return f"{self.stream_prefix}_EVENTS"

    # KV buckets
    @property
    def cards_bucket(self) -> str:
        """KV bucket of agent cards."""
        return f"{self.ns}-cards"

    @property
    def presence_bucket(self) -> str:
        """KV bucket of live replicas."""
        return f"{self.ns}-presence"

    # subjects
    def request(self, agent: str) -> str:
        """Work subject of an agent or workflow."""
        return f"{self.ns}.a2a.v1.agent.request.{agent}"

    @property
    def request_all(self) -> str:
        """Wildcard over every work subject."""
        return f"{self.ns}.a2a.v1.agent.request.>"

    def control(self, agent: str) -> str:
        """Control subject of an agent or workflow."""
        return f"{self.ns}.a2a.v1.agent.control.{agent}"

    def reply(self, instance: str, callee: str, call_id: str) -> str:
        """Reply subject of one call to ``callee`` (an agent or workflow): naming the callee lets NATS
        permissions allow each callee to publish only replies to calls made to it (:meth:`replies_from`)."""
        return f"{self.ns}.a2a.v1.reply.{instance}.{callee}.{call_id}"

    def replies_from(self, callee: str) -> list[str]:
        """Every reply and delta subject of calls to ``callee`` (an instance is one token, or two with a scope)."""
        return [
            f"{self.ns}.a2a.v1.{kind}.{instance}.{callee}.*" for kind in ("reply", "delta") for instance in ("*", "*.*")
        ]

    def reply_inbox(self, instance: str) -> str:
        """Wildcard over every reply subject of one process."""
        return f"{self.ns}.a2a.v1.reply.{instance}.>"

    @property
    def reply_all(self) -> str:
        """Wildcard over every reply subject."""
        return f"{self.ns}.a2a.v1.reply.>"

    def reply_prefix(self) -> str:
        """Prefix every valid reply subject starts with."""
        return f"{self.ns}.a2a.v1.reply."

    def delta(self, instance: str, callee: str, call_id: str) -> str:
        """Token-delta subject of one call to ``callee``."""
        return f"{self.ns}.a2a.v1.delta.{instance}.{callee}.{call_id}"

    def delta_for_reply(self, reply_subject: str) -> str | None:
        """The delta subject that belongs to a reply subject, or None if it is not one of ours."""
        prefix = self.reply_prefix()
        if not reply_subject.startswith(prefix):
            return None
        return f"{self.ns}.a2a.v1.delta.{reply_subject[len(prefix) :]}"

    def workflow_event(self, workflow: str, event: str) -> str:
        """Lifecycle event subject of a workflow."""
        return f"{self.ns}.events.workflow.{workflow}.{event}"

    def workflow_events_of(self, event: str) -> str:
        """Wildcard over one lifecycle event of every workflow (``created``, ``updated``, ``deleted``…)."""
        return f"{self.ns}.events.workflow.*.{event}"

    def agent_event(self, agent: str, event: str) -> str:
        """Lifecycle event of a stored agent definition (``created``, ``updated``, ``deleted``)."""
        return f"{self.ns}.events.agent.{agent}.{event}"

    def agent_events_of(self, event: str) -> str:
        """Wildcard over one lifecycle event of every stored agent definition."""
        return f"{self.ns}.events.agent.*.{event}"

    def remote_event(self, remote: str, event: str) -> str:
        """Lifecycle event of a remote agent declared through the management API (``created``, ``deleted``)."""
        return f"{self.ns}.events.remote.{remote}.{event}"

    def remote_events_of(self, event: str) -> str:
        """Wildcard over one lifecycle event of every remote agent declared through the management API."""
        return f"{self.ns}.events.remote.*.{event}"

    def node_event(self, workflow: str, event: str) -> str:
        """Lifecycle event subject of a workflow's nodes."""
        return f"{self.ns}.events.node.{workflow}.{event}"

    def memory_event(self, agent: str, event: str) -> str:
        """Lifecycle event of a memory entry of ``agent`` (``created``, ``updated``, ``deleted``)."""
        return f"{self.ns}.events.memory.{agent}.{event}"

    @property
    def events_all(self) -> list[str]:
        """Subjects of the events stream."""
        return [f"{self.ns}.events.workflow.>", f"{self.ns}.events.node.>", f"{self.ns}.events.memory.>"]

    def events_filter(self, group: str | None = None, workflow: str | None = None, event: str | None = None) -> str:
        """One subject over the events stream: ``group`` (``workflow``, ``node`` or ``memory``), ``workflow`` (a
        memory event's agent) and ``event`` each narrow it when given."""
        return f"{self.ns}.events.{group or '*'}.{workflow or '*'}.{event or '*'}"

    def event_parts(self, subject: str) -> tuple[str, str, str] | None:
        """``(group, workflow, event)`` of an events-stream subject, or None if it is not one."""
        prefix = f"{self.ns}.events."
        if not subject.startswith(prefix):
            return None
        parts = subject[len(prefix) :].split(".")
        return (parts[0], parts[1], parts[2]) if len(parts) == 3 else None

    # names inside buckets / consumers
    @staticmethod
    def consumer(agent: str) -> str:
        """Durable consumer name of an agent's work queue."""
        return agent

    @staticmethod
    def presence_key(agent: str, instance: str) -> str:
        """Presence key of one replica."""
        return f"{agent}.{instance}"
