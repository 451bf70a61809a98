"""The result embed an LLM agent ends its answer with when it runs as a workflow node (SPEC §4 step 3).

Canonical forms::

    «result:artifact=NAME status=success»
    «result:artifact=NAME:VERSION status=success»
    «result:status=failure message="why"»

The parser reads the **last** embed of an answer and is lenient about what models actually write:
whitespace and line breaks between tokens and around ``=``, commas between pairs, any key order,
values quoted with ``"``, ``'``, backticks or typographic quotes, versions written ``:N`` or ``:vN``,
markdown (backticks, bold) around the embed, and unknown extra keys (ignored). Any status other
than ``success`` is a failure. What it cannot read raises :class:`EmbedError`, whose message is
written to be quoted back to the model in a retry prompt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from a2amesh.diagnostics import shorten
from a2amesh.errors import A2AMeshError

__all__ = [
    "PLACEHOLDER_NAMES",
    "EmbedError",
    "EmbedErrorKind",
    "ResultEmbed",
    "format_failure_embed",
    "format_success_embed",
    "parse_result_embed",
    "strip_result_embeds",
]

OPEN = "«"
CLOSE = "»"

PLACEHOLDER_NAMES = frozenset({"NAME", "ARTIFACT", "ARTIFACT_NAME", "ARTIFACTNAME", "FILENAME", "FILE", "...", "…"})
"""Artifact names copied from the instructions instead of filled in (``<name>``, ``{name}``, ``[name]`` too)."""

_PLACEHOLDER_VERSIONS = frozenset({"VERSION", "N", "VN", "V"})
_QUOTES = {'"': '"', "'": "'", "`": "`", "“": "”", "‘": "’", "„": "“"}
_START = re.compile(r"«\s*result\b", re.IGNORECASE)
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_VERSION = re.compile(r"[vV]?(\d+)")
_BRACKETED = re.compile(r"<[^<>]*>|\{[^{}]*\}|^\[.*\]$")
_SEPARATORS = ",;"
_MAX_QUOTED = 200


class EmbedErrorKind(StrEnum):
    """Why an answer's result embed could not be used."""

    MISSING = "missing"
    """The answer holds no ``«result…»`` embed."""
    MALFORMED = "malformed"
    """The last embed cannot be read (unclosed, no status, bad version, duplicate key, …)."""
    MISSING_ARTIFACT = "missing_artifact"
    """The embed says ``status=success`` but names no artifact."""
    PLACEHOLDER = "placeholder"
    """The embed names a placeholder such as ``NAME`` or ``<name>`` instead of a real artifact."""


class EmbedError(A2AMeshError, ValueError):
    """An answer's result embed is missing or unusable.

    Attributes:
        kind: what is wrong, as an :class:`EmbedErrorKind`.
        detail: the problem in one sentence, without the embed text.
        embed: the text of the offending embed (``None`` when there is none).
    """

    def __init__(self, kind: EmbedErrorKind, detail: str, embed: str | None = None) -> None:
        self.kind = kind
        self.detail = detail
        self.embed = embed
        subject = "no result embed" if embed is None else f"result embed {_shorten(embed)}"
        super().__init__(f"{subject}: {detail}")


@dataclass(frozen=True, slots=True)
class ResultEmbed:
    """What an answer's result embed reports.

    Attributes:
        status: ``"success"`` when the embed's status is ``success`` (ignoring case and markdown
            emphasis); anything else is ``"failure"``.
        artifact: the artifact name, without its version; ``None`` when the embed names none.
        version: the artifact version (``:N`` or ``:vN``), or ``None`` for "the latest".
        message: the ``message`` value, if the embed has one.

    Values are stripped of surrounding whitespace.
    """

    status: Literal["success", "failure"]
    artifact: str | None = None
    version: int | None = None
    message: str | None = None

    @property
    def ok(self) -> bool:
        """The agent reports success."""
        return self.status == "success"


