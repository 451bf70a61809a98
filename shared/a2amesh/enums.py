"""The string enums written on the hot paths (task states, roles, node and execution statuses).

pydantic-core writes an enum field by reading its member's ``value``, which :class:`enum.Enum` serves through a
Python descriptor (two Python calls per read, ~10 per task an agent answers); :class:`ValueEnum` serves it from the
member's ``_value_`` in C. Everything else is :class:`enum.StrEnum`'s.
"""

from __future__ import annotations

from enum import StrEnum
from operator import attrgetter
from typing import TYPE_CHECKING

__all__ = ["ValueEnum"]


class ValueEnum(StrEnum):
    """A :class:`~enum.StrEnum` whose members' ``value`` is read without a Python call (no member may be named
    ``value``)."""

    if not TYPE_CHECKING:  # mypy keeps Enum's own typing of ``value``
        value = property(attrgetter("_value_"))
