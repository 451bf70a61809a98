"""Remote agent verbs: ``a2amesh remote serve FILE|--stored [NAME]`` (proxy replicas) and ``remote add URL``.

``remote add`` fetches and checks the card first (a bad card is one error line naming the URL and the problem),
by the code path of ``POST /api/remotes``, then writes the declaration beside the agent cards, where ``a2amesh
up`` starts its proxy. ``serve --stored`` serves every declaration made through the API (kept in Redis),
following their changes (``remote/stored.py``; ``a2amesh up`` starts it); ``serve --stored NAME`` serves one.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from a2amesh import logs
from a2amesh.cli.exits import EXIT_OK
from a2amesh.cli.serve import METRICS_HELP, serve_metrics, serve_until_signal
from a2amesh.cli.settings import verb_settings
from a2amesh.errors import UsageError

__all__ = ["add_remote_parser", "cmd_remote_add", "cmd_remote_serve"]

EVERY_STORED = "*"
"""``--stored`` without a name: every remote declared through the API (no mesh name has a ``*``)."""


def add_remote_parser(sub: Any) -> None:
    """The ``remote`` verb and its actions."""
    s = sub.add_parser("remote", help="remote A2A agents as members of the mesh: remote serve FILE | remote add URL")
    actions = s.add_subparsers(dest="remote_verb", required=True, metavar="ACTION")
    r = actions.add_parser(
        "serve", help="run the proxy of one remote agent (its remote: YAML file), or of those declared through the API"
    )
    r.add_argument("file", nargs="?", help="its remote: YAML file")
    r.add_argument(
        "--stored",
        nargs="?",
        const=EVERY_STORED,
        metavar="NAME",
        help="instead, every remote declared through the API (/api/remotes), started and stopped as they are "
        "added and removed; with NAME, that one only",
    )
    r.add_argument("--metrics-port", type=int, help=METRICS_HELP)
    r.set_defaults(func=cmd_remote_serve)
    r = actions.add_parser("add", help="check a remote agent's card and write its remote: file beside the agent cards")
    r.add_argument("url", help="the agent's card URL or base URL")
    r.add_argument("--name", help="its name in the mesh (default: the card's name)")
    r.add_argument("--agents", default="agent_cards", help="folder of agent YAML files")
    r.add_argument("--transport", choices=["JSONRPC", "HTTP+JSON"], help="the binding to use (default: the card's)")
    r.add_argument("--bearer-env", metavar="VAR", help="send Authorization: Bearer $VAR")
    r.add_argument("--api-key-env", metavar="VAR", help="send the API key $VAR in --api-key-header")
    r.add_argument("--api-key-header", default="X-API-Key")
    r.set_defaults(func=cmd_remote_add)


async def cmd_remote_serve(args: argparse.Namespace) -> int:
    """``a2amesh remote serve FILE|--stored [NAME]``: run proxy replicas until a signal."""
    from a2amesh.remote.service import remote_service
    from a2amesh.remote.spec import load_remote_file
    from a2amesh.remote.stored import stored_remotes_service

    settings = verb_settings(args)
    logs.configure(settings.log_level if not args.verbose else "DEBUG", settings.log_format)
    serve_metrics(settings)
    if (args.file is None) == (args.stored is None):
        raise UsageError("give one of FILE and --stored [NAME]")
    if args.stored == EVERY_STORED:
        every = stored_remotes_service(settings)
        await serve_until_signal(every.run, every.shutdown)
        return EXIT_OK
    if args.file is not None:
        spec, source = load_remote_file(args.file), args.file
    else:
        spec, source = await _stored(settings, args.stored), f"stored remote {args.stored}"
    service = remote_service(spec, settings, source=source)
    await serve_until_signal(service.run, service.shutdown)
    return EXIT_OK


async def _stored(settings: Any, name: str) -> Any:
    from a2amesh.remote.declare import RemoteStore
    from a2amesh.store.redis import connect_redis

    redis = await connect_redis(settings)
    try:
        spec = await RemoteStore(redis, settings.namespace).get(name)
    finally:
        await redis.aclose()
    if spec is None:
        raise UsageError(f"no remote agent {name!r} is declared through the API (GET /api/remotes lists them)")
    return spec


async def cmd_remote_add(args: argparse.Namespace) -> int:
    """``a2amesh remote add URL``: check the card, write ``{agents}/{name}.yaml``."""
    from a2amesh.remote.declare import check_remote, declaration
    from a2amesh.remote.spec import parse_remote

    logs.configure("WARNING", "console")
    if args.bearer_env and args.api_key_env:
        raise UsageError("give one of --bearer-env and --api-key-env")
    declared: dict[str, Any] = {"url": args.url}
    if args.name:
        declared["name"] = args.name
    if args.transport:
        declared["transport"] = args.transport
    if args.bearer_env:
        declared["auth"] = {"type": "bearer", "token": {"env": args.bearer_env}}
    if args.api_key_env:
        declared["auth"] = {"type": "api_key", "header": args.api_key_header, "key": {"env": args.api_key_env}}
    spec = parse_remote({"remote": declared}, "remote add")
    checked = await check_remote(spec, source="remote add")  # the code path of POST /api/remotes
    name, remote = checked.name, checked.card
    path = Path(args.agents) / f"{name}.yaml"
    if path.exists():
        raise UsageError(f"{path} exists: choose another --name, or edit that file")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"remote": declaration(checked.spec)}, sort_keys=False))
    skills = ", ".join(s.id for s in remote.card.skills) or "none"
    print(f"{path}: remote agent {name} ({remote.binding} {remote.version} at {remote.url}; skills: {skills})")
    return EXIT_OK
