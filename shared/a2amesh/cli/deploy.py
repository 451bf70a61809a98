"""``a2amesh deploy``: the deployment's users and secrets (``init``), or a least-privilege NATS configuration
(``nats-config``) and Valkey ACL file (``valkey-acl``) alone."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from a2amesh.cli.exits import EXIT_OK
from a2amesh.cli.settings import verb_settings
from a2amesh.errors import UsageError

__all__ = ["add_deploy_verbs", "cmd_init", "cmd_nats_config", "cmd_valkey_acl"]


def add_deploy_verbs(sub: Any) -> None:
    """The ``deploy`` verb and its ``nats-config`` sub-verb."""
    s = sub.add_parser("deploy", help="generate deployment configuration")
    what = s.add_subparsers(dest="what", required=True, metavar="WHAT")
    n = what.add_parser("nats-config", help="a NATS server config with one least-privilege user per agent")
    n.add_argument("agents", help="folder of agent YAML files (one NATS user each)")
    n.add_argument("-o", "--output", help="file to write (default: standard output)")
    n.add_argument("--auth", choices=["password", "nkey"], default="password", help="how users authenticate")
    n.add_argument("--workflow", action="append", help="a workflow the executor serves (default: every non-agent)")
    n.add_argument("--listen", default="127.0.0.1:4222", help="client listener (default loopback)")
    n.add_argument("--store-dir", default="/data/jetstream", help="JetStream store folder")
    n.add_argument("--http-port", type=int, help="monitoring port")
    n.add_argument("--tls-cert", help="server certificate file")
    n.add_argument("--tls-key", help="server key file")
    n.add_argument("--tls-ca", help="CA file for client certificates")
    n.add_argument("--tls-verify", action="store_true", help="require client certificates")
    n.add_argument("--accounts-only", action="store_true", help="only the accounts (and tls) blocks, to include")
    n.set_defaults(func=cmd_nats_config)
    v = what.add_parser("valkey-acl", help="a Valkey ACL file with one least-privilege user per agent and role")
    v.add_argument("agents", help="folder of agent YAML files (one Redis user each)")
    v.add_argument("-o", "--output", help="file to write (default: standard output)")
    v.set_defaults(func=cmd_valkey_acl)
    i = what.add_parser(
        "init", help="make the deployment's users and secrets once (NATS, Valkey, gateway keys); idempotent"
    )
    i.add_argument("--dir", default="deploy/secrets", help="folder of the files (default deploy/secrets, made 0700)")
    i.add_argument("--agents", default="agent_cards", help="folder of agent YAML files (default agent_cards)")
    i.add_argument(
        "--rotate",
        action="append",
        default=[],
        metavar="NAME",
        help="make this secret anew (a user, api-demo, api-admin or tls; repeatable)",
    )
    i.add_argument("--tls", action="store_true", help="also a local CA and a NATS server certificate; TLS on")
    i.add_argument("--tls-host", action="append", default=[], help="another name the server certificate is for")
    i.add_argument("--tls-path", default="/etc/nats/tls", help="where the NATS server finds the certificate")
    i.add_argument(
        "--kubernetes", action="store_true", help="also write the Kubernetes Secrets (kubernetes-secrets.yaml)"
    )
    i.add_argument("--owner", help="UID:GID of the files the containers read (default 10001:10001 as root)")
    i.set_defaults(func=cmd_init)


async def cmd_nats_config(args: argparse.Namespace) -> int:
    """Write the configuration; secrets stay in the server's environment (``$A2AMESH_NATS_PASSWORD_<USER>``)."""
    from a2amesh.access import ROLES, NatsAccess, accounts_config, password_variable, server_config
    from a2amesh.agent.definition import load_agent_file

    agents = await asyncio.to_thread(_agent_names, Path(args.agents), load_agent_file)
    settings = verb_settings(args)
    if args.auth == "nkey":
        print("note: nkey users carry no user name: set A2AMESH_SCOPE=<user> for each process", file=sys.stderr)
    try:
        access = NatsAccess(
            namespace=settings.namespace,
            agents=agents,
            workflows=args.workflow,
            auth=args.auth,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            tls_ca=args.tls_ca,
            tls_verify=args.tls_verify,
        )
    except ValidationError as e:
        err = e.errors()[0]
        raise UsageError(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}") from e
    if args.accounts_only:
        text = accounts_config(access)
    else:
        text = server_config(access, listen=args.listen, store_dir=args.store_dir, http_port=args.http_port)
    if args.output:
        await asyncio.to_thread(Path(args.output).write_text, text)
        users = ", ".join([*ROLES, *agents])
        print(f"wrote {args.output}: users {users}; passwords from ${password_variable('<USER>')}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def _agent_names(folder: Path, load: Callable[[Path], Any]) -> list[str]:
    """The names of the agents defined in ``folder`` (each file validated)."""
    if not folder.is_dir():
        raise UsageError(f"{folder}: not a folder of agent YAML files")
    files = sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml"))
    if not files:
        raise UsageError(f"{folder}: no agent YAML files (*.yaml, *.yml)")
    from a2amesh.remote.spec import is_remote_file, load_remote_file

    names = []
    for path in files:
        if not is_remote_file(path):
            names.append(str(load(path).name))
            continue
        remote = load_remote_file(path)  # its proxy is served like an agent of that name
        if remote.name is None:
            raise UsageError(f"{path}: give the remote agent a name: (its card's name is known only to its proxy)")
        names.append(remote.name)
    return names


async def cmd_valkey_acl(args: argparse.Namespace) -> int:
    """Write the ACL file; each password is read from ``$A2AMESH_REDIS_PASSWORD_<USER>`` and written hashed."""
    import hashlib
    import os

    from a2amesh.access import ROLES, redis_password_variable, valkey_acl
    from a2amesh.agent.definition import load_agent_file

    agents = await asyncio.to_thread(_agent_names, Path(args.agents), load_agent_file)
    settings = verb_settings(args)
    users = [*ROLES, *agents]
    missing = [redis_password_variable(u) for u in users if not os.environ.get(redis_password_variable(u))]
    if missing:
        raise UsageError(f"set the password of every Redis user in the environment; missing: {', '.join(missing)}")
    hashes = {u: hashlib.sha256(os.environ[redis_password_variable(u)].encode()).hexdigest() for u in users}
    text = valkey_acl(settings.namespace, agents, hashes)
    if args.output:
        await asyncio.to_thread(Path(args.output).write_text, text)
        print(f"wrote {args.output}: users {', '.join(users)} (passwords hashed)", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return EXIT_OK


async def cmd_init(args: argparse.Namespace) -> int:
    """Make the folder's secrets when missing (or rotated) and write the files derived from them; prints what
    it did, never a secret."""
    from a2amesh.access import ROLES
    from a2amesh.agent.definition import load_agent_file
    from a2amesh.provision import DeployInit

    agents = await asyncio.to_thread(_agent_names, Path(args.agents), load_agent_file)
    settings = verb_settings(args)
    owner: tuple[int, int] | None = None
    if args.owner:
        uid, _, gid = args.owner.partition(":")
        if not uid.isdigit() or not (gid or uid).isdigit():
            raise UsageError(f"--owner {args.owner!r}: expected UID or UID:GID (numbers)")
        owner = (int(uid), int(gid or uid))
    init = DeployInit(
        folder=Path(args.dir),
        namespace=settings.namespace,
        agents=agents,
        rotate=args.rotate,
        tls=args.tls,
        tls_hosts=args.tls_host,
        tls_path=args.tls_path,
        kubernetes=args.kubernetes,
        owner=owner,
    )
    try:
        report = await asyncio.to_thread(init.run)
    except ValidationError as e:
        err = e.errors()[0]
        raise UsageError(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}") from e
    for label, names in (("created", report.created), ("rotated", report.rotated), ("wrote", report.written)):
        if names:
            print(f"{label}: {', '.join(names)}")
    if report.kept:
        print(f"kept: {len(report.kept)} existing secrets")
    owner_text = f"owned by {report.owner[0]}:{report.owner[1]}" if report.owner else "owned by you"
    print(f"{args.dir}: users {', '.join([*ROLES, *agents])}; files 0600, {owner_text}")
    print(f"the gateway's keys: {args.dir}/api-demo.key (read, run, review), {args.dir}/api-admin.key (admin)")
    return EXIT_OK
