"""`a2amesh deploy init`: secrets made once and kept, one rotated by name, files 0600 in a 0700 folder, the demo
key without the admin scope, the Kubernetes Secrets valid, *_FILE variables read, and no secret printed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from a2amesh.config import Settings
from a2amesh.errors import ConfigError, UsageError
from a2amesh.gateway.settings import GatewaySettings, digest
from a2amesh.provision import API_KEYS, KUBERNETES, NATS_ACCOUNTS, VALKEY_ACL, DeployInit
from tests.support.cli import run_cli

AGENT_CARDS = Path(__file__).resolve().parents[2] / "agent_cards"


def init(folder: Path, *, rotate: tuple[str, ...] = (), kubernetes: bool = False, tls: bool = False) -> DeployInit:
    owner = (os.getuid(), os.getgid())
    return DeployInit(folder, "a2amesh", ["alpha", "beta"], list(rotate), tls=tls, kubernetes=kubernetes, owner=owner)


def contents(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in folder.iterdir() if p.is_file()}


def test_secrets_are_made_once_and_one_rotates_alone(tmp_path: Path) -> None:
    folder = tmp_path / "secrets"
    first = init(folder).run()
    assert "nats-alpha.password" in first.created
    assert {NATS_ACCOUNTS, VALKEY_ACL, API_KEYS} <= set(first.written)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    before = contents(folder)
    again = init(folder).run()
    assert (again.created, again.rotated, again.written) == ([], [], [])
    assert contents(folder) == before
    rotated = init(folder, rotate=("alpha",)).run()
    assert sorted(rotated.rotated) == ["nats-alpha.password", "redis-alpha.password"]
    after = contents(folder)
    changed = {name for name in after if after[name] != before[name]}
    assert changed == {"nats-alpha.password", "redis-alpha.password", NATS_ACCOUNTS, VALKEY_ACL}
    assert after["nats-alpha.password"].strip() in after[NATS_ACCOUNTS]
    assert before["nats-alpha.password"].strip() not in after[NATS_ACCOUNTS]
    with pytest.raises(UsageError, match="nothing to rotate named gamma"):
        init(folder, rotate=("gamma",)).run()
    with pytest.raises(UsageError, match="--rotate tls makes the CA anew: give --tls too"):
        init(folder, rotate=("tls",)).run()
    made = init(folder, tls=True).run()
    assert made.created == ["tls"]
    ca = (folder / "tls" / "ca.pem").read_text()
    assert init(folder, tls=True).run().kept[-1] == "tls"
    assert init(folder, rotate=("tls",), tls=True).run().rotated == ["tls"]
    assert (folder / "tls" / "ca.pem").read_text() != ca
    assert stat.S_IMODE((folder / "tls" / "ca-key.pem").stat().st_mode) == 0o600


def test_an_added_agent_gets_its_users_and_nobody_else_changes(tmp_path: Path) -> None:
    folder = tmp_path / "secrets"
    init(folder).run()
    before = contents(folder)
    report = DeployInit(folder, "a2amesh", ["alpha", "beta", "gamma"], owner=(os.getuid(), os.getgid())).run()
    assert sorted(report.created) == ["nats-gamma.password", "redis-gamma.password"]
    after = contents(folder)
    assert all(after[name] == text for name, text in before.items() if name.endswith((".password", ".key")))
    assert "user gamma on #" in after[VALKEY_ACL]
    assert "{user: gamma, password:" in after[NATS_ACCOUNTS]


def test_the_demo_key_cannot_administer(tmp_path: Path) -> None:
    folder = tmp_path / "secrets"
    init(folder).run()
    gateway = GatewaySettings.load(environ={"A2AMESH_API_KEYS_FILE": str(folder / API_KEYS)})
    keys = {k.key_id: k for k in gateway.api_keys}
    demo = (folder / "api-demo.key").read_text().strip()
    assert keys["demo"].digest.get_secret_value() == digest(demo)
    assert keys["demo"].has_scope("run")
    assert not keys["demo"].has_scope("admin")
    assert keys["admin"].has_scope("admin")
    assert demo not in (folder / API_KEYS).read_text()


def test_secret_files_are_read_and_never_shown(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret-value\n")
    settings = Settings.load(environ={"NATS_PASSWORD_FILE": str(secret), "REDIS_PASSWORD_FILE": str(secret)})
    assert settings.nats_password is not None
    assert settings.nats_password.get_secret_value() == "s3cret-value"
    assert settings.redis_password is not None
    assert settings.redis_password.get_secret_value() == "s3cret-value"
    direct = Settings.load(environ={"NATS_PASSWORD": "given", "NATS_PASSWORD_FILE": str(secret)})
    assert direct.nats_password is not None
    assert direct.nats_password.get_secret_value() == "given"
    with pytest.raises(ConfigError, match=r"NATS_PASSWORD_FILE: cannot read .*missing") as e:
        Settings.load(environ={"NATS_PASSWORD_FILE": str(tmp_path / "missing")})
    assert "s3cret" not in str(e.value)


def test_kubernetes_secrets_validate_and_name_each_process(tmp_path: Path) -> None:
    folder = tmp_path / "secrets"
    init(folder, kubernetes=True, tls=True).run()
    docs = list(yaml.safe_load_all((folder / KUBERNETES).read_text()))
    for doc in docs:
        kubernetes_validate.validate(doc, "1.33", strict=True)
    names = {d["metadata"]["name"]: d["stringData"] for d in docs}
    assert set(names) == {
        "a2amesh-admin",
        "a2amesh-executor",
        "a2amesh-gateway",
        "a2amesh-remotes",
        "a2amesh-llm-host",
        "a2amesh-alpha",
        "a2amesh-beta",
        "a2amesh-nats-server",
        "a2amesh-valkey-acl",
        "a2amesh-tls-ca",
    }
    assert names["a2amesh-alpha"]["nats-password"] == (folder / "nats-alpha.password").read_text().strip()
    assert "api-keys" in names["a2amesh-gateway"]
    assert "api-keys" not in names["a2amesh-executor"]
    assert "BEGIN CERTIFICATE" in names["a2amesh-tls-ca"]["ca.pem"]
    assert "PRIVATE KEY" not in names["a2amesh-tls-ca"]["ca.pem"]


async def test_the_cli_prints_what_it_did_and_no_secret(tmp_path: Path) -> None:
    folder = tmp_path / "secrets"
    args = ["deploy", "init", "--dir", str(folder), "--agents", str(AGENT_CARDS), "--owner", f"{os.getuid()}"]
    code, out, err = await run_cli(*args)
    assert code == 0, err
    assert "created: nats-admin.password" in out
    assert (
        "users admin, executor, gateway, remotes, llm-host, agent-uuid-2n, agent-uuid-dm2, agent-uuid-rc2, "
        "agent-uuid-router, echo, " in out
    )
    for path in folder.iterdir():
        if path.name.endswith((".password", ".key")):
            assert path.read_text().strip() not in out + err
    code, out, err = await run_cli(*args, "--rotate", "api-demo")
    assert code == 0, err
    assert "rotated: api-api-demo.key" not in out
    assert "rotated: api-demo.key" in out
    code, _, err = await run_cli(*args, "--rotate", "nobody")
    assert code == 2, err
    assert "nothing to rotate named nobody" in err
    assert "Traceback" not in err


def test_the_llm_host_serves_no_file_declared_agent_nor_listed_workflow() -> None:
    """Guards against the LLM host's ``*`` worker permissions reaching what an agent or a listed workflow serves,
    and against an agent taking the llm-host user's name."""
    from a2amesh.access import LLM_HOST, NatsAccess, permissions
    from a2amesh.bus.subjects import Subjects

    s = Subjects("ns")
    perms = permissions(NatsAccess(namespace="ns", agents=["alpha"], workflows=["orders"]))[LLM_HOST]
    assert perms is not None
    for name in ("alpha", "orders"):
        assert f"$JS.API.CONSUMER.MSG.NEXT.{s.tasks_stream}.{name}" in perms.publish_deny
        assert s.control(name) in perms.subscribe_deny
    assert s.request_all in perms.publish  # it calls agents as tools
    assert f"{s.reply_prefix()}{LLM_HOST}.>" in perms.subscribe
    with pytest.raises(ValueError, match="llm-host user"):
        NatsAccess(namespace="ns", agents=[LLM_HOST])
