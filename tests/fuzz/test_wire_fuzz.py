"""The wire fuzzer of issue 28: hostile messages to an agent's and a workflow's request and control subjects.

Each target gets one campaign (tests/fuzz/harness.py): a real mesh in a fresh namespace, a few hundred
hostile messages (tests/fuzz/hostile.py: the fixed cases of the issue, then deterministic hypothesis
draws) interleaved with valid calls, sent by an outside caller on raw ``nats``. Each test below asserts one
property over what the campaign observed, and lists every violation with what was sent and what came back.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fuzz import properties
from tests.fuzz.harness import Report, run
from tests.support.servers import MeshServers


@pytest.fixture(scope="module", params=["agent", "workflow"])
def campaign(request: pytest.FixtureRequest, servers: MeshServers, tmp_path_factory: pytest.TempPathFactory) -> Report:
    return run(request.param, servers, Path(tmp_path_factory.mktemp("fuzz")))


def check(report: Report, prop: Callable[[Report], list[str]], what: str) -> None:
    violations = prop(report)
    assert not violations, f"{report.target} {report.name} (namespace {report.namespace}): {what}\n" + properties.shown(
        violations
    )


def test_campaign_ran(campaign: Report) -> None:
    """The harness itself worked: it sent its cases, the valid calls ran, and the mesh's logs reached it."""
    assert len(campaign.sent) >= 150, f"only {len(campaign.sent)} messages were sent"
    assert sum(1 for s in campaign.sent if s.spec.valid) >= 20
    events = {e.event for e in campaign.logs}
    assert "agent.ready" in events, "the log capture saw no agent.ready: tracebacks would go unseen"
    assert not [s for s in campaign.sent if s.send_error and s.spec.target != "work"], "a control publish failed"


def test_every_valid_reply_subject_answered_once(campaign: Report) -> None:
    """Every message that carried a valid reply subject gets exactly one well-formed JSON-RPC answer in time."""
    check(campaign, properties.unanswered, "messages not answered exactly once with a well-formed answer")


def test_nothing_published_to_an_invalid_reply_subject(campaign: Report) -> None:
    """A message with an invalid A2A-Reply-To is answered nowhere: no reply lands on a bad subject."""
    check(campaign, properties.strays, "replies published where none may go")


def test_no_internal_error_for_caller_mistakes(campaign: Report) -> None:
    """No hostile input is answered -32603: each is the caller's mistake and deserves a precise error."""
    check(campaign, properties.internal_errors, "-32603 answers to input the caller got wrong")


def test_errors_named_by_the_protocol(campaign: Report) -> None:
    """Where docs/protocol.md names the error for an input (-32700, -32601, -32009, -32001 …), it is that one."""
    check(campaign, properties.wrong_codes, "answers other than the protocol's")


def test_valid_calls_complete(campaign: Report) -> None:
    """Every valid call interleaved with the hostile traffic completes with the right result."""
    check(campaign, properties.failed_valid_calls, "valid calls that did not complete correctly")


def test_no_crash_or_traceback(campaign: Report) -> None:
    """No worker crash, no traceback and no error-level event in the logs; every service still runs."""
    check(campaign, properties.crashes, "crashes and tracebacks in the logs")


def test_work_consumer_drains(campaign: Report) -> None:
    """After the traffic the work consumer holds nothing pending, unacked or redelivering (within the bound)."""
    check(campaign, properties.undrained, "messages left on the work consumer")


def test_no_log_line_repeats_after_quiescence(campaign: Report) -> None:
    """Once the traffic stopped and the consumer drained, no log line repeats without end."""
    check(campaign, properties.endless_lines, "log lines repeating after the traffic stopped")
