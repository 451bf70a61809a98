"""``.ci/test``, the suite's two-phase runner: its reading of pytest's arguments, and the image build it hands to
the container tests."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.docker import PREBUILT, BuiltImages, DockerError, prebuilt_env, prebuilt_images

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def runner() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("ci_test", str(REPO / ".ci" / "test"))
    spec = importlib.util.spec_from_loader("ci_test", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
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
