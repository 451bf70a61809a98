"""The result-embed parser of the node handler (SPEC §4 step 3)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from a2amesh.agent.embeds import (
    PLACEHOLDER_NAMES,
    EmbedError,
    EmbedErrorKind,
    ResultEmbed,
    format_failure_embed,
    format_success_embed,
    parse_result_embed,
    strip_result_embeds,
)

# --- examples: what models write ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Done. «result:artifact=out.json status=success»", ResultEmbed("success", "out.json")),
        ("«result:artifact=out.json:3 status=success»", ResultEmbed("success", "out.json", 3)),
        ("«result:artifact=out.json:v2 status=success»", ResultEmbed("success", "out.json", 2)),
        ("«result:artifact=out.json:V0 status=success»", ResultEmbed("success", "out.json", 0)),
        (
            '«result:status=failure message="the input has no rows"»',
            ResultEmbed("failure", message="the input has no rows"),
        ),
        ("«result:status=failure message=timeout»", ResultEmbed("failure", message="timeout")),
    ],
)
def test_canonical_forms(text: str, expected: ResultEmbed) -> None:
    """The forms the instructions teach parse to exactly their fields."""
    assert parse_result_embed(text) == expected


def test_whitespace_and_line_breaks_inside() -> None:
    """Models that wrap an embed over several lines or pad `=` are not sent back for a retry."""
    text = "Saved.\n«result:\n    artifact = report.json:v4\n\tstatus =\n success\n»\n"
    assert parse_result_embed(text) == ResultEmbed("success", "report.json", 4)


@pytest.mark.parametrize("quote", ['"', "'", "`"])
def test_quoted_values(quote: str) -> None:
    """Any ASCII quote style around values is accepted, including around a versioned artifact."""
    text = f"«result:artifact={quote}out.json:7{quote} status={quote}success{quote}»"
    assert parse_result_embed(text) == ResultEmbed("success", "out.json", 7)


def test_typographic_quotes() -> None:
    """Curly quotes that chat models like to produce are read as quotes."""
    text = "«result:status=failure message=“no such customer”»"
    assert parse_result_embed(text) == ResultEmbed("failure", message="no such customer")


def test_escaped_quote_and_closing_mark_inside_message() -> None:
    """A quoted message may contain its own (escaped) quote and a » without ending the embed."""
    text = r'«result:status=failure message="field \"id\" » missing, see C:\tmp"»'
    assert parse_result_embed(text).message == 'field "id" » missing, see C:\\tmp'


@pytest.mark.parametrize(
    "text",
    [
        "`«result:artifact=a.json status=success»`",
        "**«result:artifact=a.json status=success»**",
        "_«result:artifact=a.json status=success»_",
        "```\n«result:artifact=a.json status=success»\n```",
        "> «result:artifact=a.json status=success»",
        "«result:artifact=a.json status=**success**»",
    ],
)
def test_markdown_around(text: str) -> None:
    """Markdown emphasis or code formatting around the embed does not hide it."""
    assert parse_result_embed(text) == ResultEmbed("success", "a.json")


def test_key_order_commas_and_case() -> None:
    """Status before artifact, commas between pairs and upper-case keys/values still parse."""
    text = "«Result: Status=SUCCESS, Artifact=a.json:1,»"
    assert parse_result_embed(text) == ResultEmbed("success", "a.json", 1)


def test_unknown_keys_are_ignored() -> None:
    """An extra key a model adds (a reason, a note) does not turn a good answer into a retry."""
    text = "«result:artifact=a.json status=success note='all rows kept'»"
    assert parse_result_embed(text) == ResultEmbed("success", "a.json")


@pytest.mark.parametrize("status", ["failure", "failed", "error", "partial", "succeeded", "ok", "success?"])
def test_anything_but_success_is_failure(status: str) -> None:
    """A status that is not `success` never counts as success, even one that sounds like it."""
    embed = parse_result_embed(f"«result:artifact=a.json status={status}»")
    assert embed.status == "failure"
    assert not embed.ok
    assert embed.artifact == "a.json"


def test_last_embed_wins() -> None:
    """An embed quoted earlier (e.g. repeating the instructions) is overridden by the final one."""
    text = (
        "I will finish with «result:artifact=draft.json status=success».\n"
        "Actually the data was bad.\n"
        '«result:status=failure message="bad data"»'
    )
    assert parse_result_embed(text) == ResultEmbed("failure", message="bad data")


# --- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["", "I saved the file as out.json.", "Il a dit «bonjour» puis «au revoir».", "result:artifact=a status=success"],
)
def test_missing(text: str) -> None:
    """An answer without an embed is reported as missing, with the canonical forms to copy."""
    with pytest.raises(EmbedError) as info:
        parse_result_embed(text)
    assert info.value.kind is EmbedErrorKind.MISSING
    assert info.value.embed is None
    assert "«result:artifact=NAME status=success»" in str(info.value)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("«result:artifact=a.json status=success", "not closed"),
        ("«result artifact=a.json status=success»", "expected ':'"),
        ("«result:artifact a.json status=success»", "expected '=' after key 'artifact'"),
        ("«result:artifact=a.json»", "no status"),
        ("«result:artifact=a.json status=success status=failure»", "'status' appears twice"),
        ("«result:status=failure message='never closed»", "never closed"),
        ("«result:artifact=a.json:latest status=success»", "'latest'"),
        ("«result:artifact=a.json:-1 status=success»", "'-1'"),
        ("«result:artifact=:3 status=success»", "no name"),
        ("«result:artifact=artifact://ns/c/t/a.json?version=1 status=success»", "URI"),
        ("«result:=a.json status=success»", "expected a key=value pair"),
        ("«result:artifact= »", "has no value"),
    ],
)
def test_malformed(text: str, fragment: str) -> None:
    """Unreadable embeds are `malformed` with a message precise enough to quote back to the model."""
    with pytest.raises(EmbedError) as info:
        parse_result_embed(text)
    assert info.value.kind is EmbedErrorKind.MALFORMED
    assert fragment in str(info.value)
    assert info.value.embed is not None
    assert info.value.embed.startswith("«result")


def test_malformed_last_embed_is_not_rescued_by_an_earlier_one() -> None:
    """The last embed is authoritative: a broken final embed fails even after a good one."""
    text = "«result:artifact=a.json status=success» … «result:artifact=b.json»"
    with pytest.raises(EmbedError) as info:
        parse_result_embed(text)
    assert info.value.kind is EmbedErrorKind.MALFORMED
    assert "b.json" in str(info.value)


@pytest.mark.parametrize(
    "text",
    ["«result:status=success»", "«result:status=success message='done'»", "«result:artifact='  ' status=success»"],
)
def test_success_without_artifact(text: str) -> None:
    """Success that names no artifact is its own error kind, not a silent success without output."""
    with pytest.raises(EmbedError) as info:
        parse_result_embed(text)
    assert info.value.kind is EmbedErrorKind.MISSING_ARTIFACT
    assert "artifact=NAME" in str(info.value)


def test_failure_without_artifact_is_fine() -> None:
    """A failure needs no artifact (and no message)."""
    assert parse_result_embed("«result:status=failure»") == ResultEmbed("failure")


@pytest.mark.parametrize(
    "artifact",
    ["<name>", "NAME", "NAME:VERSION", "<artifact_name>.json", "{name}", "[name]", "out.json:N", "out.json:vN", "..."],
)
def test_placeholder(artifact: str) -> None:
    """A placeholder copied from the instructions is reported as such, not as a missing artifact."""
    with pytest.raises(EmbedError) as info:
        parse_result_embed(f"«result:artifact={artifact} status=success»")
    assert info.value.kind is EmbedErrorKind.PLACEHOLDER
    assert "placeholder" in str(info.value)


def test_error_is_a_value_error_with_one_line_str() -> None:
    """Callers can catch EmbedError as ValueError, and its str stays one line for logs and prompts."""
    with pytest.raises(ValueError, match="not closed"):
        parse_result_embed("«result:\nartifact=a.json\nstatus=success")
    with pytest.raises(EmbedError) as info:
        parse_result_embed("«result:\nartifact=a.json\nstatus=success")
    assert "\n" not in str(info.value)


def test_long_embed_is_shortened_in_the_message() -> None:
    """A runaway embed (e.g. an unclosed quote swallowing the answer) does not flood the error message."""
    with pytest.raises(EmbedError) as info:
        parse_result_embed("«result:status=failure message='" + "x" * 5000)
    assert len(str(info.value)) < 400


# --- formatting ---------------------------------------------------------------------------------


def test_format_canonical() -> None:
    """The prompts teach exactly the canonical forms of SPEC §4."""
    assert format_success_embed("out.json") == "«result:artifact=out.json status=success»"
    assert format_success_embed("out.json", 2) == "«result:artifact=out.json:2 status=success»"
    assert format_failure_embed("why") == '«result:status=failure message="why"»'


@pytest.mark.parametrize("name", ["", "a b", "a:b", "«a»", 'a"b'])
def test_format_rejects_unwritable_names(name: str) -> None:
    """A name that could not be parsed back is refused when the embed is written."""
    with pytest.raises(ValueError, match="cannot be written"):
        format_success_embed(name)


def test_format_rejects_negative_version() -> None:
    """Versions start at 0."""
    with pytest.raises(ValueError, match=">= 0"):
        format_success_embed("a", -1)


def test_format_failure_escapes() -> None:
    """Quotes, backslashes and «» in a failure message survive the round trip without breaking the embed."""
    message = 'bad "id" at C:\\x\\ « here » and\nthere'
    parsed = parse_result_embed("answer " + format_failure_embed(message))
    assert parsed.message == message.replace("«", "<<").replace("»", ">>")


def test_strip_result_embeds() -> None:
    """The text shown to a user loses every embed but keeps the rest, and leaves broken embeds visible."""
    text = "Here. «result:artifact=a status=success» More «result:status=failure» end «result:oops"
    assert strip_result_embeds(text) == "Here.  More  end «result:oops"


# --- properties ---------------------------------------------------------------------------------

NAMES = st.from_regex(r"[A-Za-z0-9_.-]+", fullmatch=True).filter(lambda n: n not in PLACEHOLDER_NAMES)
NO_OPEN = st.text(st.characters(exclude_characters="«"), max_size=40)
SPACE = st.text(alphabet=" \t\n\r", max_size=3)
GAP = st.text(alphabet=" \t\n\r", min_size=1, max_size=3)
QUOTES = st.sampled_from([("", ""), ('"', '"'), ("'", "'"), ("`", "`"), ("“", "”")])
MESSAGE_QUOTES = st.sampled_from([('"', '"'), ("'", "'"), ("`", "`"), ("“", "”")])
MESSAGES = st.text(st.characters(exclude_characters="«»", exclude_categories=["Cs"]), max_size=40)
FAILURE_WORDS = st.from_regex(r"[A-Za-z]{1,12}", fullmatch=True).filter(lambda w: w.lower() != "success")


@dataclass(frozen=True)
class Generated:
    """An embed written in one of the tolerated styles, and what it must parse to."""

    text: str
    expected: ResultEmbed


def _quote(value: str, quotes: tuple[str, str]) -> str:
    opening, closing = quotes
    if not opening:
        return value
    return opening + value.replace("\\", "\\\\").replace(closing, "\\" + closing) + closing


@st.composite
def embeds(draw: st.DrawFn) -> Generated:
    """Any valid embed: random spacing, quoting, key order, version style, markdown around it."""
    success = draw(st.booleans())
    name = draw(NAMES) if success else draw(st.none() | NAMES)
    version = draw(st.none() | st.integers(min_value=0, max_value=10**6)) if name is not None else None
    message = None if success else draw(st.none() | MESSAGES)
    pairs: list[tuple[str, str]] = []
    if name is not None:
        v_style = draw(st.sampled_from(["", "v", "V"]))
        artifact = name if version is None else f"{name}:{v_style}{version}"
        pairs.append(("artifact", _quote(artifact, draw(QUOTES))))
    status = draw(st.sampled_from(["success", "SUCCESS", "Success"])) if success else draw(FAILURE_WORDS)
    pairs.append(("status", _quote(status, draw(QUOTES))))
    if message is not None:
        pairs.append(("message", _quote(message, draw(MESSAGE_QUOTES))))
    pairs = draw(st.permutations(pairs))
    chunks = [
        draw(SPACE if i == 0 else GAP) + key + draw(SPACE) + "=" + draw(SPACE) + value
        for i, (key, value) in enumerate(pairs)
    ]
    body = "".join(chunks) + draw(SPACE)
    markdown = draw(st.sampled_from(["", "`", "**", "_"]))
    text = f"{markdown}«{draw(SPACE)}result{draw(SPACE)}:{body}»{markdown}"
    expected = ResultEmbed(
        status="success" if success else "failure",
        artifact=name,
        version=version,
        message=message.strip() if message is not None else None,
    )
    return Generated(text, expected)


@given(before=NO_OPEN, generated=embeds(), after=NO_OPEN)
def test_property_parser_recovers_generated_fields(before: str, generated: Generated, after: str) -> None:
    """Whatever tolerated style an embed is written in, the parser recovers exactly its fields."""
    assert parse_result_embed(before + generated.text + after) == generated.expected


@given(parts=st.lists(st.tuples(NO_OPEN, embeds()), min_size=2, max_size=4), tail=NO_OPEN)
def test_property_last_embed_wins(parts: list[tuple[str, Generated]], tail: str) -> None:
    """With several embeds in one answer, the last one is the result."""
    text = "".join(prose + generated.text for prose, generated in parts) + tail
    assert parse_result_embed(text) == parts[-1][1].expected


@given(text=st.text(st.characters(exclude_characters="«")))
def test_property_text_without_open_mark_is_missing(text: str) -> None:
    """Text with no « never parses as an embed, whatever else it holds."""
    with pytest.raises(EmbedError) as info:
        parse_result_embed(text)
    assert info.value.kind is EmbedErrorKind.MISSING


@given(name=NAMES, version=st.none() | st.integers(min_value=0, max_value=10**9), before=NO_OPEN)
def test_property_format_success_round_trips(name: str, version: int | None, before: str) -> None:
    """Every success embed the prompts produce parses back to its name and version."""
    assert parse_result_embed(before + format_success_embed(name, version)) == ResultEmbed("success", name, version)


@given(message=st.text(st.characters(exclude_categories=["Cs"])))
def test_property_format_failure_round_trips(message: str) -> None:
    """Every failure embed the handler writes parses back to its message (with «» spelled << >>)."""
    parsed = parse_result_embed(format_failure_embed(message))
    assert parsed == ResultEmbed("failure", message=message.replace("«", "<<").replace("»", ">>").strip())


@given(before=NO_OPEN, generated=embeds(), after=NO_OPEN)
def test_property_strip_removes_exactly_the_embed(before: str, generated: Generated, after: str) -> None:
    """Stripping embeds keeps the surrounding prose intact."""
    markdown_free = generated.text.strip("`*_")
    assert strip_result_embeds(before + markdown_free + after) == (before + after).strip()
