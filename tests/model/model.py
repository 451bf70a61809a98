"""The reference model of the task lifecycle the state machine checks every observation against.

A task is what one first message starts (an agent's task or a workflow's execution). The model does not
replay the mesh; it keeps what callers were told, with when each call started and ended (the loop's clock),
and refuses any later answer that contradicts it (docs/protocol.md, A2A 1.0, issue 35):

- every call is answered within its bound;
- one terminal state per task: every terminal state any caller saw is the same, and a call that starts after a
  caller saw it sees only it (an acknowledged CANCELED stays cancelled; a resend or a subscriber too);
- CancelTask answers a task in ``TASK_STATE_CANCELED`` or ``-32002`` (the task is final: no later call sees it
  live); once the task is final, a cancel is ``-32002`` and a message continuing it ``-32004``;
- an interrupted task (``INPUT_REQUIRED``) moves on only when a message continues it;
- every answer is about the task asked for (a resend answers the first copy's task), carries the caller's
  own JSON-RPC id, and a SendMessage's final is a task;
- ListTasks agrees with GetTask;
- unraced, a call ends as its agent or workflow says (``predicted``).

Calls that overlap may be ordered either way; a fact binds only the calls that start after the call that
established it ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from a2amesh.protocol import Message, codes
from tests.model.mesh import Answer

COMPLETED = "TASK_STATE_COMPLETED"
FAILED = "TASK_STATE_FAILED"
CANCELED = "TASK_STATE_CANCELED"
REJECTED = "TASK_STATE_REJECTED"
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
WORKING = "TASK_STATE_WORKING"
SUBMITTED = "TASK_STATE_SUBMITTED"
TERMINAL = frozenset({COMPLETED, FAILED, CANCELED, REJECTED})
INTERRUPTED = frozenset({INPUT_REQUIRED, "TASK_STATE_AUTH_REQUIRED"})


class LifecycleViolation(AssertionError):
    """An observation the model refuses (one subclass per rule, so hypothesis reports each rule's failures
    apart)."""


class Unanswered(LifecycleViolation):
    """A call got no answer within its bound."""


class TerminalContradicted(LifecycleViolation):
    """A terminal state a caller saw was later contradicted (another state, or a live one)."""


class CancelNotCanceled(LifecycleViolation):
    """CancelTask answered a task that is not CANCELED."""


class FinishedTaskCancelable(LifecycleViolation):
    """CancelTask of a task already final answered a task instead of -32002."""


class FinishedTaskContinued(LifecycleViolation):
    """A message continuing a task already final was not refused with -32004."""


class RefusedButLive(LifecycleViolation):
    """A refusal said the task was final (-32002, -32004), but a later call saw it live."""


class InterruptedContradicted(LifecycleViolation):
    """A task a caller saw waiting for input was later seen working though nothing continued it."""


class WrongTask(LifecycleViolation):
    """An answer about another task than the one asked for (a resend must answer the first copy's task)."""


class WrongRequestId(LifecycleViolation):
    """An answer that does not carry the caller's own JSON-RPC id."""


class WrongReplyForm(LifecycleViolation):
    """A SendMessage answered with something else than a task (A2A: a Task or a Message; protocol.md §6)."""


class UnexpectedAnswer(LifecycleViolation):
    """A call ended otherwise than its agent or workflow says (an unexpected state or error)."""


class ListDisagrees(LifecycleViolation):
    """ListTasks disagrees with GetTask."""


@dataclass
class Span:
    """A call's lifetime (``end`` None while in flight)."""

    start: float
    end: float | None = None


@dataclass
class Fact:
    state: str
    at: float
    by: str


@dataclass
class Tracked:
    """One task the machine started, and what callers were told about it."""

    label: str
    kind: str
    target: str
    message: Message
    context_id: str
    task_id: str
    terminal: Fact | None = None
    refused: Fact | None = None
    interrupted_at: float | None = None
    current: str | None = None
    current_at: float = 0.0
    seen_at: float | None = None
    pending: int = 0
    continues: list[Span] = field(default_factory=list)
    cancels: list[Span] = field(default_factory=list)
    log: list[str] = field(default_factory=list)

    @property
    def waiting(self) -> bool:
        """Idle in INPUT_REQUIRED as far as any caller knows."""
        return self.pending == 0 and self.terminal is None and self.current == INPUT_REQUIRED


class Model:
    """The facts of every tracked task; observations are checked on the mesh's loop thread, violations
    kept for the machine to raise on its own thread."""

    def __init__(self) -> None:
        self.tasks: list[Tracked] = []
        self.violations: list[LifecycleViolation] = []

    def violate(self, kind: type[LifecycleViolation], t: Tracked, what: str) -> None:
        trail = "\n    ".join(t.log)
        self.violations.append(
            kind(f"{t.label} ({t.kind} {t.target}, task {t.task_id}): {what}\n  what callers saw:\n    {trail}")
        )

    # every answer
    def observe(self, t: Tracked, what: str, answer: Answer, *, predicted: frozenset[str] | None = None) -> None:
        t.log.append(f"[{answer.start:9.3f}–{answer.end:9.3f}] {what}: {answer.shown()}")
        if answer.timed_out:
            self.violate(Unanswered, t, f"{what} was not answered: {answer.note}")
            return
        if "JSON-RPC id" in answer.note:
            self.violate(WrongRequestId, t, f"{what}: {answer.note}")
        if "not the task SendMessage answers" in answer.note:
            self.violate(WrongReplyForm, t, f"{what}: {answer.note}")
        for task_id, state in answer.states:
            if task_id != t.task_id:
                self.violate(WrongTask, t, f"{what} answered task {task_id}")
                return
            self._state(t, what, answer, state)
        if answer.error is None and answer.states:
            if t.seen_at is None or answer.end < t.seen_at:
                t.seen_at = answer.end
            if answer.end >= t.current_at:
                t.current, t.current_at = answer.states[-1][1], answer.end
        if predicted is not None and answer.error is None and answer.final is not None:
            final = answer.final[1]
            allowed = predicted | ({CANCELED} if self._cancel_before(t, answer.end) else frozenset())
            if final not in allowed:
                self.violate(UnexpectedAnswer, t, f"{what} ended {final}, expected one of {sorted(allowed)}")

    def _state(self, t: Tracked, what: str, answer: Answer, state: str) -> None:
        if state in TERMINAL:
            if t.terminal is not None and t.terminal.state != state:
                self.violate(
                    TerminalContradicted, t, f"{what} saw {state}, but {t.terminal.by} had seen {t.terminal.state}"
                )
            elif t.terminal is None or answer.end < t.terminal.at:
                t.terminal = Fact(state, answer.end, what)
            return
        if t.terminal is not None and t.terminal.at < answer.start:
            self.violate(
                TerminalContradicted,
                t,
                f"{what} saw {state} after {t.terminal.by} had seen {t.terminal.state} (before it started)",
            )
        if t.refused is not None and t.refused.at < answer.start:
            self.violate(RefusedButLive, t, f"{what} saw {state} after {t.refused.by} refused it as final")
        if state in (WORKING, SUBMITTED) and t.interrupted_at is not None and t.interrupted_at < answer.start:
            moved = any(c.start < answer.end and (c.end is None or c.end > t.interrupted_at) for c in t.continues)
            if not moved:
                self.violate(InterruptedContradicted, t, f"{what} saw {state}, but nothing continued the task")
        if state in INTERRUPTED:
            t.interrupted_at = max(t.interrupted_at or 0.0, answer.end)

    def _cancel_before(self, t: Tracked, end: float) -> bool:
        return any(c.start < end for c in t.cancels)

    def _final_before(self, t: Tracked, start: float) -> Fact | None:
        return t.terminal if t.terminal is not None and t.terminal.at < start else None

    # per method
    def sent(self, t: Tracked, what: str, answer: Answer, predicted: frozenset[str] | None) -> None:
        """A send or stream that started the task, or an exact resend of it."""
        if answer.error is not None and not answer.timed_out:
            t.log.append(f"[{answer.start:9.3f}–{answer.end:9.3f}] {what}: {answer.shown()}")
            self.violate(UnexpectedAnswer, t, f"{what} was refused: {answer.shown()}")
            return
        self.observe(t, what, answer, predicted=predicted)

    def continued(self, t: Tracked, what: str, answer: Answer, span: Span, predicted: frozenset[str]) -> None:
        span.end = answer.end
        final = self._final_before(t, answer.start)
        if final is not None and answer.error != codes.UNSUPPORTED_OPERATION and not answer.timed_out:
            t.log.append(f"[{answer.start:9.3f}–{answer.end:9.3f}] {what}: {answer.shown()}")
            self.violate(
                FinishedTaskContinued,
                t,
                f"{what} was answered {answer.shown()}, though {final.by} had seen it {final.state} (want -32004)",
            )
            return
        if answer.error == codes.UNSUPPORTED_OPERATION:
            t.log.append(f"[{answer.start:9.3f}–{answer.end:9.3f}] {what}: {answer.shown()}")
            if not self._cancel_before(t, answer.end) and final is None:
                self.violate(UnexpectedAnswer, t, f"{what} refused as final, though nothing ended the task")
            elif t.refused is None:
                t.refused = Fact("final", answer.end, what)
            return
        if answer.error is not None and not answer.timed_out:
            t.log.append(f"[{answer.start:9.3f}–{answer.end:9.3f}] {what}: {answer.shown()}")
            self.violate(UnexpectedAnswer, t, f"{what} was refused: {answer.shown()}")
            return
        self.observe(t, what, answer, predicted=predicted)

    def cancelled(self, t: Tracked, what: str, answer: Answer, span: Span) -> None:
        span.end = answer.end
        final = self._final_before(t, answer.start)
        if final is not None and answer.error is None and not answer.timed_out:
            t.log.append(f"[{answer.start:9.3f}–{answer.end:9.3f}] {what}: {answer.shown()}")
            self.violate(
                FinishedTaskCancelable,
                t,
                f"{what} was answered {answer.shown()}, though {final.by} had seen it {final.state} (want -32002)",
            )
            return
        if answer.error == codes.TASK_NOT_CANCELABLE:
            t.log.append(f"[{answer.start:9.3f}–{answer.end:9.3f}] {what}: {answer.shown()}")
            if t.refused is None or answer.end < t.refused.at:
                t.refused = Fact("final", answer.end, what)
            return
        if answer.error == codes.TASK_NOT_FOUND and (t.seen_at is None or t.seen_at > answer.start):
            t.log.append(f"[{answer.start:9.3f}–{answer.end:9.3f}] {what}: {answer.shown()} (not yet known)")
            return
        if answer.error is not None and not answer.timed_out:
            t.log.append(f"[{answer.start:9.3f}–{answer.end:9.3f}] {what}: {answer.shown()}")
            self.violate(UnexpectedAnswer, t, f"{what} was answered {answer.shown()}")
            return
        if answer.final is not None and answer.final[1] != CANCELED:
            t.log.append(f"[{answer.start:9.3f}–{answer.end:9.3f}] {what}: {answer.shown()}")
            self.violate(CancelNotCanceled, t, f"{what} answered the task {answer.final[1]}")
            return
        self.observe(t, what, answer)

    def got(self, t: Tracked, what: str, answer: Answer) -> None:
        """GetTask (or a SubscribeToTask: a final task is -32004 over HTTP, STREAM-SUB-003)."""
        if answer.error == codes.TASK_NOT_FOUND and (t.seen_at is None or t.seen_at > answer.start):
            t.log.append(f"[{answer.start:9.3f}–{answer.end:9.3f}] {what}: {answer.shown()} (not yet known)")
            return
        if answer.error == codes.UNSUPPORTED_OPERATION and what.startswith("subscribe"):
            t.log.append(f"[{answer.start:9.3f}–{answer.end:9.3f}] {what}: {answer.shown()}")
            if t.refused is None or answer.end < t.refused.at:
                t.refused = Fact("final", answer.end, what)
            return
        if answer.error is not None and not answer.timed_out:
            t.log.append(f"[{answer.start:9.3f}–{answer.end:9.3f}] {what}: {answer.shown()}")
            self.violate(UnexpectedAnswer, t, f"{what} was answered {answer.shown()}")
            return
        self.observe(t, what, answer)

    def listed(self, t: Tracked, what: str, before: Answer, listing: Answer, after: Answer) -> None:
        """GetTask, ListTasks, GetTask in a row: the listing lies between the two reads."""
        self.got(t, f"{what} (GetTask before)", before)
        if listing.timed_out or listing.error is not None:
            t.log.append(f"[{listing.start:9.3f}–{listing.end:9.3f}] {what}: {listing.shown()}")
            self.violate(
                Unanswered if listing.timed_out else UnexpectedAnswer, t, f"{what}: ListTasks {listing.shown()}"
            )
            return
        self.observe(t, f"{what} (ListTasks)", listing)
        self.got(t, f"{what} (GetTask after)", after)
        g1 = before.final[1] if before.final else None
        g2 = after.final[1] if after.final else None
        listed = listing.final[1] if listing.final else None
        if listed is None and g1 is not None:
            self.violate(ListDisagrees, t, f"{what}: GetTask answered {g1}, ListTasks does not list the task")
        elif listed is not None and g1 == g2 and listed != g1 and t.pending == 0:
            self.violate(ListDisagrees, t, f"{what}: GetTask answered {g1} before and after, ListTasks {listed}")
