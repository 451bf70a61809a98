"""Identities: instance and call ids (nuid-like), derived task and message ids (SPEC §3.3)."""

from __future__ import annotations

import re
import secrets
import uuid

_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")
TASK_NAMESPACE = uuid.UUID("8f6b2d4e-3a1c-5e7f-9b0d-a2a3e5b0c1d2")


def nuid() -> str:
    """A fresh 22-character random id that is safe as a NATS subject token."""
    n = secrets.randbits(128)
    out = []
    for _ in range(22):
        n, r = divmod(n, 62)
        out.append(_ALPHABET[r])
    return "".join(out)


def task_id_for(agent: str, message_id: str) -> str:
    """The task id a callee derives from its name and the request's messageId."""
    return str(uuid.uuid5(TASK_NAMESPACE, f"{agent}:{message_id}"))


def node_message_id(execution_id: str, node_path: str, iteration: int, attempt: int) -> str:
    """The deterministic messageId of one attempt of one workflow node."""
    return str(uuid.uuid5(TASK_NAMESPACE, f"{execution_id}/{node_path}#{iteration}@{attempt}"))


def check_name(name: str, what: str = "agent name") -> str:
    """Return ``name`` if it is a valid agent/workflow name, else raise ValueError saying why."""
    if not NAME_RE.match(name):
        raise ValueError(f"{what} {name!r} must match [A-Za-z0-9_-]+")
    return name
