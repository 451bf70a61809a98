"""The runtime an agent host serves new tasks with, and the replaced runtimes tasks still run on.

A stored LLM agent updated through the management API gets a new runtime while tasks may still run on
the old one (each finishes on the runtime it started with). What a runtime holds (an LLM agent's HTTP
connections) is released once nothing runs on it: at once when idle, else after its last task.
"""

from __future__ import annotations

from typing import Any

from a2amesh.agent.python_agent import AgentRuntime
from a2amesh.lifecycle import Background

__all__ = ["Runtimes"]


class Runtimes:
    """The current runtime of one agent host, with a count of the tasks running on each runtime."""

    def __init__(self, runtime: AgentRuntime, *, log: Any) -> None:
        self.current = runtime
        self._log = log
        self._in_use: dict[int, int] = {}  # id(runtime) → tasks running on it
        self._retired: dict[int, AgentRuntime] = {}  # replaced, with tasks still running on it
        self._closing = Background()
        """Replaced runtimes being closed after their last task (from :meth:`release`, a synchronous call)."""

    def acquire(self) -> AgentRuntime:
        """The runtime a new task runs on (hand it back with :meth:`release` when the task ends)."""
        runtime = self.current
        self._in_use[id(runtime)] = self._in_use.get(id(runtime), 0) + 1
        return runtime

    def release(self, runtime: AgentRuntime) -> None:
        """A task on ``runtime`` ended: a replaced runtime is closed after its last task."""
        left = self._in_use[id(runtime)] - 1
        if left:
            self._in_use[id(runtime)] = left
            return
        del self._in_use[id(runtime)]
        if self._retired.pop(id(runtime), None) is not None:
            self._closing.spawn(self._close(runtime), name="close-runtime")

    async def replace(self, runtime: AgentRuntime) -> None:
        """Serve new tasks with ``runtime``; the old one is closed now if idle, else after its last task."""
        old, self.current = self.current, runtime
        if old is runtime:
            return
        if self._in_use.get(id(old)):
            self._retired[id(old)] = old
        else:
            await self._close(old)

    async def aclose(self) -> None:
        """Close every runtime (the host has stopped: no task runs any more)."""
        await self._closing.wait()
        for runtime in [*self._retired.values(), self.current]:
            await self._close(runtime)
        self._retired.clear()

    async def _close(self, runtime: AgentRuntime) -> None:
        close = getattr(runtime, "aclose", None)
        if close is None:
            return
        try:
            await close()
        except Exception as e:  # a close that fails leaves connections to the collector; the host goes on
            self._log.warning("agent.close_failed", error=str(e) or type(e).__name__)
