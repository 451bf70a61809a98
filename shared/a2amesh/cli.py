"""The ``a2amesh`` command line: parse, build Settings, call the client or a service, print.

Exit codes: 0 ok, 1 the task or run failed, 2 a usage or input error (one line on stderr, no traceback
unless ``--debug``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from a2amesh import eventloop, logs
from a2amesh.config import Settings
from a2amesh.errors import A2AMeshError, ConfigError, RpcError, StoreError, TransportError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(A2AMeshError):
    """A command-line mistake."""


def _settings(args: argparse.Namespace) -> Settings:
    settings = Settings.load(file=getattr(args, "config", None), namespace=getattr(args, "namespace", None))
    return _adopt_local_mesh(settings) if args.verb not in ("up", "demo") else settings


def _adopt_local_mesh(settings: Settings) -> Settings:
    """Without NATS_URL / REDIS_URL, talk to the mesh `a2amesh up` runs from this folder, if any."""
    state = Path(settings.state_dir or ".a2amesh")
    updates: dict[str, Any] = {}
    if not settings.nats_url and (state / "nats.port").is_file():
        updates["nats_url"] = f"nats://127.0.0.1:{(state / 'nats.port').read_text().strip()}"
    if not settings.redis_url and (state / "valkey.port").is_file():
        from pydantic import SecretStr

        updates["redis_url"] = SecretStr(f"redis://127.0.0.1:{(state / 'valkey.port').read_text().strip()}/0")
    return settings.model_copy(update=updates) if updates else settings


async def _serve_until_signal(
    run: Callable[[], Coroutine[Any, Any, None]], shutdown: Callable[[], Awaitable[None]]
) -> None:
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(run())
    stopping = asyncio.Event()

    def on_signal() -> None:
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    waiter = asyncio.create_task(stopping.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if stopping.is_set() and not task.done():
        await shutdown()
    waiter.cancel()
    await task


# agent
async def cmd_agent(args: argparse.Namespace) -> int:
    from a2amesh.agent.runtime import build_runtime
    from a2amesh.service import agent_service

    settings = _settings(args)
    logs.configure(settings.log_level if not args.verbose else "DEBUG", settings.log_format)
    runtime = build_runtime(Path(args.file), settings)
    service = agent_service(runtime, settings)
    await _serve_until_signal(service.run, service.shutdown)
    return EXIT_OK


# init
async def cmd_init(args: argparse.Namespace) -> int:
    from a2amesh.bus.nats import Bus
    from a2amesh.bus.setup import init_mesh

    settings = _settings(args)
    bus = await Bus.connect(settings, name="a2amesh-init")
    try:
        await init_mesh(bus, settings)
    finally:
        await bus.close()
    print(f"namespace {settings.namespace}: streams and buckets are in place")
    return EXIT_OK


# agents
async def cmd_agents(args: argparse.Namespace) -> int:
    from a2amesh.client import connect

    settings = _settings(args)
    async with connect(settings, name="a2amesh-cli") as client:
        cards = client.cards()
    if args.json:
        print(json.dumps([c.to_json_dict() for c in cards], indent=2))
        return EXIT_OK
    rows: list[tuple[str, ...]] = [("NAME", "TYPE", "VERSION", "SKILLS", "DESCRIPTION")]
    for c in cards:
        rows.append((c.name, c.agent_type, c.version, ",".join(s.id for s in c.skills), c.description[:60]))
    _print_table(rows)
    if not cards:
        print("(no live agents)")
    return EXIT_OK


def _print_table(rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


# call
async def cmd_call(args: argparse.Namespace) -> int:
    from a2amesh.client import connect, make_message, parse_json_arg
    from a2amesh.protocol import TaskState

    if args.text is None and args.data is None:
        raise UsageError("call needs TEXT or --data JSON")
    data = None
    if args.data is not None:
        try:
            data = parse_json_arg(args.data)
        except ValueError as e:
            raise UsageError(f"--data: {e}") from e
    message = make_message(args.text, data=data, context_id=args.context, task_id=args.task)
    settings = _settings(args)
    async with connect(settings, name="a2amesh-cli") as client:
        call = await client.dispatch(args.agent, message, stream=True, timeout=args.timeout)
        async for ev in call.events():
            if args.json:
                continue
            _print_event(ev)
        task = call.task
    assert task is not None
    if args.json:
        print(json.dumps(task.to_json_dict(), indent=2))
    else:
        _print_result(task)
    return EXIT_OK if task.status.state in (TaskState.COMPLETED, TaskState.INPUT_REQUIRED) else EXIT_FAILED


def _print_event(ev: Any) -> None:
    if ev.task is not None:
        print(f"→ task {ev.task.id} {ev.task.status.state.value}", file=sys.stderr)
    elif ev.status_update is not None:
        st = ev.status_update.status
        text = " ".join(
            p.text if p.text is not None else json.dumps(p.data) for p in (st.message.parts if st.message else [])
        )
        print(f"  {st.state.value} {text}".rstrip(), file=sys.stderr)


def _print_result(task: Any) -> None:
    out = task.output()
    state = task.status.state.value
    msg = task.status.message.text() if task.status.message else ""
    print(f"← {state}" + (f": {msg}" if msg else ""), file=sys.stderr)
    if out is not None:
        print(out if isinstance(out, str) else json.dumps(out, indent=2))


# up / demo
async def cmd_up(args: argparse.Namespace) -> int:
    from a2amesh.mesh import Mesh

    settings = _settings(args)
    logs.configure(settings.log_level, settings.log_format)
    workflows = Path(args.workflows) if args.workflows else None
    has_workflows = workflows is not None and await asyncio.to_thread(workflows.is_dir)
    mesh = Mesh(
        settings,
        agents_dir=Path(args.agents),
        workflows_dir=workflows if has_workflows else None,
        state_dir=Path(args.state_dir or settings.state_dir or ".a2amesh"),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with mesh:
        print(f"a2amesh is up: NATS {mesh.nats_url}  Redis {mesh.redis_url}  namespace {settings.namespace}")
        print("Ctrl-C stops it.")
        while not stop.is_set():
            with contextlib_suppress_timeout():
                await asyncio.wait_for(stop.wait(), 1)
            crashed = mesh.crashed()
            if crashed:
                print(f"a2amesh: process(es) exited: {', '.join(crashed)}; stopping", file=sys.stderr)
                return EXIT_FAILED
    print("a2amesh stopped.")
    return EXIT_OK


def contextlib_suppress_timeout() -> Any:
    import contextlib

    return contextlib.suppress(TimeoutError)


async def cmd_demo(args: argparse.Namespace) -> int:
    from a2amesh.demo import run_demo

    settings = _settings(args)
    logs.configure("WARNING", settings.log_format)
    return await run_demo(settings, agents_dir=Path(args.agents), workflows_dir=Path(args.workflows))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every verb."""
    p = argparse.ArgumentParser(prog="a2amesh", description="A2A agents and workflows over NATS and Redis.")
    p.add_argument("--config", help="YAML settings file (also A2AMESH_CONFIG)")
    p.add_argument("--namespace", help="namespace (also A2AMESH_NAMESPACE)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="verb", required=True, metavar="VERB")

    s = sub.add_parser("up", help="run NATS, Valkey, the executor and every agent in the foreground")
    s.add_argument("--agents", default="agent_cards", help="folder of agent YAML files")
    s.add_argument("--workflows", default="workflows", help="folder of workflow definitions")
    s.add_argument("--state-dir", help="data folder of the embedded servers (default .a2amesh)")
    s.set_defaults(func=cmd_up)

    s = sub.add_parser("demo", help="start the mesh, call the examples, print the results, stop")
    s.add_argument("--agents", default="agent_cards")
    s.add_argument("--workflows", default="workflows")
    s.set_defaults(func=cmd_demo)

    s = sub.add_parser("init", help="create or update the namespace's streams and buckets")
    s.set_defaults(func=cmd_init)

    s = sub.add_parser("agent", help="run one agent process from its YAML file")
    s.add_argument("file")
    s.set_defaults(func=cmd_agent)

    s = sub.add_parser("agents", help="list live agent and workflow cards")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_agents)

    s = sub.add_parser("call", help="send a task to an agent or workflow and stream its progress")
    s.add_argument("agent")
    s.add_argument("text", nargs="?")
    s.add_argument("--data", help="JSON input")
    s.add_argument("--context", help="contextId (continue a conversation)")
    s.add_argument("--task", help="taskId (answer a task waiting for input)")
    s.add_argument("--timeout", type=float, default=None, help="seconds to wait for the final result")
    s.add_argument("--json", action="store_true", help="print the final Task as one JSON object")
    s.set_defaults(func=cmd_call)

    from a2amesh.executor.cli import add_verbs

    add_verbs(sub)
    for extra in EXTRA_VERBS:
        extra(sub)
    return p


