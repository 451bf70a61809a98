"""Mesh verbs of the ``a2amesh`` command line: up, demo, init, agent, agents, call.

The client, the bus, the embedded servers and the agent runtime are imported inside the verb that uses
them: each pulls in nats or redis (0.5–1 s), and ``a2amesh --help`` or ``validate`` must not pay for them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from pathlib import Path

from a2amesh import logs
from a2amesh.cli.exits import EXIT_FAILED, EXIT_OK, exit_of_state
from a2amesh.cli.gateway import gateway_settings
from a2amesh.cli.output import print_table, task_summary
from a2amesh.cli.serve import serve_metrics, serve_until_signal
from a2amesh.cli.settings import verb_settings
from a2amesh.errors import UsageError
from a2amesh.protocol import StreamResponse, Task
from a2amesh.protocol.states import state_word

__all__ = ["cmd_agent", "cmd_agents", "cmd_builtins", "cmd_call", "cmd_demo", "cmd_init", "cmd_up"]


async def cmd_agent(args: argparse.Namespace) -> int:
    """``a2amesh agent FILE``: run one agent process until a signal."""
    from a2amesh.agent.runtime import build_runtime
    from a2amesh.service import agent_service

    settings = verb_settings(args)
    logs.configure(settings.log_level if not args.verbose else "DEBUG", settings.log_format)
    serve_metrics(settings)
    runtime = build_runtime(Path(args.file), settings)
    service = agent_service(runtime, settings)
    await serve_until_signal(service.run, service.shutdown)
    return EXIT_OK


async def cmd_builtins(args: argparse.Namespace) -> int:
    """``a2amesh builtins``: serve the built-in agents until a signal."""
    from a2amesh.builtins.agents import ModelSettings
    from a2amesh.builtins.service import builtins_service

    settings = verb_settings(args)
    logs.configure(settings.log_level if not args.verbose else "DEBUG", settings.log_format)
    serve_metrics(settings)
    if args.llm_timeout <= 0 or args.llm_retries < 0:
        raise UsageError("--llm-timeout must be above 0 and --llm-retries at least 0")
    models = ModelSettings.from_settings(
        settings,
        embedding_model=args.embedding_model,
        image_model=args.image_model,
        timeout=args.llm_timeout,
        max_retries=args.llm_retries,
    )
    service = builtins_service(settings, models)
    await serve_until_signal(service.run, service.shutdown)
    return EXIT_OK


async def cmd_init(args: argparse.Namespace) -> int:
    """``a2amesh init``: create or update the namespace's streams and buckets."""
    from a2amesh.bus.nats import Bus
    from a2amesh.bus.setup import init_mesh

    settings = verb_settings(args)
    if args.replicas is not None:
        if not 1 <= args.replicas <= 5:
            raise UsageError(f"--replicas {args.replicas}: JetStream keeps 1 to 5 replicas of a stream")
        settings = settings.model_copy(update={"replicas": args.replicas})
    bus = await Bus.connect(settings, name="a2amesh-init")
    try:
        await init_mesh(bus, settings)
    finally:
        await bus.close()
    print(f"namespace {settings.namespace}: streams and buckets are in place ({settings.replicas or 1} replica(s))")
    return EXIT_OK


async def cmd_agents(args: argparse.Namespace) -> int:
    """``a2amesh agents``: the live agent and workflow cards."""
    from a2amesh.client import connect

    settings = verb_settings(args)
    async with connect(settings, name="a2amesh-cli") as client:
        cards = client.cards()
    if args.json:
        print(json.dumps([c.to_json_dict() for c in cards], indent=2))
        return EXIT_OK
    rows: list[tuple[str, ...]] = [("NAME", "TYPE", "VERSION", "SKILLS", "DESCRIPTION")]
    for c in cards:
        kind, about = ("remote", f"{c.remote_url} {c.description}") if c.remote_url else (c.agent_type, c.description)
        rows.append((c.name, kind, c.version, ",".join(s.id for s in c.skills), about[:60]))
    print_table(rows)
    if not cards:
        print("(no live agents)")
    return EXIT_OK


