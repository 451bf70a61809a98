"""Readiness of an agent or executor container: the process holds an established connection to NATS.

Agents and executors serve no HTTP (their work comes over NATS), so the images' HEALTHCHECK and the Kubernetes
readiness probes (deploy/k8s/) run this instead: it reads the container's TCP tables for an ESTABLISHED
connection to a port of ``NATS_URL``. It opens no connection of its own and imports only the standard library.
Exit 0 when connected, 1 with the reason on stderr otherwise.
"""

from __future__ import annotations

import os
import sys
from urllib.parse import urlsplit

TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
ESTABLISHED = "01"
DEFAULT_PORT = 4222


def nats_ports(urls: str) -> set[int]:
    """The ports of a comma-separated ``NATS_URL`` (4222 where a URL names none)."""
    return {urlsplit(url.strip()).port or DEFAULT_PORT for url in urls.split(",") if url.strip()}


def established_remote_ports(tables: tuple[str, ...] = TABLES) -> set[int]:
    """Remote ports of this network namespace's ESTABLISHED TCP connections."""
    ports = set()
    for table in tables:
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 3 and fields[3] == ESTABLISHED:
                ports.add(int(fields[2].rsplit(":", 1)[1], 16))
    return ports


def main() -> int:
    wanted = nats_ports(os.environ.get("NATS_URL") or f"nats://127.0.0.1:{DEFAULT_PORT}")
    if wanted & established_remote_ports():
        return 0
    print(f"not ready: no established connection to NATS (port {', '.join(map(str, sorted(wanted)))})", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
