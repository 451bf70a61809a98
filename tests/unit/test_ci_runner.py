"""``.ci/test``, the suite's three-phase runner: its reading of pytest's arguments, its phases' selections, and
the image build it hands to the container tests."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import cast

import pytest

from tests.support import marks, phases
from tests.support.docker import PREBUILT, BuiltImages, DockerError, prebuilt_env, prebuilt_images

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def runner() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("ci_test", str(REPO / ".ci" / "test"))
    spec = importlib.util.spec_from_loader("ci_test", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("args", "rest", "expr"),
    [
        ([], [], None),
        (["tests/unit", "-x"], ["tests/unit", "-x"], None),
        (["-m", "slow", "-x"], ["-x"], "slow"),
        (["-mslow"], [], "slow"),
        (["--markexpr=a or b", "tests"], ["tests"], "a or b"),
        (["--markexpr", "a", "-m", "b"], [], "b"),
    ],
)
def test_mark_expressions_are_split_from_the_other_arguments(
    runner: ModuleType, args: list[str], rest: list[str], expr: str | None
) -> None:
    assert runner.split_marks(args) == (rest, expr)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], True),
        (["-x", "-k", "compose"], True),
        (["tests"], True),
        (["tests/containers"], True),
        (["tests/containers/test_images.py::test_remote_image_serves_its_mounted_declaration"], True),
        (["tests/unit", "-x"], False),
        (["tests/unit", "tests/containers/test_compose.py"], True),
    ],
)
def test_images_are_built_ahead_only_when_the_container_tests_may_run(
    runner: ModuleType, args: list[str], expected: bool
) -> None:
    assert runner.runs_containers(args) is expected


def test_the_suite_writes_bytecode_whatever_the_caller_set(runner: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("A2AMESH_TEST_MARKER", "kept")
    env = runner.suite_env()
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert env["A2AMESH_TEST_MARKER"] == "kept"


def test_no_handed_build_means_the_session_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PREBUILT, raising=False)
    assert prebuilt_images() is None


def test_a_handed_build_that_failed_fails_the_test_needing_it_with_its_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PREBUILT, prebuilt_env(error="deploy/build-images exited 2: debootstrap failed"))
    with pytest.raises(DockerError, match="beside its parallel phase failed: deploy/build-images exited 2"):
        prebuilt_images()


def test_a_handed_build_round_trips_its_tag_base_and_time() -> None:
    built = BuiltImages(tag="test-abc", seconds=12.5, base="a2amesh-base:bookworm")
    assert prebuilt_env(built) == '{"tag": "test-abc", "seconds": 12.5, "base": "a2amesh-base:bookworm"}'
    assert built.all() == tuple(
        f"a2amesh-{s}:test-abc" for s in ("agent", "executor", "gateway", "remote", "nats", "valkey")
    )


def test_each_phase_combines_a_mark_expression_with_its_selection(
    runner: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("A2AMESH_TEST_WORKERS", raising=False)  # the defaults, whatever runs this suite
    monkeypatch.delenv("A2AMESH_TEST_LANES", raising=False)
    first, quiet, alone = runner.phases()
    spread = ["--dist", "loadfile", "--no-loadscope-reorder"]  # files in collection order: longest first
    assert first.argv(["tests/unit", "-x"], None) == [
        "-n", runner.WORKERS, *spread, "-m", "not quiet and not alone", "tests/unit", "-x"
    ]  # fmt: skip
    assert quiet.argv([], "slow or fast") == ["-n", runner.LANES, *spread, "-m", "(slow or fast) and (quiet)"]
    assert alone.argv(["-k", "takeover"], None) == ["-m", "alone", "-k", "takeover"]
    assert [p.containers for p in (first, quiet, alone)] == [False, True, False]
    monkeypatch.setenv("A2AMESH_TEST_WORKERS", "3")
    monkeypatch.setenv("A2AMESH_TEST_LANES", "2")
    assert [p.argv([], None)[:2] for p in runner.phases()[:2]] == [["-n", "3"], ["-n", "2"]]


@pytest.mark.parametrize(
    ("codes", "expected"),
    [([0, 0, 0], 0), ([0, 1, 0], 1), ([5, 0, 5], 0), ([5, 5, 5], 5), ([5, 2, 1], 2), ([0, 5, 1], 1)],
)
def test_the_suite_fails_with_the_first_failing_phase(runner: ModuleType, codes: list[int], expected: int) -> None:
    assert runner.outcome(codes) == expected


def collected_marks(*paths: str) -> dict[str, set[str]]:
    """The tests under the paths, each with the names of its markers, as the suite's conftest leaves them."""
    collect = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    proc = subprocess.run(
        [*collect, "-p", marks.__name__, *paths],
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if k != phases.RECORD},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"collection failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr}"
    lines = [line.removeprefix(marks.PREFIX).split(" ") for line in proc.stdout.splitlines()]
    return {nodeid: set(names) for nodeid, *names in (line for line in lines if "::" in line[0])}


