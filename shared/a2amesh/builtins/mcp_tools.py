"""Tools of external MCP servers, offered to a model by the built-in agents (``mcp_servers`` of a node).

A server is reached by URL (streamable HTTP) or by command (stdio) with the official ``mcp`` client. Every
tool call opens its own connection (a stdio server is started for the call and stopped after it), so no
session outlives a call and a server that restarts needs nothing from us. Tool lists are cached per process
for :data:`LIST_TTL` seconds (at most :data:`LIST_CACHE` servers), which also lets a node whose server went
down offer the tools it had and feed the failure of each call back to the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from a2amesh.agent.context import TaskContext
from a2amesh.agent.tools import Tool
from a2amesh.errors import ToolError
from a2amesh.workflow.dag.agent_nodes import McpServerRef

__all__ = ["CALL_TIMEOUT", "LIST_CACHE", "LIST_TIMEOUT", "LIST_TTL", "McpServerDown", "McpTools", "tool_name"]

LIST_TIMEOUT = 15.0
"""Seconds to connect to a server and list its tools."""
CALL_TIMEOUT = 120.0
"""Seconds one tool call may take (connection included)."""
LIST_TTL = 60.0
"""Seconds a server's tool list is kept before it is listed again."""
LIST_CACHE = 64
"""Servers whose tool lists one process keeps."""

SEPARATOR = "__"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class McpServerDown(Exception):
    """A server could not be reached or did not answer (the message names it and says why)."""


def tool_name(server: str, tool: str) -> str:
    """The name the model calls a server's tool by: ``{server}__{tool}``, characters outside [A-Za-z0-9_-] as
    ``_``, cut to 64 characters."""
    return (server + SEPARATOR + _UNSAFE.sub("_", tool))[:64]


def _expand(values: dict[str, str] | None) -> dict[str, str]:
    """``${VAR}`` in each value from this process's environment (unset: empty), so secrets stay out of definitions."""
    return {k: _VAR.sub(lambda m: os.environ.get(m.group(1), ""), v) for k, v in (values or {}).items()}


def _where(server: McpServerRef) -> str:
    if server.url is not None:
        return server.url
    assert server.command is not None
    return " ".join(server.command)


def _cause(error: BaseException) -> str:
    """The innermost useful message of an error (task groups wrap the transport's errors)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    if isinstance(error, TimeoutError):
        return "no answer in time"
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


@contextlib.asynccontextmanager
async def _connect(server: McpServerRef) -> AsyncIterator[Client]:
    if server.url is not None:
        headers = _expand(server.headers)
        timeout = httpx2.Timeout(30, read=CALL_TIMEOUT)
        async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
            async with Client(streamable_http_client(server.url, http_client=http)) as client:
                yield client
    else:
        assert server.command is not None
        params = StdioServerParameters(command=server.command[0], args=server.command[1:], env=_expand(server.env))
        async with Client(params) as client:
            yield client


@dataclass(frozen=True)
class _Listed:
    at: float
    tools: tuple[types.Tool, ...]


class McpTools:
    """The tools of MCP servers as model tools; one per process (it caches tool lists, bounded)."""

    def __init__(self) -> None:
        self._lists: OrderedDict[str, _Listed] = OrderedDict()

    async def tools(self, server: McpServerRef) -> list[Tool]:
        """The server's tools, named ``{server}__{tool}``, with their input schemas.

        Raises:
            McpServerDown: the server cannot be reached, fails to list its tools, or two of its tools get one name.
        """
        listed = await self._list(server)
        out: dict[str, Tool] = {}
        for tool in listed:
            name = tool_name(server.name, tool.name)
            if name in out:
                raise McpServerDown(f"MCP server {server.name!r}: two of its tools are both offered as {name!r}")
            out[name] = Tool(
                name=name,
                description=tool.description or tool.title or f"{tool.name} of the MCP server {server.name}",
                parameters=_parameters(tool.input_schema),
                handler=self._handler(server, tool.name),
            )
        return list(out.values())

    async def _list(self, server: McpServerRef) -> tuple[types.Tool, ...]:
        key = server.model_dump_json()
        cached = self._lists.get(key)
        if cached is not None and time.monotonic() - cached.at < LIST_TTL:
            self._lists.move_to_end(key)
            return cached.tools
        try:
            async with asyncio.timeout(LIST_TIMEOUT), _connect(server) as client:
                tools: list[types.Tool] = []
                cursor: str | None = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if cached is not None:  # a server that went down keeps its last list: each call then reports it
                return cached.tools
            where = f"MCP server {server.name!r} ({_where(server)})"
            raise McpServerDown(f"{where} cannot list its tools: {_cause(e)}") from e
        self._lists[key] = _Listed(time.monotonic(), tuple(tools))
        self._lists.move_to_end(key)
        while len(self._lists) > LIST_CACHE:
            self._lists.popitem(last=False)
        return tuple(tools)

    def _handler(self, server: McpServerRef, tool: str) -> Any:
        async def call(arguments: dict[str, Any], ctx: TaskContext) -> Any:
            try:
                async with asyncio.timeout(CALL_TIMEOUT), _connect(server) as client:
                    result = await client.call_tool(tool, arguments)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                raise ToolError(
                    f"the MCP server {server.name!r} ({_where(server)}) could not run {tool}: {_cause(e)}"
                ) from e
            return _result(server.name, tool, result)

        return call


def _parameters(schema: dict[str, Any] | None) -> dict[str, Any]:
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return {"type": "object", "properties": {}}
    return {k: v for k, v in schema.items() if k not in ("$schema", "title")}


def _result(server: str, tool: str, result: types.CallToolResult) -> Any:
    """What the model reads: the structured content, else the texts (other content described)."""
    texts = [_content_text(c) for c in result.content]
    if result.is_error:
        raise ToolError(f"{tool} of the MCP server {server!r} failed: {' '.join(texts) or 'no message'}")
    if result.structured_content is not None:
        return result.structured_content
    if len(texts) == 1:
        return texts[0]
    return "\n".join(texts)


def _content_text(content: Any) -> str:
    if isinstance(content, types.TextContent):
        return content.text
    if getattr(content, "type", None) == "resource":
        return json.dumps(content.model_dump(mode="json", exclude_none=True))[:2000]
    kind = getattr(content, "type", type(content).__name__)
    mime = getattr(content, "mime_type", None)
    return f"[{kind} content{', ' + mime if mime else ''}]"
