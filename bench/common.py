"""What every benchmark shares: servers, agent processes, machine facts, statistics, the table, the JSON file.

A benchmark module exposes a :class:`Section` (a name and an async ``run(ctx)`` returning
:class:`Figure` rows). ``run_all.py`` runs a list of them on one pair of servers, prints one table and
writes one JSON file; each module can also be run on its own (``python bench/floors.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import gc
import importlib.metadata
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from a2amesh import logs
from a2amesh.agent.definition import load_agent_file
from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import init_mesh
from a2amesh.bus.subjects import Subjects
from a2amesh.config import Settings
from a2amesh.eventloop import tune_gc
from a2amesh.registry import Registry
from a2amesh.servers import NatsServer, ValkeyServer, free_port, nats_server_binary

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "bench" / "results"
SAM_CALIB = REPO.parent / "shared" / "bench" / "sam" / "calib.py"
JS_SYNC_DEFAULT = "2m (nats-server default: fsync every 2 min, no fsync per message; writes sit in the page cache)"


# statistics -----------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) with linear interpolation between order statistics (numpy's default)."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass
class Stats:
    """Summary of a list of samples (milliseconds unless the figure says otherwise)."""

    n: int
    p50: float
    p90: float
    p99: float
    mean: float
    min: float
    max: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> Stats:
        """Summarise ``samples``."""
        if not samples:
            return cls(0, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan)
        return cls(
            n=len(samples),
            p50=percentile(samples, 50),
            p90=percentile(samples, 90),
            p99=percentile(samples, 99),
            mean=sum(samples) / len(samples),
            min=min(samples),
            max=max(samples),
        )


@dataclass
class Figure:
    """One row of the results table.

    ``key`` is stable across runs (``section.figure``) so later runs and other sections can find it;
    ``value`` is the median (or the single measured value), ``p99`` is None for rates and counts.
    """

    key: str
    label: str
    value: float
    unit: str
    p99: float | None = None
    n: int | None = None
    note: str = ""
    stats: Stats | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_samples(cls, key: str, label: str, samples: Sequence[float], unit: str = "ms", note: str = "") -> Figure:
        """A figure whose value is the median of ``samples`` and whose p99 is theirs."""
        st = Stats.of(samples)
        return cls(key=key, label=label, value=st.p50, unit=unit, p99=st.p99, n=st.n, note=note, stats=st)


def ms_since(t0: float) -> float:
    """Milliseconds elapsed since the ``time.perf_counter()`` value ``t0``."""
    return (time.perf_counter() - t0) * 1000


def ratio(a: float, b: float) -> str:
    """``a / b`` as ``"3.2x"`` (or ``"n/a"``)."""
    if not b or math.isnan(a) or math.isnan(b):
        return "n/a"
    return f"{a / b:.1f}x"


# processes ------------------------------------------------------------------------------------------


def stat_cpu_seconds(stat: Path) -> float | None:
    """User + system CPU seconds from a ``/proc`` stat file (a process's, or one of its threads' under
    ``task/``), or None when it is gone."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # fields[11], fields[12] are utime, stime (fields 14 and 15 of proc(5), counted from the state field)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a process has used so far (Linux ``/proc``), or None."""
    return stat_cpu_seconds(Path(f"/proc/{pid}/stat"))


def rss_mb(pid: int) -> float | None:
    """Resident set size of a process in MiB (Linux ``/proc``), or None."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


@dataclass
class Child:
    """A process started by a benchmark, with its output in a log file."""

    label: str
    proc: asyncio.subprocess.Process
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tail(self, lines: int = 15) -> str:
        """The last lines of its output."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    async def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, wait, then SIGKILL; always reaps the process."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()


# servers --------------------------------------------------------------------------------------------


class MonitoredNatsServer(NatsServer):
    """The embedded nats-server plus its HTTP monitor on 127.0.0.1, so /varz can tell the JetStream sync setting."""

    def __init__(self, *, data_dir: Path, sync_interval: str | None = None) -> None:
        super().__init__(data_dir=data_dir, sync_interval=sync_interval)
        self.http_port = free_port()

    def _argv(self) -> list[str]:
        return [*super()._argv(), "-m", str(self.http_port)]

    def _choose_ports(self) -> None:
        super()._choose_ports()
        self.http_port = free_port()

    @property
    def monitor_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"