def test_the_phases_run_every_test_once(runner: ModuleType) -> None:
    """Over files holding tests of every phase (a quiet folder with an alone case, tests marked alone one by one
    beside parallel ones), each test is selected by exactly one phase's marker expression."""
    paths = ["tests/chaos/test_starvation.py", "tests/process/test_agent_death_defaults.py"]
    tests = collected_marks(*paths)
    phases = runner.phases()
    chosen: dict[str, list[str]] = {}
    for nodeid, names in tests.items():
        has = {"quiet": "quiet" in names, "alone": "alone" in names}  # the selections are and/not of these names
        chosen[nodeid] = [p.selection for p in phases if eval(p.selection, {"__builtins__": {}}, has)]
    assert all(len(selections) == 1 for selections in chosen.values()), chosen
    by_phase = {p.selection: {n for n, s in chosen.items() if s == [p.selection]} for p in phases}
    assert all(by_phase.values()), f"a phase selects nothing here: {by_phase}"
    starving = "tests/chaos/test_starvation.py::test_agent_sigstop_past_its_claim"
    assert f"{starving}[cpu-saturated]" in by_phase["alone"]
    assert f"{starving}[quiet]" in by_phase["quiet"]


def test_a_phase_reports_the_cpu_its_processes_spent(runner: ModuleType) -> None:
    before = runner.children_cpu()
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True, timeout=60)
    spent = runner.children_cpu() - before
    assert spent > 0.05, f"a child that computed for a while counted {spent:.3f}s of CPU"
    assert str(runner.Took(1, 12.4, 20.6)) == "exited 1 in 12s (21s of CPU)"


def session(*args: str, **env: Path) -> None:
    """A pytest session of its own over ``args``, with the variables ``env`` set; it must pass."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=REPO,
        env={**os.environ, **{name: str(value) for name, value in env.items()}},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"pytest {args} exited {proc.returncode}:\n{proc.stdout[-3000:]}{proc.stderr}"


def test_the_parallel_phase_records_which_files_hold_the_later_phases_tests(tmp_path: Path) -> None:
    """A session with ``A2AMESH_TEST_LATER`` set writes the files holding quiet and alone tests (before ``-m``
    deselects them), so the later phases collect those files alone."""
    where = tmp_path / "later"
    starvation, deaths = "tests/chaos/test_starvation.py", "tests/process/test_agent_death_defaults.py"
    session("--collect-only", "-m", "not quiet", starvation, deaths, "tests/unit/test_ids.py", **{phases.RECORD: where})
    assert phases.read(where) == {"quiet": [starvation], "alone": sorted([starvation, deaths])}
    assert phases.read(tmp_path / "nothing") is None


def test_a_later_phase_of_the_whole_suite_collects_only_its_files(runner: ModuleType) -> None:
    parallel, quiet, alone = runner.phases()
    later = {"quiet": ["tests/chaos/test_a.py"], "alone": []}
    assert runner.phase_args(parallel, ["-x"], later) == ["-x"]
    assert runner.phase_args(quiet, ["-x"], later) == ["-x", "tests/chaos/test_a.py"]
    assert runner.phase_args(alone, ["-x"], later) is None, "no file holds an alone test: the phase is skipped"
    assert runner.phase_args(quiet, ["-x"], None) == ["-x"], "nothing recorded: every file"
    assert runner.phase_args(alone, ["tests/unit", "-x"], later) == ["tests/unit", "-x"], "paths given: those"


def test_parallel_sessions_take_the_longest_files_first() -> None:
    root = Path("/repo")
    tests = [("tests/a.py", 1), ("tests/a.py", 2), ("tests/b.py", 1), ("tests/c.py", 1), ("tests/new.py", 1)]
    items = cast(list[pytest.Item], [SimpleNamespace(path=root / name, n=n) for name, n in tests])
    known = {"tests/a.py": 3.0, "tests/b.py": 40.0, "tests/c.py": 1.0}
    ordered = phases.longest_first(items, root, known)
    assert [(str(i.path.relative_to(root)), i.n) for i in ordered] == [  # type: ignore[attr-defined]
        ("tests/b.py", 1),
        ("tests/new.py", 1),  # unknown: an average file (14.7 s)
        ("tests/a.py", 1),
        ("tests/a.py", 2),
        ("tests/c.py", 1),
    ]


def test_a_session_records_each_files_seconds_and_the_records_add_up(tmp_path: Path) -> None:
    where = tmp_path / "times"
    session("tests/unit/test_ids.py", **{phases.TIMES: where})
    (tmp_path / "times.1").write_text(json.dumps({"tests/unit/test_ids.py": 2.0, "tests/other.py": 0.31}))
    merged = phases.merge_times(where)
    assert set(merged) == {"tests/unit/test_ids.py", "tests/other.py"}
    assert merged["tests/unit/test_ids.py"] > 2.0, "this session's own seconds add to the other record's"
    assert merged["tests/other.py"] == 0.3
