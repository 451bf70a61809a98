"""The ``a2amesh`` command line: parse, build Settings, call the client or a service, print.

Exit codes (:mod:`a2amesh.cli.exits`, docs/operations.md): 0 done (a run that paused too), 1 the task or run
failed, 2 a usage or input error (one line on stderr, no traceback unless ``--debug``). The verbs live in
:mod:`~a2amesh.cli.mesh`, :mod:`~a2amesh.cli.runs`, :mod:`~a2amesh.cli.chat`, :mod:`~a2amesh.cli.schedules` and
:mod:`~a2amesh.cli.workflows`; every verb's parser is here, in the order ``--help`` lists them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from a2amesh import eventloop, logs, metrics, tracing
from a2amesh.cli import chat, deploy, gateway, mcp, mesh, rag, remote, runs, schedules, workflows
from a2amesh.cli.exits import EXIT_INTERRUPTED, EXIT_OK, exit_code_of
from a2amesh.cli.serve import METRICS_HELP

__all__ = ["EXTRA_VERBS", "build_parser", "main"]

EXTRA_VERBS: list[Callable[[Any], None]] = []
"""Functions that add more verbs to the subparsers (called last by :func:`build_parser`)."""

_CONFIGURES_LOGS = frozenset({"agent", "builtins", "up", "demo", "executor", "gateway", "mcp", "llm-host", "remote"})
"""Verbs that set up logging themselves (from Settings); the others log warnings only."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every verb."""
    p = argparse.ArgumentParser(prog="a2amesh", description="A2A agents and workflows over NATS and Redis.")
    p.add_argument("--config", help="YAML settings file (also A2AMESH_CONFIG)")
    p.add_argument("--namespace", help="namespace (also A2AMESH_NAMESPACE)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    _add_mesh_verbs(sub)
    _add_run_verbs(sub)
    deploy.add_deploy_verbs(sub)
    for extra in EXTRA_VERBS:
        extra(sub)
    return p


def _add_mesh_verbs(sub: Any) -> None:
    s = sub.add_parser("up", help="run NATS, Valkey, the executor and every agent in the foreground")
    s.add_argument("--agents", default="agent_cards", help="folder of agent YAML files")
    s.add_argument("--workflows", default="workflows", help="folder of workflow definitions")
    s.add_argument("--state-dir", help="data folder of the embedded servers (default .a2amesh)")
    gateway.add_gateway_options(s, prefix="http-")
    s.add_argument("--no-gateway", action="store_true", help="do not start the HTTP gateway")
    s.add_argument("--no-llm-host", action="store_true", help="do not start the host of the stored LLM agents")
    s.add_argument(
        "--no-stored-remotes",
        action="store_true",
        help="do not start the proxies of the remote agents declared through the API (/api/remotes)",
    )
    s.add_argument(
        "--cluster",
        action="store_true",
        help="run NATS as a 3-node JetStream cluster (streams with 3 replicas) and Valkey as a Valkey Cluster "
        "(3 primaries, 3 replicas)",
    )
    s.set_defaults(func=mesh.cmd_up)

    s = sub.add_parser("demo", help="start the mesh, call the examples, print the results, stop")
    s.add_argument("--agents", default="agent_cards")
    s.add_argument("--workflows", default="workflows")
    s.set_defaults(func=mesh.cmd_demo)

    s = sub.add_parser("gateway", help="serve every agent and workflow over HTTP (A2A JSON-RPC, HTTP+JSON, SSE)")
    gateway.add_gateway_options(s)
    s.set_defaults(func=gateway.cmd_gateway)

    mcp.add_mcp_verb(sub)

    s = sub.add_parser("init", help="create or update the namespace's streams and buckets")
    s.add_argument(
        "--replicas",
        type=int,
        help="replicas of every stream and bucket (3 on a 3-node cluster; also A2AMESH_REPLICAS)",
    )
    s.set_defaults(func=mesh.cmd_init)

    s = sub.add_parser("agent", help="run one agent process from its YAML file")
    s.add_argument("file")
    s.add_argument("--metrics-port", type=int, help=METRICS_HELP)
    s.set_defaults(func=mesh.cmd_agent)

    s = sub.add_parser("builtins", help="run the built-in agents (llm, tools, tool_loop nodes) in one process")
    s.add_argument("--llm-timeout", type=float, default=60.0, help="seconds per model request")
    s.add_argument("--llm-retries", type=int, default=3, help="retries of a failed model request, with backoff")
    s.add_argument("--embedding-model", help="embedding model of embed, memory and rag nodes that name none")
    s.add_argument("--image-model", help="model of image nodes that name none (default: the endpoint's)")
    s.add_argument("--metrics-port", type=int, help=METRICS_HELP)
    s.set_defaults(func=mesh.cmd_builtins)

    remote.add_remote_parser(sub)

    s = sub.add_parser("agents", help="list live agent and workflow cards")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=mesh.cmd_agents)

    s = sub.add_parser("call", help="send a task to an agent or workflow and stream its progress")
    s.add_argument("agent")
    s.add_argument("text", nargs="?")
    s.add_argument("--data", help="JSON input")
    s.add_argument("--context", help="contextId (continue a conversation)")
    s.add_argument("--task", help="taskId (answer a task waiting for input)")
    s.add_argument("--timeout", type=float, default=None, help="seconds to wait for the final result")
    s.add_argument(
        "--json", action="store_true", help="print the outcome as one JSON object (status, output, error, question)"
    )
    s.set_defaults(func=mesh.cmd_call)

    s = sub.add_parser(
        "chat",
        help="talk with a conversational workflow or an agent at the prompt (/new: a new conversation; Ctrl-D leaves)",
    )
    s.add_argument("target", metavar="WORKFLOW_OR_AGENT")
    s.add_argument("--context", help="continue this conversation (contextId) instead of starting one")
    s.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for each answer")
    s.set_defaults(func=chat.cmd_chat)