@dataclass
class Servers:
    """The NATS and Redis a run uses: embedded (started here) or external (NATS_URL / REDIS_URL)."""

    nats_url: str
    redis_url: str
    nats: MonitoredNatsServer | None = None
    valkey: ValkeyServer | None = None
    monitor_url: str | None = None

    def pids(self) -> dict[str, int]:
        """Process ids of the embedded servers (for CPU accounting)."""
        out = {}
        if self.nats is not None and self.nats.pid is not None:
            out["nats-server"] = self.nats.pid
        if self.valkey is not None and self.valkey.pid is not None:
            out["valkey-server"] = self.valkey.pid
        return out


@contextlib.asynccontextmanager
async def servers(tmp: Path, *, sync_interval: str | None = None) -> AsyncIterator[Servers]:
    """Start embedded NATS (JetStream, file store under ``tmp``) and Valkey, unless NATS_URL / REDIS_URL are set."""
    nats_url = os.environ.get("NATS_URL", "")
    redis_url = os.environ.get("REDIS_URL", "")
    nats = valkey = None
    try:
        if not nats_url:
            nats = MonitoredNatsServer(data_dir=tmp / "nats", sync_interval=sync_interval)
            await nats.start()
            nats_url = nats.url
        if not redis_url:
            valkey = ValkeyServer(data_dir=tmp / "valkey")
            await valkey.start()
            redis_url = valkey.url
        monitor = nats.monitor_url if nats else os.environ.get("NATS_MONITOR_URL")
        yield Servers(nats_url, redis_url, nats, valkey, monitor)
    finally:
        if valkey is not None:
            await valkey.stop()
        if nats is not None:
            await nats.stop()


# machine facts --------------------------------------------------------------------------------------


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _mem_gib() -> float | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    return None


def _fs_type(path: Path) -> str | None:
    best, kind = "", None
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) > 2 and str(path).startswith(parts[1]) and len(parts[1]) > len(best):
                best, kind = parts[1], parts[2]
    return kind


def _version(pkg: str) -> str | None:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return None


def _run(argv: list[str], timeout: float = 10) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _duration_ns(ns: int) -> str:
    s = ns / 1e9
    return f"{s / 60:g}m" if s >= 60 and s % 60 == 0 else f"{s:g}s"


def jetstream_sync(monitor_url: str | None, configured: str | None) -> dict[str, Any]:
    """The JetStream sync setting in force, read from the server's /varz when a monitor URL is known."""
    if monitor_url:
        try:
            with urllib.request.urlopen(f"{monitor_url}/varz", timeout=5) as r:
                varz = json.loads(r.read())
            cfg = (varz.get("jetstream") or {}).get("config") or {}
            if cfg.get("sync_always"):
                return {
                    "setting": "always (fsync after every write)",
                    "source": "/varz",
                    "version": varz.get("version"),
                }
            ns = cfg.get("sync_interval")
            text = _duration_ns(int(ns)) if ns else "2m"
            if text == "2m":
                text = JS_SYNC_DEFAULT
            return {"setting": text, "source": "/varz", "version": varz.get("version")}
        except (OSError, ValueError) as e:
            return {"setting": configured or JS_SYNC_DEFAULT, "source": f"configured (/varz failed: {e})"}
    if configured:
        return {"setting": configured, "source": "configured"}
    return {"setting": "unknown (external server; set NATS_MONITOR_URL to read /varz)", "source": "none"}


async def redis_facts(redis_url: str) -> dict[str, Any]:
    """Server version and persistence settings of the Redis/Valkey in use."""
    import redis.asyncio as aioredis

    r = aioredis.from_url(redis_url, decode_responses=True)
    try:
        info = await r.info("server")
        facts: dict[str, Any] = {
            "server": "valkey" if "valkey_version" in info else "redis",
            "version": info.get("valkey_version") or info.get("redis_version"),
        }
        with contextlib.suppress(Exception):
            for name in ("appendonly", "appendfsync"):
                facts[name] = (await r.config_get(name)).get(name)
        return facts
    finally:
        await r.aclose()


async def settle(redis_url: str, timeout: float = 60.0) -> float:
    """Wait until Valkey has no background save or AOF rewrite running (a heavy section can leave one that
    would take a core from the next); returns the seconds waited."""
    import redis.asyncio as aioredis

    r = aioredis.from_url(redis_url, decode_responses=True)
    t0 = time.perf_counter()
    try:
        while time.perf_counter() - t0 < timeout:
            info = await r.info("persistence")
            busy = ("aof_rewrite_in_progress", "aof_rewrite_scheduled", "rdb_bgsave_in_progress")
            if not any(int(info.get(k, 0) or 0) for k in busy):
                break
            await asyncio.sleep(0.2)
    finally:
        await r.aclose()
    return time.perf_counter() - t0


