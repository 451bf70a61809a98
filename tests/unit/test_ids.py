"""Derived ids: the hot-path uuid5 is the standard one."""

from __future__ import annotations

import re
import uuid
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from a2amesh.ids import TASK_NAMESPACE, idempotency_key_for, node_message_id, nuid, task_id_for, uuid5_text


@given(st.text(max_size=80))
def test_uuid5_text_is_the_standard_uuid5(name: str) -> None:
    assert uuid5_text(name) == str(uuid.uuid5(TASK_NAMESPACE, name))


def test_derived_ids_keep_their_documented_form() -> None:
    """``task_id_for`` and ``node_message_id`` are uuid5 of the texts docs/protocol.md gives."""
    assert task_id_for("echo", "m-1") == str(uuid.uuid5(TASK_NAMESPACE, "echo:m-1"))
    assert node_message_id("exec", "each[3]", 2, 1) == str(uuid.uuid5(TASK_NAMESPACE, "exec/each[3]#2@1"))


def test_nuids_are_22_alphanumerics_spread_over_all_62() -> None:
    """Safe as a NATS subject token and a Redis key part, fresh each time, no character favoured."""
    ids = [nuid() for _ in range(20_000)]
    assert all(re.fullmatch(r"[0-9A-Za-z]{22}", i) for i in ids)
    assert len(set(ids)) == len(ids)
    counts = Counter("".join(ids))
    assert len(counts) == 62
    expected = 22 * len(ids) / 62  # 7,097 each (σ ≈ 84); byte % 62 over all 256 bytes would favour 8 by 25 %
    assert all(abs(n - expected) < 0.06 * expected for n in counts.values()), counts


def test_idempotency_keys_follow_the_node_attempt() -> None:
    """``ctx.idempotency_key``: the same for a redelivery and for an executor's re-dispatch of the same node
    attempt (same messageId, so the same task id); another for the node's next attempt, another turn of the
    task, the node handler's next call of the handler, another agent or namespace."""
    first = node_message_id("exec-1", "charge", 0, 1)
    task = task_id_for("payer", first)
    key = idempotency_key_for("ns", "payer", task, first)
    assert key == idempotency_key_for("ns", "payer", task_id_for("payer", first), first)
    assert str(uuid.UUID(key)) == key
    retry = node_message_id("exec-1", "charge", 0, 2)
    others = {
        idempotency_key_for("ns", "payer", task_id_for("payer", retry), retry),
        idempotency_key_for("ns", "payer", task, "a-continuing-message"),
        idempotency_key_for("ns", "payer", task, first, handler_try=2),
        idempotency_key_for("ns", "payee", task, first),
        idempotency_key_for("other", "payer", task, first),
    }
    assert key not in others
    assert len(others) == 5
    assert idempotency_key_for("ns", "payer", task, first, handler_try=1) == key
