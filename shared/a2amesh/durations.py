"""Durations in workflow definitions: a number of seconds, or text such as ``"30s"``, ``"5m"``, ``"1.5h"``.

Accepted forms (SPEC §5.1): a non-negative number of seconds (``90``, ``0.5``), a numeric string
(``"90"``), or one or more ``<number><unit>`` parts with units ``ms``, ``s``, ``m``, ``h``, ``d``
(``"30s"``, ``"1.5h"``, ``"1h30m"``, Argo/Go style). Parsed values are seconds as ``float``.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

from a2amesh.errors import A2AMeshError

__all__ = ["UNIT_SECONDS", "Duration", "DurationError", "format_duration", "parse_duration"]

UNIT_SECONDS: dict[str, float] = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_PART_RE = re.compile(rf"({_NUMBER})\s*(ms|s|m|h|d)", re.IGNORECASE)
_FULL_RE = re.compile(rf"(?:{_NUMBER}\s*(?:ms|s|m|h|d)\s*)+", re.IGNORECASE)
_PLAIN_RE = re.compile(_NUMBER)
_HINT = "expected seconds or a number with a unit ms, s, m, h or d (e.g. 30s, 5m, 1.5h, 1h30m)"


class DurationError(A2AMeshError, ValueError):
    """A duration could not be parsed.

    Attributes:
        value: the value that was given.
        problem: what is wrong with it.
    """

    def __init__(self, value: object, problem: str) -> None:
        self.value = value
        self.problem = problem
        super().__init__(f"invalid duration {value!r}: {problem}")


def parse_duration(value: object) -> float:
    """Parse a duration into seconds.

    Args:
        value: a number of seconds (int or float, not bool) or a string such as ``"30s"``,
            ``"5m"``, ``"1.5h"``, ``"1d"``, ``"1h30m"`` or ``"90"``.

    Returns:
        The duration in seconds.

    Raises:
        DurationError: the value is not a duration, is negative, or is not finite.
    """
    if isinstance(value, bool):
        raise DurationError(value, f"a boolean is not a duration; {_HINT}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _parse_text(value)
    else:
        raise DurationError(value, f"a {type(value).__name__} is not a duration; {_HINT}")
    if not math.isfinite(seconds):
        raise DurationError(value, "must be a finite number of seconds")
    if seconds < 0:
        raise DurationError(value, "must not be negative")
    return seconds


def _parse_text(value: str) -> float:
    text = value.strip()
    if not text:
        raise DurationError(value, f"empty; {_HINT}")
    if text.startswith("-"):
        raise DurationError(value, "must not be negative")
    if _PLAIN_RE.fullmatch(text):
        return float(text)
    if not _FULL_RE.fullmatch(text):
        bad_unit = re.fullmatch(rf"{_NUMBER}\s*([A-Za-z]+)", text)
        if bad_unit:
            raise DurationError(value, f"unknown unit {bad_unit.group(1)!r}; {_HINT}")
        raise DurationError(value, _HINT)
    return sum(float(number) * UNIT_SECONDS[unit.lower()] for number, unit in _PART_RE.findall(text))


def format_duration(seconds: float) -> str:
    """Render seconds as text that parses back to the same value (``90`` → ``"1.5m"``, ``30`` → ``"30s"``).

    Args:
        seconds: a non-negative number of seconds.

    Returns:
        Text such as ``"500ms"``, ``"30s"``, ``"5m"``, ``"1.5h"`` or ``"2d"``.
    """
    seconds = float(seconds)
    for unit in ("d", "h", "m"):
        amount = seconds / UNIT_SECONDS[unit]
        if amount >= 1 and (amount * 10).is_integer():
            return f"{_trim(amount)}{unit}"
    if 0 < seconds < 1 and (seconds * 1000).is_integer():
        return f"{_trim(seconds * 1000)}ms"
    return f"{_trim(seconds)}s"


def _trim(number: float) -> str:
    return str(int(number)) if number.is_integer() else repr(number)


def _validate(value: Any) -> Any:
    if value is None:
        return None
    return parse_duration(value)


Duration = Annotated[
    float,
    BeforeValidator(_validate),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": r"^\s*(\d+(\.\d*)?|\.\d+)\s*$"},
                {"type": "string", "pattern": r"^\s*((\d+(\.\d*)?|\.\d+)\s*([mM][sS]|[sSmMhHdD])\s*)+$"},
            ],
            "description": "Seconds, or a number with a unit: 500ms, 30s, 5m, 1.5h, 1d, 1h30m.",
        }
    ),
]
"""A pydantic field type: a duration parsed into seconds (see :func:`parse_duration`)."""
