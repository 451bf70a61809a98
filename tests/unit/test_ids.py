"""Derived ids: the hot-path uuid5 is the standard one."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from a2amesh.ids import TASK_NAMESPACE, node_message_id, task_id_for, uuid5_text


@given(st.text(max_size=80))
def test_uuid5_text_is_the_standard_uuid5(name: str) -> None:
    assert uuid5_text(name) == str(uuid.uuid5(TASK_NAMESPACE, name))


def test_derived_ids_keep_their_documented_form() -> None:
    """``task_id_for`` and ``node_message_id`` are uuid5 of the texts docs/protocol.md gives."""
    assert task_id_for("echo", "m-1") == str(uuid.uuid5(TASK_NAMESPACE, "echo:m-1"))
    assert node_message_id("exec", "each[3]", 2, 1) == str(uuid.uuid5(TASK_NAMESPACE, "exec/each[3]#2@1"))
