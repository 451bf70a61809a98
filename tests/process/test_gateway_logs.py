"""The gateway's log as an operator reads it: the a2a-sdk's and uvicorn's lines rendered like ours, and a client's
malformed request one WARNING line with the reason, not a protobuf traceback at ERROR (issue 37)."""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx

from a2amesh.client import Client
from tests.support.processes import ProcessFactory
from tests.support.waiting import eventually


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_bad_client_request_is_one_warning_line_in_our_format(
    processes: ProcessFactory, client: Client, agent_host: Any
) -> None:
    """A live agent (in this process) behind a gateway process; a request whose params protobuf refuses."""

    async def echo(data: Any, ctx: Any) -> Any:
        return data

    await agent_host("log_echo", echo)
    await client.registry.wait_for("log_echo", 10)
    port = _free_port()
    proc = await processes.start("gateway", "--port", str(port))
    url = f"http://127.0.0.1:{port}"

    async def up() -> bool:
        try:
            async with httpx.AsyncClient() as http:
                return (await http.get(f"{url}/healthz")).status_code < 500
        except httpx.HTTPError:
            return False

    await eventually(up, timeout=30, what="the gateway to listen")
    bad = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"parts": "not a list"}}}
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        r = await http.post("/agents/log_echo/", json=bad, headers={"A2A-Version": "1.0"})
    assert r.status_code == 200, r.text
    assert r.json()["error"]["code"] == -32602, r.text

    def warned() -> list[dict[str, object]] | None:
        lines = [json.loads(line) for line in proc.output().splitlines() if line.startswith("{")]
        found = [e for e in lines if "Failed to parse request params" in str(e.get("event", ""))]
        return lines if found else None

    lines = await eventually(warned, timeout=10, what="the gateway's line about the bad request")
    output = proc.output()
    assert "Traceback" not in output, output
    assert all(line.startswith("{") for line in output.splitlines() if line.strip()), output
    (line,) = [e for e in lines if "Failed to parse request params" in str(e.get("event", ""))]
    assert line["level"] == "warning", line
    assert line["logger"] == "a2a.server.routes.jsonrpc_dispatcher", line
    assert "parts" in str(line["event"]), line
    assert str(line["timestamp"]).endswith("Z")
    assert not any(e.get("level") == "error" for e in lines), lines
