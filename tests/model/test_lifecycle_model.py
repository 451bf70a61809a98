"""A model-based test of the task lifecycle (issue 35): random interleavings against real agents and workflows.

A ``hypothesis.stateful`` machine drives the mesh of ``tests/model/mesh.py`` (the agents ``m_ask``, which asks
for input, and ``m_slow``, which takes a while, and the workflows ``m_review``, whose first node is a human
review, and ``m_chain``, three ``m_slow`` steps; agents and executor are OS processes) over NATS (the mesh
``Client``, and raw requests for resends with a new ``Nats-Msg-Id``) and through the HTTP gateway (plain
JSON-RPC, SSE for the streams). Its moves: send, stream, continue, approve/reject a review, cancel, exact
resend, GetTask, ListTasks, SubscribeToTask, SIGKILL and restart of an agent or the executor with work in
flight, and races run at once (``asyncio.gather``): cancel vs continue, cancel vs the first call and its pause,
resend vs the first call. Every answer is checked against ``tests/model/model.py``.

CI runs a fixed seed with few examples (docs/lifecycle.md "Tests"). A longer soak, with any seed::

    LIFECYCLE_SOAK_EXAMPLES=500 LIFECYCLE_SEED=7 LIFECYCLE_STEPS=25 \\
        pytest tests/model/test_lifecycle_model.py -x -q

``LIFECYCLE_SEED`` (default 35) picks the seed; ``LIFECYCLE_SOAK_EXAMPLES`` the number of examples (default
10); ``LIFECYCLE_STEPS`` the moves per example (default 15); ``LIFECYCLE_SHRINK=0`` reports a failure without
shrinking it (each shrink step replays a whole example against the mesh; the default in CI, ``=1`` shrinks
there too); ``LIFECYCLE_BUDGET`` the seconds the examples may take in all (60 in CI, else unbounded). To look
past a failure already known, ``LIFECYCLE_KINDS=slow,chain,review`` (of ask, slow, review, chain) narrows the
tasks started and ``LIFECYCLE_SKIP_MOVES=race_cancel_send,resend`` leaves moves out; CI sets neither. A failure
names the rule broken (a ``LifecycleViolation`` subclass of ``tests/model/model.py``) and lists what every
caller saw of the task, with the loop's clock; hypothesis prints the moves that led there.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar, cast

import pytest
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from a2amesh.client import make_message
from a2amesh.ids import task_id_for
from tests.model.mesh import CONTROL_BOUND, WORK_BOUND, Answer, LoopThread, Mesh, Transport
from tests.model.model import COMPLETED, FAILED, INPUT_REQUIRED, Model, Span, Tracked, Unanswered
from tests.support.servers import MeshServers

F = TypeVar("F", bound=Callable[..., None])

SEED = int(os.environ.get("LIFECYCLE_SEED", "35"))
EXAMPLES = int(os.environ.get("LIFECYCLE_SOAK_EXAMPLES", "10"))
STEPS = int(os.environ.get("LIFECYCLE_STEPS", "15"))
IN_CI = bool(os.environ.get("CI"))
SHRINK = os.environ.get("LIFECYCLE_SHRINK", "0" if IN_CI else "1") != "0"
"""Shrink a failure (not in CI: each shrink step replays a whole example against the mesh, minutes)."""
BUDGET = float(os.environ.get("LIFECYCLE_BUDGET", "60" if IN_CI else "inf"))
"""Seconds the examples may take in all: past it no move starts (the example in flight ends as it stands) and
the examples left are not run; the summary says how many ran."""

TARGETS = {"ask": "m_ask", "slow": "m_slow", "review": "m_review", "chain": "m_chain"}
ANSWERS = {"ask": INPUT_REQUIRED, "slow": COMPLETED, "review": INPUT_REQUIRED, "chain": COMPLETED}
KILLABLE = {"m_ask": "ask", "m_slow": "slow", "executor": "chain"}
TOTALS: list[tuple[int, int, int]] = []
"""(tasks, calls, kills) of each example run, for the summary the test prints."""
FOUND: list[BaseException] = []
"""The violation an example raised (without shrinking, hypothesis runs the failing example once more to print
its moves: that run replays the moves without the mesh and raises this again, so a race that showed once is
reported as it was seen, at once)."""
MAX_KILLS = 2
"""Kills per example: each restarts a process (seconds on a loaded machine)."""

KINDS = sorted(os.environ.get("LIFECYCLE_KINDS", ",".join(TARGETS)).split(","))
"""The kinds of task the machine starts (all by default; fewer to explore past a failure already known)."""
kinds = st.sampled_from(KINDS)
SKIP = frozenset(filter(None, os.environ.get("LIFECYCLE_SKIP_MOVES", "").split(",")))
"""Moves left out (none by default; to explore past a failure already known)."""
vias = st.sampled_from(["nats", "http"])
picks = st.integers(min_value=0, max_value=15)
delays = st.sampled_from([0.0, 0.01, 0.05, 0.2])


def _first_input(kind: str, long: bool) -> dict[str, Any]:
    seconds = 1.0 if long else 0.2
    if kind == "ask":
        return {"ask": True, "seconds": seconds}
    if kind == "review":
        return {"n": 1}
    return {"seconds": seconds / 2 if kind == "chain" else seconds}


def move(*enabled: Callable[[Any], bool], **arguments: st.SearchStrategy[Any]) -> Callable[[F], F]:
    """A rule of the machine, unless ``LIFECYCLE_SKIP_MOVES`` names it, enabled while every ``enabled`` holds."""

    def decorate(f: F) -> F:
        def allowed(machine: Any) -> bool:
            return f.__name__ not in SKIP and all(check(machine) for check in enabled)

        ruled = cast(Any, rule)(**arguments)(f)  # rule()'s overloads cannot tell a dict of arguments from targets=
        return cast(F, precondition(allowed)(ruled))

    return decorate


@pytest.fixture(scope="module")
def mesh(servers: MeshServers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LoopThread, Mesh]]:
    loop = LoopThread()
    m = Mesh(servers, tmp_path_factory.mktemp("lifecycle"))
    try:
        loop.run(m.start(), 180)
        yield loop, m
    finally:
        try:
            loop.run(m.stop(), 60)
        finally:
            loop.close()


class Lifecycle(RuleBasedStateMachine):
    """One example: a fresh model over the module's mesh."""

    loop: LoopThread
    mesh: Mesh
    deadline = math.inf
    """``time.monotonic()`` past which no move starts (``LIFECYCLE_BUDGET``)."""

    def __init__(self) -> None:
        super().__init__()
        self.model = Model()
        self.background: list[Future[None]] = []
        self.kills = 0
        self.replay = not SHRINK and current_build_context().is_final
        """The failing example's printing run (moves drawn and printed, nothing sent)."""
        self.idle = self.replay or time.monotonic() > self.deadline
        """Nothing is sent: the printing run, or an example started past the budget."""
        self.cut = False
        """The budget ran out during this example (its later moves were not run)."""

    def _off(self) -> bool:
        """No call is made: a violation is already found, this example is idle, or the budget is spent."""
        if not self.idle and time.monotonic() > self.deadline:
            self.idle = self.cut = True
        return bool(self.model.violations) or self.idle

    # plumbing: every move runs its calls on the mesh's loop, where the model checks each answer. A violation
    # is raised at teardown, not at once: the machine draws the same moves whether or not the mesh misbehaves
    # (a race that shows only sometimes must not change what hypothesis generates), and once one is found the
    # remaining moves are skipped.
    def _run(self, coro: Any, bound: float = 2 * WORK_BOUND + 10) -> None:
        if self._off():
            coro.close()
            return
        future = self.loop.submit(coro)
        try:
            future.result(bound)
        except FutureTimeout:
            future.cancel()
            self.model.violations.append(Unanswered(f"a move took longer than {bound:g}s"))

    def _new(self, kind: str, *, long: bool = False) -> Tracked:
        context = uuid.uuid4().hex
        message = make_message(data=_first_input(kind, long), context_id=context)
        t = Tracked(
            label=f"t{len(self.model.tasks)}",
            kind=kind,
            target=TARGETS[kind],
            message=message,
            context_id=context,
            task_id=task_id_for(TARGETS[kind], message.message_id),
        )
        self.model.tasks.append(t)
        return t

    def _pick(self, pick: int, *, waiting: str | None = None) -> Tracked | None:
        if waiting is not None:
            pool = [t for t in self.model.tasks if t.kind == waiting and t.waiting]
        else:
            pool = self.model.tasks
        return pool[pick % len(pool)] if pool else None

    async def _send(self, t: Tracked, via: Transport, stream: bool, what: str) -> Answer:
        t.pending += 1
        try:
            answer = await self.mesh.send(via, t.target, t.message, stream=stream)
        finally:
            t.pending -= 1
        self.model.sent(t, what, answer, frozenset({ANSWERS[t.kind]}))
        return answer

    async def _resend(self, t: Tracked, via: Transport, raw: bool, what: str) -> Answer:
        t.pending += 1
        try:
            if raw and via == "nats":
                answer = await self.mesh.resend_raw(t.target, t.message)
            else:
                answer = await self.mesh.send(via, t.target, t.message)
        finally:
            t.pending -= 1
        # the first copy's answer, unless a message continued the task since: then the task as it stands
        self.model.sent(t, what, answer, None if t.continues else frozenset({ANSWERS[t.kind]}))
        return answer

    async def _continue(self, t: Tracked, via: Transport, data: dict[str, Any], what: str) -> None:
        span = Span(asyncio.get_running_loop().time())
        t.continues.append(span)
        message = make_message(data=data, task_id=t.task_id)
        if t.kind == "ask":
            predicted = frozenset({INPUT_REQUIRED if data.get("ask") else COMPLETED})
        else:
            predicted = frozenset({COMPLETED if data["decision"] == "approve" else FAILED})
        t.pending += 1
        try:
            answer = await self.mesh.send(via, t.target, message)
        finally:
            t.pending -= 1
        self.model.continued(t, what, answer, span, predicted)

    async def _cancel(self, t: Tracked, via: Transport, what: str, delay: float = 0.0) -> None:
        if delay:
            await asyncio.sleep(delay)
        span = Span(asyncio.get_running_loop().time())
        t.cancels.append(span)
        answer = await self.mesh.cancel(via, t.target, t.task_id)
        self.model.cancelled(t, what, answer, span)

    async def _get(self, t: Tracked, via: Transport, what: str) -> None:
        self.model.got(t, what, await self.mesh.get(via, t.target, t.task_id))

    def _in_background(self, coro: Any) -> None:
        if self._off():
            coro.close()
            return
        self.background.append(self.loop.submit(coro))

    def _settle(self) -> None:
        pending, self.background = self.background, []
        for future in pending:
            try:
                future.result(2 * WORK_BOUND + 10)
            except FutureTimeout:
                future.cancel()
                self.model.violations.append(Unanswered("a call in flight across moves never ended"))

    # moves
    @initialize(via=vias)
    def first_tasks(self, via: Transport) -> None:
        """One task of each kind, started at once, so that every move has material from the first step."""

        async def start() -> None:
            tasks = [self._new(kind) for kind in KINDS]
            await asyncio.gather(*(self._send(t, via, False, f"send via {via}") for t in tasks))

        self._run(start())

    @move(kind=kinds, via=vias, stream=st.booleans(), wait=st.booleans(), long=st.booleans())
    def send(self, kind: str, via: Transport, stream: bool, wait: bool, long: bool) -> None:
        """Start a task; ``wait``: until its answer, else it stays in flight across the next moves."""
        t = self._new(kind, long=long)
        what = f"{'stream' if stream else 'send'} via {via}"
        if wait:
            self._run(self._send(t, via, stream, what))
        else:
            t.pending += 1  # counted at once: the next move must not take it for idle
            self._in_background(self._background_send(t, via, stream, what))

    async def _background_send(self, t: Tracked, via: Transport, stream: bool, what: str) -> None:
        t.pending -= 1
        await self._send(t, via, stream, what + " (in flight across moves)")

    @move(pick=picks, via=vias, again=st.booleans())
    def continue_task(self, pick: int, via: Transport, again: bool) -> None:
        """Answer an agent task waiting for input (``again``: the agent asks once more)."""
        t = self._pick(pick, waiting="ask")
        if t is not None:
            self._run(self._continue(t, via, {"ask": again, "seconds": 0.2}, f"continue via {via}"))

    @move(pick=picks, via=vias, approve=st.booleans())
    def review(self, pick: int, via: Transport, approve: bool) -> None:
        """Approve or reject a paused review."""
        t = self._pick(pick, waiting="review")
        if t is not None:
            data = {"decision": "approve"} if approve else {"decision": "reject", "reason": "model says no"}
            self._run(self._continue(t, via, data, f"{data['decision']} via {via}"))

    @move(pick=picks, via=vias)
    def cancel(self, pick: int, via: Transport) -> None:
        t = self._pick(pick)
        if t is not None:
            self._run(self._cancel(t, via, f"cancel via {via}"))

    @move(pick=picks, via=vias, raw=st.booleans())
    def resend(self, pick: int, via: Transport, raw: bool) -> None:
        """An exact resend of a task's first message (``raw`` over NATS: a new Nats-Msg-Id)."""
        t = self._pick(pick)
        if t is not None:
            how = "raw, new Nats-Msg-Id" if raw and via == "nats" else "same messageId"
            self._run(self._resend(t, via, raw, f"resend via {via} ({how})"))

    @move(pick=picks, via=vias)
    def get(self, pick: int, via: Transport) -> None:
        t = self._pick(pick)
        if t is not None:
            self._run(self._get(t, via, f"GetTask via {via}"))

    @move(pick=picks, via=vias)
    def list_tasks(self, pick: int, via: Transport) -> None:
        t = self._pick(pick)
        if t is None:
            return

        async def bracket(t: Tracked) -> None:
            before = await self.mesh.get(via, t.target, t.task_id)
            listing = await self.mesh.listed(via, t.target, t.context_id, t.task_id)
            after = await self.mesh.get(via, t.target, t.task_id)
            self.model.listed(t, f"ListTasks via {via}", before, listing, after)

        self._run(bracket(t))

    @move(pick=picks, via=vias)
    def subscribe(self, pick: int, via: Transport) -> None:
        t = self._pick(pick)
        if t is None:
            return

        async def follow(t: Tracked) -> None:
            self.model.got(t, f"subscribe via {via}", await self.mesh.subscribe(via, t.target, t.task_id))

        self._run(follow(t))

    @move(
        lambda self: self.kills < MAX_KILLS,
        which=st.sampled_from(sorted(p for p, kind in KILLABLE.items() if kind in KINDS) or sorted(KILLABLE)),
        via=vias,
        delay=st.sampled_from([0.1, 0.5]),
    )
    def kill(self, which: str, via: Transport, delay: float) -> None:
        """SIGKILL an agent or the executor while it holds a task of its own, restart it; the task must
        still end as it would have."""
        self.kills += 1
        t = self._new(KILLABLE[which], long=True)
        t.pending += 1
        self._in_background(self._background_send(t, via, False, f"send via {via} (its process SIGKILLed)"))

        async def kill() -> None:
            await asyncio.sleep(delay)
            await self.mesh.kill(which)

        self._run(kill(), 120)

    # races: two moves at once
    @move(pick=picks, via=vias, via_cancel=vias, delay=delays, review=st.booleans())
    def race_cancel_continue(
        self, pick: int, via: Transport, via_cancel: Transport, delay: float, review: bool
    ) -> None:
        t = self._pick(pick, waiting="review" if review else "ask")
        if t is None:
            return
        data: dict[str, Any] = {"decision": "approve"} if review else {"ask": False, "seconds": 0.2}
        word = "approve" if review else "continue"

        async def race(t: Tracked) -> None:
            await asyncio.gather(
                self._continue(t, via, data, f"{word} via {via} (racing a cancel)"),
                self._cancel(t, via_cancel, f"cancel via {via_cancel} (racing a {word}, +{delay:g}s)", delay),
            )
            await self._get(t, via, f"GetTask via {via} after the race")

        self._run(race(t))

    @move(kind=kinds, via=vias, via_cancel=vias, delay=st.sampled_from([None, 0.0, 0.02, 0.1, 0.3]))
    def race_cancel_send(self, kind: str, via: Transport, via_cancel: Transport, delay: float | None) -> None:
        """A cancel racing a task's first call (``None``: sent the moment the call is answered, which for a
        review or an agent's question is when it pauses)."""
        t = self._new(kind)

        async def race(t: Tracked) -> None:
            if delay is None:
                await self._send(t, via, False, f"send via {via}")
                await self._cancel(t, via_cancel, f"cancel via {via_cancel} (right after the answer)")
            else:
                await asyncio.gather(
                    self._send(t, via, False, f"send via {via} (racing a cancel)"),
                    self._cancel(t, via_cancel, f"cancel via {via_cancel} (racing the send, +{delay:g}s)", delay),
                )
            await self._get(t, via_cancel, f"GetTask via {via_cancel} after the race")

        self._run(race(t))

    @move(kind=kinds, via=vias, via_resend=vias, raw=st.booleans(), delay=delays)
    def race_resend(self, kind: str, via: Transport, via_resend: Transport, raw: bool, delay: float) -> None:
        """An exact resend racing the first call: both answer the same task, alike."""
        t = self._new(kind)
        how = "raw, new Nats-Msg-Id" if raw and via_resend == "nats" else "same messageId"

        async def race(t: Tracked) -> None:
            async def later() -> Answer:
                await asyncio.sleep(delay)
                return await self._resend(t, via_resend, raw, f"resend via {via_resend} ({how}, +{delay:g}s)")

            await asyncio.gather(self._send(t, via, False, f"send via {via} (racing its resend)"), later())

        self._run(race(t))

    def teardown(self) -> None:
        if self.replay and FOUND:
            raise FOUND[-1]
        self._settle()
        if self.idle and not self.cut:
            return

        async def last_look() -> None:
            for t in self.model.tasks:
                await self._get(t, "nats", "GetTask at the end")

        self._run(last_look(), CONTROL_BOUND * (len(self.model.tasks) + 1))
        calls = sum(len(t.log) for t in self.model.tasks)
        TOTALS.append((len(self.model.tasks), calls, self.kills))
        if self.model.violations:
            first, *more = self.model.violations
            if more:
                first.add_note(f"and {len(more)} more: " + "; ".join(sorted({type(v).__name__ for v in more})))
            FOUND.append(first)
            raise first