def calibration() -> dict[str, Any] | None:
    """SAM's fixed pure-Python workload (``shared/bench/sam/calib.py``), to normalise figures taken at other times."""
    if not SAM_CALIB.is_file():
        return None
    out = _run([sys.executable, str(SAM_CALIB)], timeout=60)
    with contextlib.suppress(ValueError):
        return dict(json.loads(out))
    return None


async def machine_info(srv: Servers, *, sync_interval: str | None, calibrate: bool) -> dict[str, Any]:
    """CPU, cores, memory, Python, server versions and durability settings, package versions, git commit."""
    nats_version = _run([nats_server_binary(), "--version"]) if srv.nats else ""
    info: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "mem_gib": _mem_gib(),
        "loadavg": list(os.getloadavg()),
        "os": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "nats_url": srv.nats_url,
        "redis_url": srv.redis_url.split("@")[-1],
        "nats_server": nats_version.removeprefix("nats-server: ") or None,
        "jetstream_sync": jetstream_sync(srv.monitor_url, sync_interval),
        "jetstream_store_fs": _fs_type(srv.nats.data_dir) if srv.nats else None,
        "redis": await redis_facts(srv.redis_url),
        "packages": {p: _version(p) for p in ("a2amesh", "nats-py", "redis", "pydantic", "celery", "langgraph")},
        "git": {
            "commit": _run(["git", "rev-parse", "--short", "HEAD"]) or None,
            "dirty": bool(_run(["git", "status", "--porcelain", "--untracked-files=no"])),
        },
    }
    if info["jetstream_sync"].get("version") and not info["nats_server"]:
        info["nats_server"] = "v" + str(info["jetstream_sync"]["version"])
    if calibrate:
        info["calib_sam_ms"] = calibration()
    return info


def describe_machine(info: dict[str, Any]) -> str:
    """Two human lines about the machine and the servers' durability settings."""
    r = info.get("redis") or {}
    calib = info.get("calib_sam_ms")
    return (
        f"{info['cpu']}, {info['cores']} cores, {info.get('mem_gib')} GiB, {info['python']}, "
        f"load {info['loadavg'][0]:.2f}\n"
        f"nats-server {info.get('nats_server') or '?'} — JetStream sync: {info['jetstream_sync']['setting']}"
        f" (store on {info.get('jetstream_store_fs') or '?'}); "
        f"{r.get('server', 'redis')} {r.get('version', '?')} appendonly={r.get('appendonly', '?')}"
        f" appendfsync={r.get('appendfsync', '?')}"
        + (f"\nCPU calibration (shared/bench/sam/calib.py): {calib['median_ms']:.1f} ms" if calib else "")
    )


# the context a section runs in ----------------------------------------------------------------------