def parse_result_embed(text: str) -> ResultEmbed:
    """Read the last result embed of an answer.

    Args:
        text: the model's whole answer.

    Returns:
        The embed's status, artifact name and version, and message.

    Raises:
        EmbedError: no embed, an unreadable one, ``status=success`` without an artifact, or a placeholder
            artifact name; ``kind`` says which.
    """
    starts = list(_START.finditer(text))
    if not starts:
        raise EmbedError(
            EmbedErrorKind.MISSING,
            f"end the answer with {format_success_embed('NAME')} or {format_failure_embed('why')}",
        )
    start = starts[-1].start()
    pairs, end = _Reader(text, start, starts[-1].end()).read_pairs()
    return _interpret(pairs, text[start:end])


def strip_result_embeds(text: str) -> str:
    """The answer without its result embeds (what a user should see), stripped of surrounding whitespace."""
    out: list[str] = []
    pos = 0
    for match in _START.finditer(text):
        if match.start() < pos:
            continue
        try:
            _, end = _Reader(text, match.start(), match.end()).read_pairs()
        except EmbedError:
            continue
        out.append(text[pos : match.start()])
        pos = end
    out.append(text[pos:])
    return "".join(out).strip()


def format_success_embed(name: str, version: int | None = None) -> str:
    """The canonical success embed for an artifact.

    Args:
        name: the artifact name, without whitespace, ``:``, quotes or ``«»``.
        version: a specific version, or ``None`` for the latest.

    Raises:
        ValueError: the name cannot be written in an embed, or the version is negative.
    """
    if not name or any(c.isspace() or c in ":«»\"'`" for c in name):
        raise ValueError(f"artifact name {name!r} cannot be written in a result embed")
    if version is not None and version < 0:
        raise ValueError(f"artifact version must be >= 0, got {version}")
    suffix = "" if version is None else f":{version}"
    return f"«result:artifact={name}{suffix} status=success»"


def format_failure_embed(message: str) -> str:
    """The canonical failure embed; the message is double-quoted, with ``«»`` written as ``<<``/``>>``."""
    escaped = message.replace(OPEN, "<<").replace(CLOSE, ">>").replace("\\", "\\\\").replace('"', '\\"')
    return f'«result:status=failure message="{escaped}"»'


class _Reader:
    """Reads the ``:key=value …»`` body of one embed; ``start`` is the offset of its ``«``."""

    def __init__(self, text: str, start: int, pos: int) -> None:
        self.text = text
        self.start = start
        self.pos = pos

    def read_pairs(self) -> tuple[dict[str, str], int]:
        """The embed's pairs (keys lower-cased) and the offset just past its ``»``."""
        text = self.text
        self.skip_space()
        if self.at_end() or text[self.pos] != ":":
            raise self.malformed("expected ':' right after «result (write «result:key=value …»)")
        self.pos += 1
        pairs: dict[str, str] = {}
        while True:
            self.skip_space(separators=True)
            if self.at_end():
                raise self.malformed(f"the embed is not closed with {CLOSE}")
            if text[self.pos] == CLOSE:
                return pairs, self.pos + 1
            key_match = _KEY.match(text, self.pos)
            if key_match is None:
                raise self.malformed(f"expected a key=value pair, found {text[self.pos : self.pos + 12]!r}")
            key = key_match.group().lower()
            self.pos = key_match.end()
            self.skip_space()
            if self.at_end() or text[self.pos] != "=":
                raise self.malformed(f"expected '=' after key {key!r}")
            self.pos += 1
            self.skip_space()
            if self.at_end():
                raise self.malformed(f"the embed is not closed with {CLOSE}")
            value = self.read_value(key)
            if key in pairs:
                raise self.malformed(f"key {key!r} appears twice")
            pairs[key] = value

    def read_value(self, key: str) -> str:
        """One quoted or bare value; a backslash escapes the closing quote or itself inside quotes."""
        text = self.text
        closing = _QUOTES.get(text[self.pos])
        if closing is not None:
            opening = text[self.pos]
            chars: list[str] = []
            i = self.pos + 1
            while i < len(text):
                c = text[i]
                if c == "\\" and i + 1 < len(text) and text[i + 1] in (closing, "\\"):
                    chars.append(text[i + 1])
                    i += 2
                elif c == closing:
                    self.pos = i + 1
                    return "".join(chars).strip()
                else:
                    chars.append(c)
                    i += 1
            self.pos = len(text)
            raise self.malformed(f"the value of {key!r} opens a quote {opening} that is never closed")
        i = self.pos
        while i < len(text) and not text[i].isspace() and text[i] != CLOSE:
            i += 1
        value = text[self.pos : i].rstrip(_SEPARATORS).strip("*")
        self.pos = i
        if not value:
            raise self.malformed(f"key {key!r} has no value")
        return value

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def skip_space(self, *, separators: bool = False) -> None:
        text = self.text
        while self.pos < len(text) and (text[self.pos].isspace() or (separators and text[self.pos] in _SEPARATORS)):
            self.pos += 1

    def malformed(self, detail: str) -> EmbedError:
        """A MALFORMED error quoting the embed up to its ``»`` (or up to where reading stopped)."""
        close = self.text.find(CLOSE, self.pos)
        stop = close + 1 if close >= 0 and not self.at_end() else len(self.text)
        return EmbedError(EmbedErrorKind.MALFORMED, detail, self.text[self.start : stop])


