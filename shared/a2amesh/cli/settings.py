"""The Settings of one CLI invocation: environment, ``--config`` and ``--namespace``, and the local mesh."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from a2amesh.config import Settings

__all__ = ["adopt_local_mesh", "verb_settings"]

_OWN_SERVERS = ("up", "demo")
"""Verbs that start their own servers, so never adopt a running mesh's."""


def verb_settings(args: argparse.Namespace) -> Settings:
    """Settings for the verb in ``args`` (built once, at the edge)."""
    settings = Settings.load(
        file=getattr(args, "config", None),
        namespace=getattr(args, "namespace", None),
        metrics_port=getattr(args, "metrics_port", None),
    )
    return adopt_local_mesh(settings) if args.verb not in _OWN_SERVERS else settings


def adopt_local_mesh(settings: Settings) -> Settings:
    """Without NATS_URL / REDIS_URL, talk to the mesh `a2amesh up` runs from this folder, if any."""
    state = Path(settings.state_dir or ".a2amesh")
    updates: dict[str, Any] = {}
    if not settings.nats_url and (state / "nats.urls").is_file():
        updates["nats_url"] = (state / "nats.urls").read_text().strip()
    elif not settings.nats_url and (state / "nats.port").is_file():
        updates["nats_url"] = f"nats://127.0.0.1:{(state / 'nats.port').read_text().strip()}"
    if not settings.redis_url and (state / "valkey.cluster").is_file():
        updates["redis_url"] = SecretStr((state / "valkey.cluster").read_text().strip())
        updates["redis_cluster"] = True
    elif not settings.redis_url and (state / "valkey.port").is_file():
        updates["redis_url"] = SecretStr(f"redis://127.0.0.1:{(state / 'valkey.port').read_text().strip()}/0")
    return settings.model_copy(update=updates) if updates else settings