@dataclass
class BenchContext:
    """What a section gets: the servers, the mode, a scratch folder, and the figures measured so far."""

    srv: Servers
    quick: bool
    tmp: Path
    figures: list[Figure] = field(default_factory=list)
    children: list[Child] = field(default_factory=list)

    def scale(self, full: int, quick: int) -> int:
        """An iteration count for the current mode."""
        return quick if self.quick else full

    def figure(self, key: str) -> Figure | None:
        """A figure measured earlier in this run."""
        return next((f for f in self.figures if f.key == key), None)

    def new_namespace(self, prefix: str = "bench") -> str:
        """A fresh namespace, so nothing is shared with another run or an external server's other users."""
        return f"{prefix}{uuid.uuid4().hex[:8]}"

    def settings(self, namespace: str) -> Settings:
        """Production (default profile) settings on this run's servers."""
        return Settings.load(environ={}, nats_url=self.srv.nats_url, redis_url=self.srv.redis_url, namespace=namespace)

    def child_env(self, namespace: str, **extra: str) -> dict[str, str]:
        """The environment of a child process that joins the run's mesh in ``namespace``."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("A2AMESH_", "NATS_", "REDIS_"))}
        env.update(
            {
                "NATS_URL": self.srv.nats_url,
                "REDIS_URL": self.srv.redis_url,
                "A2AMESH_NAMESPACE": namespace,
                "A2AMESH_PROFILE": "default",
                "A2AMESH_LOG_FORMAT": "json",
                "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")])),
            }
        )
        env.update(extra)
        return env

    async def spawn(self, label: str, argv: list[str], env: dict[str, str]) -> Child:
        """Start a child process (own session, output to a log file); it is stopped when the run ends."""
        log_path = self.tmp / f"{label}.log"
        out = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, env=env, cwd=str(REPO), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        finally:
            os.close(out)
        child = Child(label, proc, log_path)
        self.children.append(child)
        return child

    async def spawn_agent(self, yaml_file: Path, namespace: str, timeout: float = 60.0) -> tuple[Child, float]:
        """Start ``python -m a2amesh agent FILE`` and wait for its card; returns the child and its boot seconds."""
        name = load_agent_file(yaml_file).name
        settings = self.settings(namespace)
        bus = await Bus.connect(settings, name="bench-wait")
        try:
            await init_mesh(bus, settings)  # what `a2amesh up` does before it starts agents
            registry = Registry(bus, card_ttl=settings.card_ttl)
            await registry.start()
            try:
                t0 = time.perf_counter()
                child = await self.spawn(
                    f"agent-{name}-{namespace}",
                    [sys.executable, "-m", "a2amesh", "agent", str(yaml_file)],
                    self.child_env(namespace),
                )
                waiter = asyncio.ensure_future(registry.wait_for(name, timeout))
                exited = asyncio.ensure_future(child.proc.wait())
                await asyncio.wait({waiter, exited}, return_when=asyncio.FIRST_COMPLETED)
                exited.cancel()
                if not waiter.done():
                    waiter.cancel()
                    raise RuntimeError(
                        f"agent {name} exited ({child.proc.returncode}) before its card:\n{child.tail()}"
                    )
                try:
                    waiter.result()
                except TimeoutError as e:
                    raise RuntimeError(f"agent {name} published no card within {timeout:g}s:\n{child.tail()}") from e
            finally:
                await registry.stop()
        finally:
            await bus.close()
        return child, time.perf_counter() - t0

    async def stop_children(self) -> None:
        """Stop every child this context started."""
        await asyncio.gather(*(c.stop() for c in self.children), return_exceptions=True)
        self.children.clear()


async def drop_namespace(ctx: BenchContext, namespace: str, *, extra_streams: Sequence[str] = ()) -> None:
    """Delete a namespace's streams, buckets and Redis keys (only matters on external servers)."""
    s = Subjects(namespace)
    bus = await Bus.connect(ctx.settings(namespace), name="bench-cleanup")
    try:
        names = [s.tasks_stream, s.replies_stream, s.events_stream, *extra_streams]
        names += [f"KV_{s.cards_bucket}", f"KV_{s.presence_bucket}"]
        for name in names:
            with contextlib.suppress(Exception):
                await bus.jsm.delete_stream(name)
    finally:
        await bus.close()
    import redis.asyncio as aioredis

    r = aioredis.from_url(ctx.srv.redis_url)
    try:
        batch = [k async for k in r.scan_iter(match=f"{namespace}:*", count=1000)]
        for i in range(0, len(batch), 500):
            await r.delete(*batch[i : i + 500])
    finally:
        await r.aclose()


# sections, the table, the results file --------------------------------------------------------------


@dataclass(frozen=True)
class Section:
    """One benchmark module: ``run(ctx)`` measures and returns its rows."""

    name: str
    title: str
    run: Callable[[BenchContext], Awaitable[list[Figure]]]
    latency: bool = False
    """Timed call by call: the bench process's own garbage collector is paused meanwhile (as ``timeit``
    does), since the bench is the caller, not the system measured, and a collection of its heap lands in
    whatever call is being timed."""


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "—"
    if math.isnan(v):
        return "n/a"
    if unit in ("calls/s", "nodes/s", "MiB", "s"):
        return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def format_table(figures: Sequence[Figure]) -> str:
    """A plain-text table: section, figure, median, p99, unit, samples, note."""
    header = ("section", "figure", "median", "p99", "unit", "n", "note")
    rows = [
        (f.key.split(".", 1)[0], f.label, _fmt(f.value, f.unit), _fmt(f.p99, f.unit), f.unit, str(f.n or ""), f.note)
        for f in figures
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    right = {2, 3, 5}

    def line(r: Sequence[str]) -> str:
        cells = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r)]
        return "  ".join(cells).rstrip()

    sep = "  ".join("-" * w for w in widths)
    out, last = [line(header), sep], None
    for f, r in zip(figures, rows, strict=True):
        section = f.key.split(".", 1)[0]
        if last is not None and section != last:
            out.append("")
        last = section
        out.append(line(r))
    return "\n".join(out)


