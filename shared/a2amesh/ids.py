"""Identities: instance and call ids (nuid-like), derived task and message ids (SPEC §3.3)."""

from __future__ import annotations

import hashlib
import re
import secrets
import uuid

_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")
TASK_NAMESPACE = uuid.UUID("8f6b2d4e-3a1c-5e7f-9b0d-a2a3e5b0c1d2")


_USABLE = 62 * 4
"""Random bytes below this map to a character without bias (byte % 62); the others are dropped."""
_TO_CHAR = bytes(ord(_ALPHABET[b % 62]) for b in range(_USABLE)) + bytes(256 - _USABLE)
_DROPPED = bytes(range(_USABLE, 256))


def nuid() -> str:
    """A fresh 22-character random id that is safe as a NATS subject token: 22 characters drawn uniformly
    from 62 by the system's CSPRNG (about 131 bits), mapped in C (``bytes.translate``)."""
    out = secrets.token_bytes(32).translate(_TO_CHAR, _DROPPED)
    while len(out) < 22:  # 32 bytes give fewer than 22 characters about once in 3·10^8 ids
        out += secrets.token_bytes(32).translate(_TO_CHAR, _DROPPED)
    return out[:22].decode()


def instance_id(scope: str | None = None) -> str:
    """A process's instance id: a nuid, after ``{scope}.`` when the process has a reply scope.

    The scope is a token of its own in every reply subject (``reply.{scope}.{nuid}.{call_id}``), so a NATS
    server can let a user read only ``reply.{scope}.>`` (docs/scaling.md, permissions).
    """
    return f"{scope}.{nuid()}" if scope else nuid()


_NAMESPACE_BYTES = TASK_NAMESPACE.bytes


def uuid5_text(name: str) -> str:
    """``str(uuid.uuid5(TASK_NAMESPACE, name))``, without building a ``UUID`` (called on every node step)."""
    raw = bytearray(hashlib.sha1(_NAMESPACE_BYTES + name.encode()).digest()[:16])
    raw[6] = (raw[6] & 0x0F) | 0x50  # version 5
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    x = raw.hex()
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"


def task_id_for(agent: str, message_id: str) -> str:
    """The task id a callee derives from its name and the request's messageId."""
    return uuid5_text(f"{agent}:{message_id}")


def idempotency_key_for(namespace: str, agent: str, task_id: str, message_id: str, handler_try: int = 1) -> str:
    """A handler invocation's idempotency key (``ctx.idempotency_key``, docs/agents.md): a UUID fixed by the
    task and the message that started this turn of it, so every redelivery and every re-dispatch of the
    same node attempt (same messageId) gets the same key; a new node attempt (a new messageId), another turn
    of the task, or the node handler calling the handler again after ``RetryWithFeedback``
    (``handler_try``) gets another."""
    suffix = f"#{handler_try}" if handler_try > 1 else ""
    return uuid5_text(f"idempotency:{namespace}/{agent}/{task_id}/{message_id}{suffix}")


def node_message_id(execution_id: str, node_path: str, iteration: int, attempt: int) -> str:
    """The deterministic messageId of one attempt of one workflow node."""
    return uuid5_text(f"{execution_id}/{node_path}#{iteration}@{attempt}")


def check_name(name: str, what: str = "agent name") -> str:
    """Return ``name`` if it is a valid agent/workflow name, else raise ValueError saying why."""
    if not NAME_RE.match(name):
        raise ValueError(f"{what} {name!r} must match [A-Za-z0-9_-]+")
    return name