async def cmd_call(args: argparse.Namespace) -> int:
    """``a2amesh call AGENT [TEXT] [--data JSON]``: send a task, stream its progress, print the result."""
    from a2amesh.client import connect, make_message, parse_json_arg

    if args.text is None and args.data is None:
        raise UsageError("call needs TEXT or --data JSON")
    data = None
    if args.data is not None:
        try:
            data = parse_json_arg(args.data)
        except ValueError as e:
            raise UsageError(f"--data: {e}") from e
    message = make_message(args.text, data=data, context_id=args.context, task_id=args.task)
    settings = verb_settings(args)
    async with connect(settings, name="a2amesh-cli") as client:
        call = await client.dispatch(args.agent, message, stream=True, timeout=args.timeout)
        async for ev in call.events():
            if args.json:
                continue
            _print_event(ev)
        task = call.task
    assert task is not None
    if args.json:
        print(json.dumps({"agent": args.agent, **task_summary(task)}, indent=2, default=str))
    else:
        _print_result(task)
    return exit_of_state(task.status.state)


def _print_event(ev: StreamResponse) -> None:
    if ev.task is not None:
        print(f"→ task {ev.task.id} {state_word(ev.task.status.state)}", file=sys.stderr)
    elif ev.status_update is not None:
        st = ev.status_update.status
        text = " ".join(
            p.text if p.text is not None else json.dumps(p.data) for p in (st.message.parts if st.message else [])
        )
        print(f"  {state_word(st.state)} {text}".rstrip(), file=sys.stderr)


def _print_result(task: Task) -> None:
    out = task.output()
    state = state_word(task.status.state)
    msg = task.status.message.text() if task.status.message else ""
    shown = out if isinstance(out, str) else json.dumps(out, ensure_ascii=False, separators=(",", ":"), default=str)
    print(f"← {state}" + (f": {msg}" if msg and msg != shown else ""), file=sys.stderr)  # not the output twice
    if out is not None:
        print(out if isinstance(out, str) else json.dumps(out, indent=2))


async def cmd_up(args: argparse.Namespace) -> int:
    """``a2amesh up``: NATS, Valkey, the executor and every agent in the foreground until Ctrl-C."""
    from a2amesh.mesh import Mesh

    settings = verb_settings(args)
    logs.configure(settings.log_level, settings.log_format)
    workflows = Path(args.workflows) if args.workflows else None
    has_workflows = workflows is not None and await asyncio.to_thread(workflows.is_dir)
    mesh = Mesh(
        settings,
        agents_dir=Path(args.agents),
        workflows_dir=workflows if has_workflows else None,
        state_dir=Path(args.state_dir or settings.state_dir or ".a2amesh"),
        gateway=None if args.no_gateway else gateway_settings(args, prefix="http-"),
        llm_host=not args.no_llm_host,
        stored_remotes=not args.no_stored_remotes,
        cluster=args.cluster,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with mesh:
        print(f"a2amesh is up: NATS {mesh.nats_url}  Redis {mesh.redis_url}  namespace {settings.namespace}")
        if mesh.nats_cluster:
            replicas = mesh.effective_settings().replicas
            print(f"NATS cluster of {len(mesh.nats_cluster.nodes)} nodes; streams and buckets have {replicas} replicas")
        if mesh.valkey_cluster:
            vc = mesh.valkey_cluster
            print(
                f"Valkey Cluster of {len(vc.nodes)} nodes (each primary has {vc.replicas} replica): {' '.join(vc.urls)}"
            )
            print("  other processes: REDIS_URL=<any node> A2AMESH_REDIS_CLUSTER=1")
        if mesh.not_started:
            names = ", ".join(name for name, _ in mesh.not_started)
            wanted = dict.fromkeys(what for _, what in mesh.not_started)
            print(f"not started (LLM agents, no model configured): {names}; set {' and '.join(wanted)}")
        if mesh.gateway_url:
            print(f"HTTP gateway: {mesh.gateway_url}/agents (A2A JSON-RPC, HTTP+JSON, SSE)")
            print(f"dashboard:    {mesh.gateway_url}/ (open it in a browser)")
        print("Ctrl-C stops it.")
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1):
                    await stop.wait()
            crashed = mesh.crashed()
            if crashed:
                print(f"a2amesh: process(es) exited: {', '.join(crashed)}; stopping", file=sys.stderr)
                return EXIT_FAILED
    print("a2amesh stopped.")
    return EXIT_OK


async def cmd_demo(args: argparse.Namespace) -> int:
    """``a2amesh demo``: start the mesh, call the examples, print the results, stop."""
    from a2amesh.demo import run_demo

    settings = verb_settings(args)
    logs.configure("WARNING", settings.log_format)
    return await run_demo(settings, agents_dir=Path(args.agents), workflows_dir=Path(args.workflows))