def _interpret(pairs: dict[str, str], embed: str) -> ResultEmbed:
    """Turn the pairs of one embed into a :class:`ResultEmbed` (or the error that explains it)."""
    if "status" not in pairs:
        raise EmbedError(
            EmbedErrorKind.MALFORMED, "the embed has no status (add status=success or status=failure)", embed
        )
    status_word = pairs["status"].strip().strip("*_.!").lower()
    status: Literal["success", "failure"] = "success" if status_word == "success" else "failure"
    message = pairs.get("message")
    raw_artifact = pairs.get("artifact", "").strip()
    if not raw_artifact:
        if status == "success":
            raise EmbedError(
                EmbedErrorKind.MISSING_ARTIFACT,
                "status=success needs artifact=NAME, the name the output was saved under",
                embed,
            )
        return ResultEmbed(status=status, message=message)
    name, version = _split_artifact(raw_artifact, embed)
    return ResultEmbed(status=status, artifact=name, version=version, message=message)


def _split_artifact(value: str, embed: str) -> tuple[str, int | None]:
    """Split ``NAME``, ``NAME:N`` or ``NAME:vN`` into name and version."""
    if "://" in value:
        raise EmbedError(
            EmbedErrorKind.MALFORMED,
            f"artifact={value!r} is a URI; give the artifact's name (and :VERSION), as saved",
            embed,
        )
    name, colon, suffix = value.rpartition(":")
    if not colon:
        name, suffix = value, ""
    name = name.strip()
    suffix = suffix.strip()
    if _is_placeholder(name) or (suffix and _is_placeholder(suffix, version=True)):
        raise EmbedError(
            EmbedErrorKind.PLACEHOLDER,
            f"artifact={value!r} is the placeholder from the instructions; "
            "write the name the output was actually saved under",
            embed,
        )
    if not name:
        raise EmbedError(EmbedErrorKind.MALFORMED, f"artifact={value!r} has no name before ':'", embed)
    if not colon:
        return name, None
    version = _VERSION.fullmatch(suffix)
    if version is None:
        raise EmbedError(
            EmbedErrorKind.MALFORMED,
            f"version {suffix!r} of artifact={value!r} is not a number (write NAME, NAME:N or NAME:vN)",
            embed,
        )
    return name, int(version.group(1))


def _is_placeholder(value: str, *, version: bool = False) -> bool:
    if _BRACKETED.search(value):
        return True
    return value.upper() in _PLACEHOLDER_VERSIONS if version else value in PLACEHOLDER_NAMES


def _shorten(embed: str) -> str:
    return shorten(embed, _MAX_QUOTED, flat=True)
