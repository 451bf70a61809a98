"""The ``a2amesh gateway`` verb: the HTTP gateway in the foreground until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
from typing import Any

from a2amesh import logs
from a2amesh.cli.exits import EXIT_OK
from a2amesh.cli.serve import serve_metrics, serve_until_signal
from a2amesh.cli.settings import verb_settings

__all__ = ["add_gateway_options", "cmd_gateway", "gateway_settings"]


def add_gateway_options(s: Any, *, prefix: str = "") -> None:
    """Options shared by ``gateway`` (``--host``) and ``up`` (``--http-host``)."""
    s.add_argument(f"--{prefix}host", help="address to listen on (default 127.0.0.1; also A2AMESH_HTTP_HOST)")
    s.add_argument(f"--{prefix}port", type=int, help="port to listen on (default 8080; also A2AMESH_HTTP_PORT)")
    s.add_argument(
        "--insecure",
        action="store_true",
        help="serve a non-loopback address without API keys (A2AMESH_API_KEYS)",
    )


def gateway_settings(args: argparse.Namespace, *, prefix: str = "") -> Any:
    """The gateway's settings from the environment and the verb's options."""
    from a2amesh.gateway import GatewaySettings

    opts = vars(args)
    dest = prefix.replace("-", "_")
    return GatewaySettings.load(
        host=opts.get(f"{dest}host"),
        port=opts.get(f"{dest}port"),
        insecure=True if opts.get("insecure") else None,
    )


async def cmd_gateway(args: argparse.Namespace) -> int:
    """``a2amesh gateway``: every agent and workflow of the mesh as an A2A HTTP endpoint."""
    from a2amesh.gateway import Gateway

    settings = verb_settings(args)
    logs.configure(settings.log_level if not args.verbose else "DEBUG", settings.log_format)
    serve_metrics(settings)  # beside /metrics: a port without API keys, for a scraper inside the network
    gateway = Gateway(settings, gateway_settings(args))
    await serve_until_signal(gateway.run, gateway.shutdown)
    return EXIT_OK
