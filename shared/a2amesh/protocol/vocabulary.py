"""a2amesh's own words on the A2A wire: the ``type`` of its control DataParts and its metadata keys.

Every spelling lives here; agents, the executor, the engines and the CLI import the names. (The ``Literal``
of :class:`a2amesh.agent.node_handler.NodeRequest` repeats :data:`NODE_REQUEST`, as a type must.)
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BRANCH_KEY",
    "CALL_CHAIN_KEY",
    "SUMMARY_KEY",
    "CONTROL_PART_TYPES",
    "GRAPH_NODE_REQUEST",
    "NODE_PATH_KEY",
    "NODE_REQUEST",
    "NODE_RESULT",
    "RETRY_REQUEST",
    "REVIEW_FREE_ANSWER",
    "REVIEW_REQUEST",
    "TOOL_END",
    "TOOL_START",
    "WORKFLOW_EVENT_KEY",
]

# --- control DataParts: the value of their "type" ---------------------------------------------------------

NODE_REQUEST: Final = "workflow_node_request"
"""A DAG workflow calls an agent as one of its nodes (in the request message)."""

NODE_RESULT: Final = "workflow_node_result"
"""An agent's answer to a :data:`NODE_REQUEST` (in the final status message)."""

GRAPH_NODE_REQUEST: Final = "graph_node_request"
"""A graph workflow calls an agent as one of its nodes."""

RETRY_REQUEST: Final = "workflow_retry"
"""``a2amesh retry``: start a new execution reusing an earlier one's outputs."""

REVIEW_REQUEST: Final = "review_request"
"""An execution paused for a human review (in its ``TASK_STATE_INPUT_REQUIRED`` status message)."""

REVIEW_FREE_ANSWER: Final = "free_answer"
"""Review request field: ``true`` when an agent asked the question (a callee's ``TASK_STATE_INPUT_REQUIRED``), so any
message answers it, as it would the agent: its input goes to the agent as ``{"decision": "approve", "data": …}``."""

TOOL_START: Final = "tool_start"
"""An LLM agent's status update: a tool call started."""

TOOL_END: Final = "tool_end"
"""An LLM agent's status update: a tool call ended."""

CONTROL_PART_TYPES: Final = frozenset({NODE_REQUEST, GRAPH_NODE_REQUEST})
"""Parts a workflow adds to steer a node call; an agent's handler does not see them as input."""

# --- metadata keys ---------------------------------------------------------------------------------------

CALL_CHAIN_KEY: Final = "a2amesh.call_chain"
"""Message metadata: the workflows above this call, outermost first (recursion and depth checks)."""

BRANCH_KEY: Final = "a2amesh.branch"
"""Message metadata of a request to a graph workflow: run this one of its branches on its own (seed 003)."""

NODE_PATH_KEY: Final = "a2amesh.node_path"
"""Message metadata: the calling node's path in its execution (where a nested resume goes up)."""

SUMMARY_KEY: Final = "a2amesh.summary"
"""Task metadata in a ListTasks page: the task is summarised (id, context, state) because its record is large."""

WORKFLOW_EVENT_KEY: Final = "workflow_event"
"""Status-update metadata: one execution event (``node.started``, ``node.completed`` …) for live progress."""
