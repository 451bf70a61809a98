"""``a2amesh chat WORKFLOW_OR_AGENT``: a conversation at the prompt with a conversational workflow or an agent.

Every line typed is one A2A message on the conversation's ``contextId`` (a workflow keeps the history per
context; an LLM agent with ``history: true`` too). Answers are streamed where the callee streams them (an agent's
text deltas), and a workflow's progress (the node working now) is shown on stderr while it runs. A question
back (the task waits for input) is asked at the prompt and the next line answers it; ``/new`` starts a new
conversation; Ctrl-D (end of input) leaves. Exit codes follow :mod:`a2amesh.cli.exits`: 0 when left.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING, Any

from a2amesh.cli.exits import EXIT_OK
from a2amesh.cli.output import review_request
from a2amesh.cli.settings import verb_settings
from a2amesh.errors import A2AMeshError
from a2amesh.protocol.states import state_word
from a2amesh.protocol.vocabulary import WORKFLOW_EVENT_KEY

if TYPE_CHECKING:
    from a2amesh.client import Client
    from a2amesh.protocol import Task

__all__ = ["cmd_chat"]

HELP = "(type a message; /new starts a new conversation; Ctrl-D leaves)"


def _read(prompt: str) -> str | None:
    """One line from the user (None at the end of input)."""
    try:
        return input(prompt)
    except EOFError:
        return None


def _answer_text(task: Task) -> str:
    output = task.output()
    if output is None and task.status.message is not None:
        return task.status.message.text()
    return output if isinstance(output, str) else json.dumps(output, indent=2, ensure_ascii=False, default=str)


def _progress(metadata: dict[str, Any]) -> str | None:
    event = metadata.get(WORKFLOW_EVENT_KEY)
    if not isinstance(event, dict) or event.get("event") != "node.started":
        return None
    agent = event.get("agent")
    return f"  … {event.get('path') or event.get('node_id')}" + (f" ({agent})" if agent else "")


async def _turn(
    client: Client, args: argparse.Namespace, text: str, context_id: str, task_id: str | None
) -> tuple[Task, bool]:
    """Send one line and show what comes back while it works; the task at its end (or pause), and whether its
    answer was streamed (already printed)."""
    from a2amesh.client import TokenDelta, make_message

    message = make_message(text, context_id=context_id, task_id=task_id)
    call = await client.dispatch(args.target, message, stream=True, deltas=True, timeout=args.timeout)
    streamed = False
    async for event in call.events_and_deltas():
        if isinstance(event, TokenDelta):
            if not streamed:
                print(f"{args.target}> ", end="", flush=True)
                streamed = True
            print(event.text, end="", flush=True)
        elif event.status_update is not None:
            line = _progress(event.status_update.metadata or {})
            if line:
                print(line, file=sys.stderr, flush=True)
    task = call.task
    assert task is not None
    if streamed:
        print(flush=True)
    return task, streamed


async def cmd_chat(args: argparse.Namespace) -> int:
    """Talk to ``args.target`` until the end of input."""
    from a2amesh.client import connect
    from a2amesh.ids import nuid

    settings = verb_settings(args)
    async with connect(settings, name="a2amesh-cli") as client:
        await client.registry.resolve(args.target)  # an unknown name fails now, not at the first line
        context_id = args.context or nuid()
        waiting: str | None = None  # the task that asked a question: the next line answers it
        print(f"chat with {args.target}, conversation {context_id} {HELP}", file=sys.stderr, flush=True)
        while True:
            line = await asyncio.to_thread(_read, "you> " if sys.stdin.isatty() else "")
            if line is None:
                print(file=sys.stderr)
                return EXIT_OK
            text = line.strip()
            if not text:
                continue
            if text == "/new":
                context_id, waiting = nuid(), None
                print(f"(a new conversation: {context_id})", file=sys.stderr, flush=True)
                continue
            try:
                task, streamed = await _turn(client, args, text, context_id, waiting)
            except A2AMeshError as e:  # this line failed; the conversation goes on
                print(f"({e})", file=sys.stderr, flush=True)
                continue
            waiting = None
            state = state_word(task.status.state)
            if state == "completed":
                if not streamed:
                    print(f"{args.target}> {_answer_text(task)}", flush=True)
            elif state == "paused":
                review = review_request(task)
                if review is not None:
                    print(f"{args.target}? {review.get('prompt', '')} (a review: answer it with", flush=True)
                    print(f"  a2amesh resume {task.id} --approve | --reject)", flush=True)
                else:
                    question = task.status.message.text() if task.status.message else ""
                    print(f"{args.target}? {question}", flush=True)
                    waiting = task.id
            else:
                reason = task.status.message.text() if task.status.message else ""
                print(f"({state}{': ' + reason if reason else ''})", file=sys.stderr, flush=True)
