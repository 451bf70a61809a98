"""One owner per kind of background task (docs/architecture.md, "Background work").

Only ``a2amesh/lifecycle.py`` starts tasks: an object's own loops and tasks started from synchronous callbacks
go through a :class:`~a2amesh.lifecycle.Background`, a task for one block is a :func:`~a2amesh.lifecycle.side_task`,
children that fail together are an ``asyncio.TaskGroup``. The scan parses every module with ``ast`` (nothing is
imported) and reports every ``create_task`` (other than a TaskGroup's), ``ensure_future`` and ``asyncio.Task(...)``
elsewhere, except the hot paths of :data:`ALLOWED`, where an owner's extra callback per task would cost.
"""

from __future__ import annotations

import ast
import asyncio

import pytest

from a2amesh.lifecycle import side_task, wait_set_or_done
from tests.support.source import PACKAGE, modules

OWNER = "lifecycle.py"

ALLOWED: dict[tuple[str, str], str] = {
    ("agent/host.py", "AgentHost._start_worker"): "one task per pulled message, with the one done callback it needs",
    ("agent/host.py", "AgentHost._work"): "one handler task per A2A task, awaited through one future",
    ("executor/calls.py", "NodeCalls.track"): "one task per node call, tracked with one done callback",
    ("executor/runner.py", "ExecutionRunner.send_dispatches"): "one task per step's dispatches, awaited by the caller",
}
"""(module path under a2amesh/, enclosing function) → why a bare task is started there."""

_STARTERS = frozenset({"create_task", "ensure_future"})


def _task_groups(tree: ast.AST) -> set[str]:
    """The expressions (as source) a module binds to an ``asyncio.TaskGroup``: ``async with TaskGroup() as x``,
    ``x = TaskGroup()``, and anything annotated as one."""

    def makes_group(node: ast.expr | None) -> bool:
        return isinstance(node, ast.Call) and ast.unparse(node.func).endswith("TaskGroup")

    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.AsyncWith):
            found.update(
                ast.unparse(i.optional_vars) for i in node.items if i.optional_vars and makes_group(i.context_expr)
            )
        elif isinstance(node, ast.Assign) and makes_group(node.value):
            found.update(ast.unparse(t) for t in node.targets)
        elif isinstance(node, ast.AnnAssign) and (
            "TaskGroup" in ast.unparse(node.annotation) or makes_group(node.value)
        ):
            found.add(ast.unparse(node.target))
    return found


def _starts(tree: ast.Module) -> list[tuple[int, str, str]]:
    """(line, enclosing function, call) of every task a module starts other than a TaskGroup's."""
    groups = _task_groups(tree)
    found: list[tuple[int, str, str]] = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            scope = [*scope, node.name]
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute):
                bare = func.attr in _STARTERS and not (func.attr == "create_task" and ast.unparse(func.value) in groups)
                bare = bare or ast.unparse(func) == "asyncio.Task"
            else:
                bare = isinstance(func, ast.Name) and func.id in _STARTERS
            if bare:
                found.append((node.lineno, ".".join(scope), ast.unparse(func)))
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    visit(tree, [])
    return found


def _all_starts() -> dict[tuple[str, str], list[str]]:
    starts: dict[tuple[str, str], list[str]] = {}
    for path, tree in modules():
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == OWNER:
            continue
        for line, scope, call in _starts(tree):
            starts.setdefault((rel, scope), []).append(f"a2amesh/{rel}:{line} {scope}: {call}(...)")
    return starts


def test_no_bare_task_outside_the_owner() -> None:
    """A task started with ``asyncio.create_task`` and left to itself is a fourth way to own background work."""
    bare = [where for key, lines in _all_starts().items() if key not in ALLOWED for where in lines]
    assert not bare, (
        "start these through lifecycle.Background (an object's tasks, callbacks), lifecycle.side_task (one block) "
        "or an asyncio.TaskGroup (children failing together); a hot path goes in ALLOWED with its reason:\n"
        + "\n".join(bare)
    )


def test_every_exception_is_still_there() -> None:
    """An exception whose task start went away is removed from the list, so the list stays the truth."""
    stale = sorted(f"{path} {scope}" for path, scope in ALLOWED.keys() - _all_starts().keys())
    assert not stale, f"no longer start a bare task, remove them from ALLOWED: {stale}"


def test_the_scan_finds_the_ways_of_starting_a_task() -> None:
    source = ast.parse(
        "import asyncio\n"
        "from asyncio import ensure_future\n"
        "class A:\n"
        "    def __init__(self):\n"
        "        self.group: asyncio.TaskGroup | None = None\n"
        "    async def f(self, loop, coro):\n"
        "        asyncio.create_task(coro)\n"
        "        loop.create_task(coro)\n"
        "        ensure_future(coro)\n"
        "        asyncio.Task(coro)\n"
        "        self.group.create_task(coro)\n"
        "        async with asyncio.TaskGroup() as tg:\n"
        "            tg.create_task(coro)\n"
    )
    assert [(line, scope) for line, scope, _ in _starts(source)] == [(7, "A.f"), (8, "A.f"), (9, "A.f"), (10, "A.f")]


async def test_a_side_task_runs_for_the_block_and_is_stopped_after_it() -> None:
    started = asyncio.Event()
    stopped = False

    async def side() -> None:
        nonlocal stopped
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            stopped = True

    async with side_task(side(), name="side") as task:
        await started.wait()
        assert not task.done()
    assert task.cancelled()
    assert stopped


async def test_a_failed_side_task_raises_its_error_when_the_block_is_left() -> None:
    async def fails() -> None:
        raise ValueError("side")

    reached_the_end = False

    async def block() -> None:
        nonlocal reached_the_end
        async with side_task(fails()) as task:
            await asyncio.wait({task})
            reached_the_end = True  # the failure does not interrupt the block

    with pytest.raises(ValueError, match="side"):
        await block()
    assert reached_the_end


async def test_the_blocks_own_error_wins_over_the_side_tasks() -> None:
    async def fails() -> None:
        raise ValueError("side")

    async def block() -> None:
        async with side_task(fails()) as task:
            await asyncio.wait({task})
            raise KeyError("block")

    with pytest.raises(KeyError):
        await block()


async def test_wait_set_or_done_returns_at_the_first_and_cancels_neither() -> None:
    event = asyncio.Event()
    never = asyncio.get_running_loop().create_future()
    waiting = asyncio.ensure_future(wait_set_or_done(event, never))
    await asyncio.sleep(0)
    assert not waiting.done()
    event.set()
    await waiting
    assert not never.done()

    done = asyncio.get_running_loop().create_future()
    done.set_result(None)
    await wait_set_or_done(asyncio.Event(), done)
    await wait_set_or_done(asyncio.Event(), never, timeout=0.01)
    assert not never.cancelled()
    never.cancel()