def write_results(name: str, payload: dict[str, Any], directory: Path = RESULTS_DIR) -> Path:
    """Write ``{directory}/{name}-{timestamp}.json``; returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = directory / f"{name}-{stamp}.json"
    n = 1
    while path.exists():
        n += 1
        path = directory / f"{name}-{stamp}-{n}.json"
    path.write_text(json.dumps(payload, indent=2, default=_json_default) + "\n")
    return path


def _json_default(o: Any) -> Any:
    if isinstance(o, float) and math.isnan(o):
        return None
    if hasattr(o, "__dataclass_fields__"):
        return asdict(o)
    return str(o)


def _nan_to_none(o: Any) -> Any:
    if isinstance(o, float) and (math.isnan(o) or math.isinf(o)):
        return None
    if isinstance(o, dict):
        return {k: _nan_to_none(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_nan_to_none(v) for v in o]
    return o


def parse_args(description: str, argv: Sequence[str] | None, section_names: Sequence[str]) -> argparse.Namespace:
    """The options every bench entry point takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="smoke mode: few iterations, smallest sizes (seconds)")
    if len(section_names) > 1:
        p.add_argument("--only", default="", help=f"comma-separated sections to run (of: {', '.join(section_names)})")
    p.add_argument(
        "--js-sync",
        default=None,
        metavar="INTERVAL",
        help="JetStream sync_interval of the embedded nats-server ('always', '1s', …); default: the server's (2m)",
    )
    p.add_argument("--no-calib", action="store_true", help="skip the SAM CPU calibration workload")
    p.add_argument("--out", type=Path, default=RESULTS_DIR, help="folder of the results JSON")
    p.add_argument("--name", default=None, help="results file name prefix")
    return p.parse_args(argv)


async def run_sections(sections: Sequence[Section], args: argparse.Namespace, name: str) -> int:
    """Run ``sections`` on one pair of servers, print the table, write the JSON; returns the exit code."""
    only = {s.strip() for s in getattr(args, "only", "").split(",") if s.strip()}
    unknown = only - {s.name for s in sections}
    if unknown:
        print(f"bench: unknown section(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    chosen = [s for s in sections if not only or s.name in only]
    started = dt.datetime.now(dt.UTC)
    tmp = Path(tempfile.mkdtemp(prefix="a2amesh-bench-"))
    errors: dict[str, str] = {}
    try:
        async with servers(tmp, sync_interval=args.js_sync) as srv:
            machine = await machine_info(srv, sync_interval=args.js_sync, calibrate=not (args.quick or args.no_calib))
            print(f"a2amesh bench{' (quick)' if args.quick else ''} — {started:%Y-%m-%d %H:%M} UTC")
            print(describe_machine(machine), flush=True)
            ctx = BenchContext(srv=srv, quick=args.quick, tmp=tmp)
            for section in chosen:
                print(f"\n… {section.title}", flush=True)
                gc.collect()
                tune_gc()  # the library's collector tuning, with what is alive now frozen out of collections
                if section.latency:
                    gc.disable()
                t0 = time.perf_counter()
                try:
                    got = await section.run(ctx)
                    ctx.figures.extend(got)
                except Exception as e:
                    errors[section.name] = f"{type(e).__name__}: {e}"
                    traceback.print_exc()
                    print(f"!!! section {section.name} failed: {errors[section.name]}", file=sys.stderr, flush=True)
                finally:
                    gc.enable()
                    await ctx.stop_children()
                waited = await settle(srv.redis_url)
                print(f"  ({time.perf_counter() - t0:.1f}s)", flush=True)
                if waited >= 0.2:
                    print(f"  (then {waited:.1f}s waiting for Valkey's background rewrite to end)", flush=True)
            if not args.quick and not args.no_calib:
                machine["calib_sam_ms_after"] = calibration()
            machine["loadavg_after"] = list(os.getloadavg())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    table = format_table(ctx.figures)
    print()
    print(table)
    payload = {
        "name": name,
        "started": started.isoformat(),
        "finished": dt.datetime.now(dt.UTC).isoformat(),
        "quick": args.quick,
        "argv": sys.argv,
        "sections": [s.name for s in chosen],
        "machine": machine,
        "figures": [asdict(f) for f in ctx.figures],
        "errors": errors,
        "table": table,
    }
    path = write_results(args.name or name, _nan_to_none(payload), args.out)
    print(f"\nresults: {path}")
    if errors:
        print(f"failed sections: {', '.join(errors)}", file=sys.stderr)
        return 1
    return 0


def main(sections: Sequence[Section], name: str, description: str, argv: Sequence[str] | None = None) -> int:
    """Entry point of a bench script."""
    args = parse_args(description, argv, [s.name for s in sections])
    logs.configure("WARNING", "console")  # the library's INFO events would interleave with the table
    return asyncio.run(run_sections(sections, args, name))