# a ceiling, not the budget: within the budget, the move in flight, its calls' bounds and the last look; without
# one, generating, then at most hypothesis' 300 s of shrinking, with each move's worst case
@pytest.mark.timeout(BUDGET + 8 * WORK_BOUND if math.isfinite(BUDGET) else 600 + EXAMPLES * STEPS * 3)
def test_lifecycle_model(mesh: tuple[LoopThread, Mesh]) -> None:
    """The lifecycle holds in every interleaving the machine tries (seeded; see the module docstring)."""
    Lifecycle.loop, Lifecycle.mesh = mesh
    Lifecycle.deadline = time.monotonic() + BUDGET
    TOTALS.clear()
    FOUND.clear()
    phases = [Phase.explicit, Phase.reuse, Phase.generate, *([Phase.shrink] if SHRINK else [])]
    try:
        run_state_machine_as_test(
            seed(SEED)(Lifecycle),
            settings=settings(
                max_examples=EXAMPLES,
                stateful_step_count=STEPS,
                deadline=None,
                database=None,
                phases=phases,
                suppress_health_check=list(HealthCheck),
                print_blob=False,
            ),
        )
    finally:
        tasks, calls, kills = (sum(column) for column in zip(*TOTALS, strict=True)) if TOTALS else (0, 0, 0)
        runs = f"{len(TOTALS)} examples run ({'shrinking included' if SHRINK else 'no shrinking'})"
        if time.monotonic() > Lifecycle.deadline:
            runs += f", the {BUDGET:g} s budget spent"
        print(f"lifecycle model: seed {SEED}, {runs}, {tasks} tasks, {calls} calls, {kills} kills")
