"""Pure parts of the MCP server: cards → tools, review forms, settings, the gateway's Host/Origin checks."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.server.transport_security import TransportSecurityMiddleware
from starlette.requests import Request

from a2amesh.agent.definition import AgentDefinition
from a2amesh.errors import ConfigError
from a2amesh.gateway.mcp_mount import transport_security
from a2amesh.gateway.settings import GatewaySettings
from a2amesh.mcp_server.catalog import Catalog, InputMode, tools_of
from a2amesh.mcp_server.review import AnswerError, ReviewForm
from a2amesh.mcp_server.settings import McpSettings


def card(name: str = "a", **definition: Any) -> Any:
    return AgentDefinition(name=name, handler="m:f", **definition).card("ns")


def test_object_schemas_are_used_as_they_are() -> None:
    """An object input and output schema become inputSchema and outputSchema unchanged."""
    schema = {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}
    out = {"type": "object", "properties": {"y": {"type": "string"}}}
    (tool,) = tools_of(card(input_schema=schema, output_schema=out, description="does a"), McpSettings())
    assert tool.tool.input_schema == schema
    assert tool.tool.output_schema == out
    assert tool.input_mode is InputMode.OBJECT
    assert tool.input_of({"x": 1}) == (None, {"x": 1})
    assert tool.structured({"y": "z"}) == {"y": "z"}


def test_other_schemas_are_wrapped_with_their_defs_lifted() -> None:
    """A non-object schema is wrapped in one property, its $defs at the root; no schema means text."""
    schema = {"type": "array", "items": {"$ref": "#/$defs/n"}, "$defs": {"n": {"type": "number"}}}
    (tool,) = tools_of(card(input_schema=schema, output_schema={"type": "string"}), McpSettings())
    assert tool.tool.input_schema == {
        "type": "object",
        "properties": {"input": {"type": "array", "items": {"$ref": "#/$defs/n"}, "description": "the input of a"}},
        "required": ["input"],
        "$defs": {"n": {"type": "number"}},
    }
    assert [str(i) for i in tool.check_arguments({"input": [1, "x"]})] == ["$.input[1]: 'x' is not of type 'number'"]
    assert tool.input_of({"input": [1]}) == (None, [1])
    assert tool.structured("hi") == {"result": "hi"}
    (text,) = tools_of(card("b"), McpSettings())
    assert text.input_mode is InputMode.TEXT
    assert text.tool.output_schema is None
    assert text.input_of({"text": "hello"}) == ("hello", None)


def test_filters_flags_and_skill_names() -> None:
    """Exclude wins over include, mcp_export=false hides a card, agent_skill names one tool per skill."""
    settings = McpSettings(include=["ord*", "pay"], exclude=["order_secret"])
    cards = [card("orders"), card("order_secret"), card("pay", mcp_export=False), card("other")]
    assert list(Catalog(cards, settings, reserved=frozenset()).tools) == ["orders"]
    skills = [{"id": "s1", "name": "One", "description": "first"}, {"id": "s2", "name": "Two"}]
    named = tools_of(card("multi", skills=skills), McpSettings(tool_names="agent_skill"))
    assert [t.name for t in named] == ["multi_s1", "multi_s2"]
    assert named[0].tool.description is not None
    assert "One: first" in named[0].tool.description
    assert list(Catalog([card("get_run")], McpSettings(), reserved=frozenset({"get_run"})).tools) == []


def test_settings_from_the_environment() -> None:
    """A2AMESH_MCP_* are read once; a bad value names the variable."""
    s = McpSettings.load({"A2AMESH_MCP_INCLUDE": "a*, b", "A2AMESH_MCP_ELICITATION": "off"})
    assert s.include == ["a*", "b"]
    assert s.elicitation is False
    with pytest.raises(ConfigError, match="A2AMESH_MCP_TOOL_NAMES: tool_names: value 'skills' is not valid"):
        McpSettings.load({"A2AMESH_MCP_TOOL_NAMES": "skills"})


REVIEW = {
    "type": "review_request",
    "path": "sub/review",
    "prompt": "Refund 30?",
    "data": {"amount": 30, "note": "x"},
    "edit_schema": {"type": "object", "properties": {"amount": {"type": "number", "maximum": 100}}},
}


def test_review_form_and_answers() -> None:
    """A flat edit_schema becomes form fields pre-filled from the data; answers become resume bodies."""
    form = ReviewForm(REVIEW)
    schema = form.schema()
    assert schema["required"] == ["decision"]
    assert schema["properties"]["amount"] == {"type": "number", "maximum": 100, "default": 30}
    assert form.message().startswith("Refund 30?")
    assert form.answer({"decision": "approve"}) == {"decision": "approve", "path": "sub/review"}
    edited = form.answer({"decision": "edit", "amount": 20, "reason": " cap "})
    assert edited == {"decision": "edit", "reason": "cap", "path": "sub/review", "data": {"amount": 20, "note": "x"}}
    with pytest.raises(AnswerError, match="decision: 'maybe' is not one of approve, edit, reject"):
        form.answer({"decision": "maybe"})
    nested = ReviewForm({**REVIEW, "edit_schema": {"type": "object", "properties": {"a": {"type": "object"}}}})
    assert "data" in nested.schema()["properties"]
    assert nested.answer({"decision": "edit", "data": '{"a": {}}'})["data"] == {"a": {}}
    with pytest.raises(AnswerError, match="data: not valid JSON"):
        nested.answer({"decision": "edit", "data": "{"})


def _request(host: str, origin: str | None = None) -> Request:
    headers = [(b"host", host.encode()), (b"content-type", b"application/json")]
    if origin:
        headers.append((b"origin", origin.encode()))
    return Request({"type": "http", "method": "POST", "path": "/mcp", "headers": headers})


@pytest.mark.parametrize(
    ("settings", "host", "origin", "status"),
    [
        (GatewaySettings(), "127.0.0.1:8080", None, None),
        (GatewaySettings(), "localhost:9", "http://localhost:3000", None),
        (GatewaySettings(), "evil.example", None, 421),
        (GatewaySettings(), "localhost:8080", "http://evil.example", 403),
        (GatewaySettings(public_url="https://mesh.example.com"), "mesh.example.com", "https://mesh.example.com", None),
        (GatewaySettings(public_url="http://mesh.internal:8443/"), "mesh.internal:8443", None, None),
        (GatewaySettings(public_url="http://mesh.internal:8443/"), "mesh.internal:9999", None, 421),
        (GatewaySettings(host="10.1.2.3", insecure=True), "10.1.2.3:8080", None, None),
        (GatewaySettings(host="0.0.0.0", insecure=True), "anything.example", None, None),
    ],
)
async def test_host_checks_follow_the_gateway_settings(
    settings: GatewaySettings, host: str, origin: str | None, status: int | None
) -> None:
    """The SDK's DNS-rebinding check admits the names the gateway is configured for, and only those."""
    answer = await TransportSecurityMiddleware(transport_security(settings)).validate_request(
        _request(host, origin), is_post=True
    )
    assert (answer.status_code if answer is not None else None) == status
