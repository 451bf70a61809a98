"""The Docker CLI for container tests: checked commands (sync for fixtures, async for tests) and the image build."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SERVICES = ("agent", "executor", "gateway", "remote")
SERVERS = ("nats", "valkey")
"""The images deploy/build-images --servers adds: NATS and Valkey from their wheels, for docker-compose.yml."""
LOCAL_BASE = "a2amesh-base:bookworm"


class DockerError(AssertionError):
    """A docker command failed: the command, its exit code and what it printed."""


def docker(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``docker ARGS`` (bounded); raise :class:`DockerError` with its output when it fails and ``check``."""
    try:
        done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise DockerError("the docker CLI is not installed (.ci/install-docker installs docker.io)") from None
    except subprocess.TimeoutExpired:
        raise DockerError(f"docker {' '.join(args)} did not finish within {timeout:g}s") from None
    if check and done.returncode != 0:
        raise DockerError(f"docker {' '.join(args)} exited {done.returncode}: {(done.stderr or done.stdout).strip()}")
    return done


async def adocker(*args: str, timeout: float = 60) -> tuple[int, str]:
    """``docker ARGS`` from a test (bounded, off the event loop's thread); its exit code and combined output."""
    return await _run("docker", *args, timeout=timeout)


async def _run(*command: str, timeout: float, env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise DockerError(f"{' '.join(command)} did not finish within {timeout:g}s") from None
    return proc.returncode or 0, out.decode(errors="replace")


def inspect(name: str) -> dict[str, Any]:
    """``docker inspect`` of one container or image."""
    data: list[dict[str, Any]] = json.loads(docker("inspect", name).stdout)
    return data[0]


async def ainspect(name: str) -> dict[str, Any]:
    code, out = await adocker("inspect", name)
    if code != 0:
        raise DockerError(f"docker inspect {name} exited {code}: {out.strip()}")
    data: list[dict[str, Any]] = json.loads(out)
    return data[0]


def require_engine() -> None:
    """Fail (never skip) with what to do when no Docker engine answers."""
    done = docker("info", "--format", "{{.ServerVersion}}", timeout=30, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        raise DockerError(
            "tests/containers need a running Docker engine, and `docker info` failed: "
            f"{(done.stderr or done.stdout).strip()[:300]} (run .ci/install-docker as root to install and start one)"
        )


@dataclass(frozen=True)
class BuiltImages:
    """The images a session built (or found built by ``.ci/test``), and how long ``deploy/build-images`` took."""

    tag: str
    seconds: float
    base: str
    prebuilt: bool = False
    """Built by ``.ci/test`` beside its parallel phase, before this session started."""

    def image(self, service: str) -> str:
        return f"a2amesh-{service}:{self.tag}"

    @property
    def origin(self) -> str:
        """Where they were built, for the reports."""
        return "beside .ci/test's parallel phase" if self.prebuilt else "in this session"

    def all(self) -> tuple[str, ...]:
        """Every image built: the services' and the servers'."""
        return tuple(self.image(s) for s in (*SERVICES, *SERVERS))


PREBUILT = "A2AMESH_TEST_IMAGES"
"""The variable through which ``.ci/test`` hands its image build to the quiet phase: the JSON of
:func:`prebuilt_env`."""


def prebuilt_env(built: BuiltImages | None = None, error: str | None = None) -> str:
    """The value of ``A2AMESH_TEST_IMAGES`` for a build that succeeded (``built``) or failed (``error``)."""
    if built is not None:
        return json.dumps({"tag": built.tag, "seconds": built.seconds, "base": built.base})
    return json.dumps({"error": error or "the build failed"})


def prebuilt_images() -> BuiltImages | None:
    """The images ``.ci/test`` built before this session (``A2AMESH_TEST_IMAGES``), or None when it did not; a
    build it tried that failed raises its :class:`DockerError` here, in the test that needs the images."""
    raw = os.environ.get(PREBUILT)
    if not raw:
        return None
    found = json.loads(raw)
    if "error" in found:
        raise DockerError(f"the image build .ci/test ran beside its parallel phase failed: {found['error']}")
    built = BuiltImages(tag=found["tag"], seconds=found["seconds"], base=found["base"], prebuilt=True)
    for image in built.all():
        if docker("image", "inspect", image, check=False).returncode != 0:
            raise DockerError(f"{PREBUILT} names {image}, which the Docker engine does not have")
    return built


def build_images(tag: str, *, niceness: int = 0) -> BuiltImages:
    """Run ``deploy/build-images --servers`` once: with ``A2AMESH_DOCKER_BASE`` as the base when set (e.g.
    python:3.11-slim where Docker Hub is reachable), else on the local debootstrap base with a wheelhouse (no
    Docker Hub here). ``niceness`` lowers the script's priority (not the engine's build steps)."""
    base = os.environ.get("A2AMESH_DOCKER_BASE", "")
    args = ["--servers", *(["--base", base] if base else ["--local-base", "--wheelhouse"])]
    nice = ["nice", "-n", str(niceness)] if niceness else []
    start = time.monotonic()
    try:
        done = subprocess.run(
            [*nice, str(REPO / "deploy" / "build-images"), *args, "--tag", tag],
            capture_output=True,
            text=True,
            timeout=1500,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise DockerError("deploy/build-images did not finish within 1500s") from None
    if done.returncode != 0:
        raise DockerError(f"deploy/build-images {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return BuiltImages(tag=tag, seconds=time.monotonic() - start, base=base or LOCAL_BASE)


@dataclass(frozen=True)
class Compose:
    """``docker-compose`` (v1, Debian's 1.29) on the repository's compose files, as one project with its own
    environment (image names, host ports, the gateway key)."""

    project: str
    files: tuple[Path, ...]
    env: dict[str, str]

    async def run(self, *args: str, timeout: float = 120, check: bool = True) -> str:
        """``docker-compose -p PROJECT -f FILE… ARGS``; its output; :class:`DockerError` when it exits non-zero and
        ``check``."""
        files = [arg for f in self.files for arg in ("-f", str(f))]
        command = ("docker-compose", "--ansi", "never", "-p", self.project, *files, *args)
        try:
            code, out = await _run(*command, timeout=timeout, env={**os.environ, **self.env})
        except FileNotFoundError:
            raise DockerError("docker-compose is not installed (.ci/install-docker installs it)") from None
        if check and code != 0:
            raise DockerError(f"docker-compose {' '.join(args)} exited {code}:\n{out[-3000:]}")
        return out

    async def volumes(self) -> list[str]:
        """Names of the project's volumes."""
        code, out = await adocker("volume", "ls", "-q", "--filter", f"label=com.docker.compose.project={self.project}")
        if code != 0:
            raise DockerError(f"docker volume ls exited {code}: {out.strip()}")
        return sorted(out.split())

    async def containers(self, service: str | None = None) -> list[str]:
        """Names of the project's containers (of one service), running or not, sorted."""
        filters = ["--filter", f"label=com.docker.compose.project={self.project}"]
        if service is not None:
            filters += ["--filter", f"label=com.docker.compose.service={service}"]
        code, out = await adocker("ps", "-a", *filters, "--format", "{{.Names}}")
        if code != 0:
            raise DockerError(f"docker ps exited {code}: {out.strip()}")
        return sorted(out.split())