def _add_run_verbs(sub: Any) -> None:
    s = sub.add_parser("executor", help="run the workflow executor over a folder of definitions (hot reload)")
    s.add_argument("folder", help="folder of workflow definitions (YAML / JSON)")
    s.add_argument("--reload-interval", type=float, default=1.0, help="seconds between scans of the folder")
    s.add_argument(
        "--no-apply", action="store_true", help="serve the folder without applying it into the definitions store"
    )
    s.add_argument("--metrics-port", type=int, help=METRICS_HELP)
    s.set_defaults(func=workflows.cmd_executor)

    s = sub.add_parser("run", help="run a workflow, showing live node progress, then its output")
    s.add_argument("workflow")
    s.add_argument("--input", default="{}", help="the workflow input as JSON (default {})")
    s.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the result")
    s.add_argument("--json", action="store_true", help="print the result as one JSON object")
    s.set_defaults(func=runs.cmd_run)

    s = sub.add_parser("cancel", help="cancel a running execution (and every callee, recursively)")
    s.add_argument("run", help="execution id (a unique prefix is enough)")
    s.set_defaults(func=runs.cmd_cancel)

    s = sub.add_parser(
        "resume",
        help="answer a paused execution's human review: --approve, --reject [--reason], or --edit JSON",
    )
    s.add_argument("run", help="execution id (a unique prefix is enough)")
    decision = s.add_mutually_exclusive_group(required=True)
    decision.add_argument("--approve", action="store_true", help="approve the data under review")
    decision.add_argument("--reject", action="store_true", help="reject it (on_reject decides what follows)")
    decision.add_argument("--edit", metavar="JSON", help="replace the data under review (checked by edit_schema)")
    s.add_argument("--reason", help="why (kept with the decision; a rejection's error names it)")
    s.add_argument("--path", help="the review to answer when several wait (default: the first)")
    s.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the next outcome")
    s.add_argument("--json", action="store_true", help="print the outcome as one JSON object")
    s.set_defaults(func=runs.cmd_resume)

    s = sub.add_parser("retry", help="start a new execution reusing the outputs of an earlier one")
    s.add_argument("run", help="execution id (a unique prefix is enough)")
    s.add_argument("--from", dest="from_node", help="re-run this node and everything after it")
    s.add_argument("--timeout", type=float, default=3600.0)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=runs.cmd_retry)

    s = sub.add_parser("runs", help="list executions")
    s.add_argument("--workflow", help="only this workflow")
    s.add_argument(
        "--status", help="running, paused, completed, failed or cancelled (canceled and TASK_STATE_* spellings too)"
    )
    s.add_argument("--parent", help="only the sub-workflow executions of this execution")
    s.add_argument("--limit", type=int, default=50)
    s.add_argument("--cursor", help="continue a listing where the previous one stopped (printed on stderr)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=runs.cmd_runs)

    s = sub.add_parser("show", help="show one execution: status, output and the node timeline")
    s.add_argument("run", help="execution id (a unique prefix is enough)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=runs.cmd_show)

    s = sub.add_parser(
        "schedules",
        help="list schedules and their next fire; pause, resume or delete one",
        description="a2amesh schedules [--json] [--workflow W] | schedules pause NAME[/BRANCH] | "
        "schedules resume NAME[/BRANCH] | schedules delete NAME[/BRANCH]. NAME alone means every schedule of "
        "the workflow; the workflow's own graph is NAME/main. delete removes a schedule whose workflow no live "
        "executor serves (while one serves it, pause it).",
    )
    s.add_argument("action", nargs="?", default="list", choices=["list", "pause", "resume", "delete"])
    s.add_argument("target", nargs="?", metavar="NAME[/BRANCH]", help="the schedule to pause, resume or delete")
    s.add_argument("--workflow", help="list only this workflow's schedules")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=schedules.cmd_schedules)

    s = sub.add_parser("rag", help="vector stores of the rag node: rag ingest STORE FILE…")
    rag_sub = s.add_subparsers(dest="rag_verb", required=True, metavar="ACTION")
    r = rag_sub.add_parser(
        "ingest", help="chunk, embed (OPENAI_BASE_URL, else the offline model) and store text files in a vector store"
    )
    r.add_argument("store", help="the vector store's name")
    r.add_argument("files", nargs="+", metavar="FILE")
    r.add_argument("--embedding-model", help="the embedding model (default text-embedding-3-small)")
    r.add_argument("--chunk-size", type=int, default=800, help="most characters per chunk")
    r.add_argument("--overlap", type=int, default=100, help="characters shared by consecutive chunks")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=rag.cmd_rag_ingest)

    s = sub.add_parser("memory", help="list or delete the entries of the memory nodes (per agent, user, key)")
    s.add_argument("action", choices=["list", "delete"])
    s.add_argument("agent", help="whose memory (the memory nodes' agent: by default the workflow's name)")
    s.add_argument("entry", nargs="?", help="the entry id to delete")
    s.add_argument("--user", help="only this user's entries")
    s.add_argument("--key", help="only the entry with this key")
    s.add_argument("--limit", type=int, default=100)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=rag.cmd_memory)

    s = sub.add_parser(
        "validate", help="check workflow definition files (a folder: its *.yaml, *.yml, *.json); errors and warnings"
    )
    s.add_argument("files", nargs="+", metavar="FILE_OR_FOLDER")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=workflows.cmd_validate)

    workflows.add_workflows_parser(sub)

    s = sub.add_parser("graph", help="print a workflow definition (DAG or graph format) as a Mermaid flowchart")
    s.add_argument("file")
    s.add_argument("--name", help="the workflow to draw when the file holds several")
    s.add_argument("--direction", default="TD", choices=["TD", "LR", "BT", "RL"])
    s.set_defaults(func=workflows.cmd_graph)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``a2amesh`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verb not in _CONFIGURES_LOGS:
        logs.configure("WARNING", "console")
    try:
        if args.verb in _CONFIGURES_LOGS:
            tracing.configure(f"a2amesh-{args.verb}")  # before the a2a-sdk is imported (see its docstring)
            metrics.configure_export(f"a2amesh-{args.verb}")  # OTLP metrics, when OTEL_* asks for them
        code = eventloop.run(args.func(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `a2amesh show RUN | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as e:  # the outer edge: one line and an exit code
        return exit_code_of(args, e)
    return int(code)
