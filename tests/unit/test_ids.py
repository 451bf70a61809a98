"""Derived ids: the hot-path uuid5 is the standard one."""

from __future__ import annotations

import re
import uuid
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from a2amesh.ids import TASK_NAMESPACE, node_message_id, nuid, task_id_for, uuid5_text


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
