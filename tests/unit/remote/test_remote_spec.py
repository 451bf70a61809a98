"""Remote agent declarations, card checks, the outcome of a remote's final, and ``up``'s plan for remote files."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from a2amesh.config import Settings
from a2amesh.errors import ConfigError, RemoteError
from a2amesh.mesh import Mesh
from a2amesh.protocol import Message, Part, Role, TaskState, TaskStatus
from a2amesh.remote.cards import card_url, check_card, mesh_name
from a2amesh.remote.http import StaticHeader
from a2amesh.remote.runtime import outcome_of
from a2amesh.remote.spec import RemoteSpec, is_remote_file, load_remote_file, parse_remote


def spec(**fields: object) -> RemoteSpec:
    return parse_remote({"remote": {"url": "https://agents.example/a", **fields}}, "r.yaml")


def test_declaration_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"r.yaml: remote.retires: unknown field \(did you mean 'retries'\?\)"):
        spec(retires=2)
    with pytest.raises(ConfigError, match=r"remote.url: 'ftp://x' is not an http:// or https:// URL"):
        parse_remote({"remote": {"url": "ftp://x"}}, "r.yaml")
    with pytest.raises(ConfigError, match="exactly one of env"):
        spec(auth={"type": "bearer", "token": {"env": "A", "file": "/b"}})
    with pytest.raises(ConfigError, match=r"remote.name: 'a b' must match"):
        spec(name="a b")
    with pytest.raises(ConfigError, match="unknown field"):
        parse_remote({"remote": {"url": "http://x"}, "handler": "m:f"}, "r.yaml")


def test_defaults_are_safe() -> None:
    s = spec()
    assert s.verify_tls is True
    assert s.retries == 3
    assert s.auth is None
    assert s.max_concurrency == 16


def test_secret_is_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKEN_X", "hunter2")
    s = spec(auth={"type": "bearer", "token": {"env": "TOKEN_X"}})
    assert s.auth is not None
    value = s.auth.token.read("r.yaml", "remote.auth.token")  # type: ignore[union-attr]
    assert "hunter2" not in repr(value)
    assert "hunter2" not in repr(StaticHeader("Authorization", value, prefix="Bearer "))


def test_card_urls() -> None:
    assert card_url("https://h/a") == ["https://h/a/.well-known/agent-card.json", "https://h/a/.well-known/agent.json"]
    assert card_url("https://h/cards/x.json?v=1") == ["https://h/cards/x.json?v=1"]


def test_card_checks_and_names() -> None:
    good = {"name": "Weather Bot v2", "supportedInterfaces": [{"url": "https://h/rpc", "protocolBinding": "JSONRPC"}]}
    remote = check_card(good, spec())
    assert (remote.binding, remote.url) == ("JSONRPC", "https://h/rpc")
    assert mesh_name(spec(), remote) == "Weather-Bot-v2"
    assert mesh_name(spec(name="wx"), remote) == "wx"
    with pytest.raises(RemoteError, match="offers no HTTP\\+JSON interface"):
        check_card(good, spec(transport="HTTP+JSON"))
    with pytest.raises(RemoteError, match="is not HTTP"):
        check_card({"name": "x", "supportedInterfaces": [{"url": "nats://x", "protocolBinding": "JSONRPC"}]}, spec())
    with pytest.raises(RemoteError, match="not an A2A agent card"):
        check_card([1, 2], spec())
    legacy = check_card({"name": "old", "url": "http://h/rpc", "protocolVersion": "0.3.0"}, spec())
    assert (legacy.binding, legacy.version) == ("JSONRPC", "0.3.0")


def _status(state: TaskState, *parts: Part) -> TaskStatus:
    message = Message(message_id="m", role=Role.AGENT, parts=list(parts)) if parts else None
    return TaskStatus(state=state, message=message)


def test_outcome_of_a_remote_final() -> None:
    assert outcome_of(TaskState.COMPLETED, [Part.of_data({"a": 1})], _status(TaskState.COMPLETED)).output == {"a": 1}
    chunks = [Part.of_text("hel"), Part.of_text("lo")]
    assert outcome_of(TaskState.COMPLETED, chunks, None).output == "hello"
    mixed = outcome_of(TaskState.COMPLETED, [Part.of_text("t"), Part.of_data([1])], None)
    assert mixed.output == ["t", [1]]
    file = Part(url="https://h/f.pdf", media_type="application/pdf")
    assert outcome_of(TaskState.COMPLETED, [file], None).output is file
    in_status = outcome_of(TaskState.COMPLETED, [], _status(TaskState.COMPLETED, Part.of_text("only here")))
    assert in_status.output == "only here"
    asked = outcome_of(
        TaskState.INPUT_REQUIRED, [], _status(TaskState.INPUT_REQUIRED, Part.of_text("name?"), Part.of_data({"f": 1}))
    )
    assert (asked.state, asked.message, asked.output) == (TaskState.INPUT_REQUIRED, "name?", {"f": 1})
    failed = outcome_of(TaskState.FAILED, [], _status(TaskState.FAILED, Part.of_text("it broke")))
    assert (failed.state, failed.message, failed.output) == (TaskState.FAILED, "it broke", None)


def test_up_starts_a_proxy_per_remote_replica(tmp_path: Path) -> None:
    (tmp_path / "echo.yaml").write_text(yaml.safe_dump({"name": "echo", "handler": "m:f"}))
    (tmp_path / "wx.yaml").write_text(yaml.safe_dump({"remote": {"url": "http://h", "name": "wx", "replicas": 2}}))
    assert is_remote_file(tmp_path / "wx.yaml")
    assert not is_remote_file(tmp_path / "echo.yaml")
    assert load_remote_file(tmp_path / "wx.yaml").replicas == 2
    mesh = Mesh(Settings.load(environ={}), agents_dir=tmp_path, state_dir=tmp_path / "state")
    mesh._load_agent_files()
    mesh._agent_children()
    assert [c.label for c in mesh.children] == ["echo#1", "remote:wx#1", "remote:wx#2"]
    assert mesh.children[1].argv[-3:] == ["remote", "serve", str(tmp_path / "wx.yaml")]


def test_tls_is_verified_unless_told_and_a_bad_ca_file_is_named(tmp_path: Path) -> None:
    from a2amesh.remote.http import make_http_client

    with pytest.raises(ConfigError, match=r"remote.ca_file: cannot load .*missing.pem"):
        make_http_client(spec(ca_file=str(tmp_path / "missing.pem")), source="r.yaml")
    assert spec().verify_tls is True
    assert spec(verify_tls=False).verify_tls is False


def test_deploy_counts_a_named_remote_as_an_agent(tmp_path: Path) -> None:
    from a2amesh.agent.definition import load_agent_file
    from a2amesh.cli.deploy import _agent_names
    from a2amesh.errors import UsageError

    (tmp_path / "echo.yaml").write_text(yaml.safe_dump({"name": "echo", "handler": "m:f"}))
    (tmp_path / "wx.yaml").write_text(yaml.safe_dump({"remote": {"url": "http://h", "name": "wx"}}))
    assert _agent_names(tmp_path, load_agent_file) == ["echo", "wx"]
    (tmp_path / "anon.yaml").write_text(yaml.safe_dump({"remote": {"url": "http://h"}}))
    with pytest.raises(UsageError, match="anon.yaml: give the remote agent a name:"):
        _agent_names(tmp_path, load_agent_file)