EXTRA_VERBS: list[Callable[[Any], None]] = []


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``a2amesh`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not logs_configured(args):
        logs.configure("WARNING", "console")
    try:
        code = eventloop.run(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `a2amesh show RUN | head`: the reader left; not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except (UsageError, ConfigError) as e:
        return _fail(args, e, EXIT_USAGE)
    except RpcError as e:
        return _fail(args, e, EXIT_FAILED, prefix=f"error {e.code}")
    except TransportError as e:
        return _fail(args, e, EXIT_FAILED, prefix=e.reason)
    except (A2AMeshError, StoreError) as e:
        return _fail(args, e, EXIT_FAILED)
    except Exception as e:  # the outer edge: one line, never a traceback unless --debug
        return _fail(args, e, EXIT_FAILED, prefix=f"internal error ({type(e).__name__}; --debug shows more)")
    return int(code)


def logs_configured(args: argparse.Namespace) -> bool:
    return args.verb in ("agent", "up", "demo", "executor", "gateway")


def _fail(args: argparse.Namespace, e: BaseException, code: int, prefix: str = "") -> int:
    if getattr(args, "debug", False):
        import traceback

        traceback.print_exception(e)
    label = f"{prefix}: " if prefix else ""
    print(f"a2amesh: {label}{e}", file=sys.stderr)
    return code
