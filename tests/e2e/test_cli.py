"""The a2amesh command line, run as a user would: real processes, real servers."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path

import httpx

from a2amesh.config import Settings
from tests.support.cli import mesh_cli, run_cli
from tests.support.processes import REPO, ProcessFactory, write_agent
from tests.support.waiting import eventually


async def cli(settings: Settings | None, *args: str, cwd: Path = REPO, timeout: float = 60) -> tuple[int, str, str]:
    if settings:
        return await mesh_cli(settings, *args, cwd=cwd, timeout=timeout)
    base = {k: v for k, v in os.environ.items() if not k.startswith("NATS_")}
    return await run_cli(*args, base_env=base, cwd=cwd, timeout=timeout)


async def test_invalid_agent_yaml_is_one_line_and_exit_2(settings: Settings, tmp_path: Path) -> None:
    """`a2amesh agent` with an invalid YAML prints one line naming file, field and problem, and exits 2."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: ok\nhandler: m:f\nmax_concurency: 3\n")
    code, out, err = await cli(settings, "agent", str(bad))
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert str(bad) in lines[0]
    assert "max_concurency" in lines[0]
    assert "did you mean 'max_concurrency'" in lines[0]
    assert "Traceback" not in err


async def test_call_agents_and_errors(settings: Settings, processes: ProcessFactory, tmp_path: Path) -> None:
    """`agents --json` lists a live agent; `call` streams and prints the result; bad input exits non-zero."""
    path = write_agent(tmp_path, "cli_echo", "count")
    proc = await processes.start("agent", str(path))
    await eventually(
        lambda: asyncio.sleep(0, result=proc.returncode is None and "agent.ready" in proc.output()),
        timeout=20,
        what="the agent to be ready",
    )
    code, out, _ = await cli(settings, "agents", "--json")
    assert code == 0
    assert [c["name"] for c in json.loads(out)] == ["cli_echo"]

    code, out, err = await cli(settings, "call", "cli_echo", "--data", '{"sleep": 0}', "--json")
    assert code == 0, err
    task = json.loads(out)
    assert (task["agent"], task["status"], task["error"]) == ("cli_echo", "completed", None)
    assert task["output"]["n"] == 1

    code, out, err = await cli(settings, "call", "cli_echo", "--data", '{"sleep": 0}')
    assert code == 0
    assert "← completed" in err
    assert json.loads(out)["n"] == 1

    code, _, err = await cli(settings, "call", "nobody", "hi")
    assert code == 1
    assert "AGENT_NOT_FOUND" in err
    assert "Traceback" not in err
    code, _, err = await cli(settings, "call", "cli_echo", "--data", "{oops")
    assert code == 2
    assert "--data: not valid JSON" in err


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


async def test_up_runs_until_ctrl_c_and_leaves_nothing(tmp_path: Path) -> None:
    """`a2amesh up` starts servers and agents, answers calls, and Ctrl-C stops all of it, freeing the ports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "REDIS_", "A2AMESH_"))}
    env["A2AMESH_PROFILE"] = "test"
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "echo.yaml").write_text((REPO / "agent_cards" / "echo.yaml").read_text())
    (agents / "example_agents.py").write_text((REPO / "agent_cards" / "example_agents.py").read_text())
    up = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "a2amesh",
        "up",
        "--agents",
        str(agents),
        "--workflows",
        str(tmp_path / "none"),
        "--http-port",
        "0",
        cwd=str(tmp_path),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        assert up.stdout is not None
        lines: list[str] = []

        async def ready() -> bool:
            line = await asyncio.wait_for(up.stdout.readline(), 30)  # type: ignore[union-attr]
            lines.append(line.decode())
            assert line, "a2amesh up exited early:\n" + "".join(lines)
            return "a2amesh is up" in lines[-1]

        await eventually(ready, timeout=30, what="a2amesh up to be ready", interval=0)
        gateway_line = (await asyncio.wait_for(up.stdout.readline(), 10)).decode()
        assert gateway_line.startswith("HTTP gateway: http://127.0.0.1:"), gateway_line
        agents_url = gateway_line.split()[2]
        async with httpx.AsyncClient(timeout=10) as http:
            listed = (await http.get(agents_url)).json()["agents"]
        names = [a["name"] for a in listed]
        assert [n for n in names if not n.startswith("builtin-")] == ["echo"]
        assert {"builtin-llm", "builtin-tool-loop", "builtin-memory"} <= set(names)  # `up` starts the builtins
        gateway_port = int(agents_url.rsplit(":", 1)[1].split("/")[0])
        nats_port = int((tmp_path / ".a2amesh" / "nats.port").read_text())
        valkey_port = int((tmp_path / ".a2amesh" / "valkey.port").read_text())
        code, out, err = await cli(None, "call", "echo", "hello", cwd=tmp_path)
        assert code == 0, err
        assert json.loads(out) == {"text": "hello"}
        up.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(up.wait(), 30) == 0
    finally:
        if up.returncode is None:
            os.killpg(up.pid, signal.SIGKILL)
            await up.wait()
    assert port_free(nats_port)
    assert port_free(valkey_port)
    assert port_free(gateway_port)
    ps = await asyncio.create_subprocess_exec("pgrep", "-f", str(agents), stdout=asyncio.subprocess.PIPE)
    leftover, _ = await ps.communicate()
    assert leftover.strip() == b"", f"orphan processes: {leftover!r}"


async def test_demo_command_runs_end_to_end(tmp_path: Path) -> None:
    """The README's main command (`a2amesh demo`) completes on the embedded servers and exits 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "REDIS_", "A2AMESH_"))}
    code, text, err = await run_cli("demo", base_env=env, timeout=120)
    assert code == 0, text + err
    assert "order_validator" in text
    assert "through the HTTP gateway at http://127.0.0.1:" in text
    assert "/agents/echo/" in text
    assert "ms, completed)" in text, text
    assert "TASK_STATE_" not in text, "the demo's lines are for people: task states in words"
    assert "mesh stopped" in text
    assert "Traceback" not in err


async def test_gateway_refuses_a_busy_port_and_an_open_bind_without_keys(settings: Settings) -> None:
    """`a2amesh gateway` on a busy port, or on 0.0.0.0 without API keys, is one line naming why, exit 2."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        code, _, err = await cli(settings, "gateway", "--port", str(port))
    assert code == 2, err
    assert f"127.0.0.1:{port} is already in use" in err
    assert "Traceback" not in err
    code, _, err = await cli(settings, "gateway", "--host", "0.0.0.0", "--port", "0")
    assert code == 2, err
    assert "refusing to serve '0.0.0.0' without auth" in err
