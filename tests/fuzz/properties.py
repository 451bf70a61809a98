"""The properties of issue 28, each a function from a campaign's :class:`Report` to its violations (readable lines)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from a2amesh.protocol import codes
from tests.fuzz.harness import ANSWER_BOUND, REPEAT_LIMIT, Answer, Report, Sent, crash_events
from tests.fuzz.hostile import UNCHECKED

MAX_SHOWN = 25


def shown(lines: list[str]) -> str:
    more = f"\n… and {len(lines) - MAX_SHOWN} more" if len(lines) > MAX_SHOWN else ""
    return "\n".join(f"- {line}" for line in lines[:MAX_SHOWN]) + more


def brief(answer: Answer, limit: int = 300) -> str:
    text = answer.data.decode("utf-8", "backslashreplace")
    text = text if len(text) <= limit else f"{text[:limit]}… ({len(answer.data):,} bytes)"
    final = " [final]" if answer.final else ""
    return f"on {answer.subject}{final}: {text}"


def error_of(answer: Answer) -> dict[str, Any] | None:
    body = answer.json()
    err = body.get("error") if isinstance(body, dict) else None
    return err if isinstance(err, dict) else None


def final_answers(sent: Sent) -> list[Answer]:
    """The final answers of a message as its requester counts them (docs/protocol.md §5: it keeps the highest
    ``A2A-Attempt``): a final re-published for a redelivered request, with a higher attempt and the same
    answer (id, task and state, or error code), is that answer again, not a second one."""
    if sent.spec.target == "control":
        return sent.answers
    kept: list[Answer] = []
    for answer in (a for a in sent.answers if a.final):
        if kept and _attempt(answer) > _attempt(kept[0]) and _gist(answer) == _gist(kept[0]):
            continue
        kept.append(answer)
    return kept


def _attempt(answer: Answer) -> int:
    raw = answer.headers.get("A2A-Attempt", "")
    return int(raw) if raw.isdigit() else 0


def _gist(answer: Answer) -> tuple[Any, ...]:
    """What a re-published final must repeat: the id, and the task's id and state (or the error's code)."""
    body = answer.json()
    if not isinstance(body, dict):
        return (answer.data,)
    err = body.get("error")
    if isinstance(err, dict):
        return (body.get("id"), "error", err.get("code"))
    result = body.get("result")
    result = result if isinstance(result, dict) else {}
    task = result.get("task") or result.get("statusUpdate") or {}
    task = task if isinstance(task, dict) else {}
    status = task.get("status")
    state = status.get("state") if isinstance(status, dict) else None
    return (body.get("id"), task.get("id") or task.get("taskId"), state)


def unread(body: dict[str, Any]) -> bool:
    """An error answered with id null for a body that was refused unread (JSON-RPC 2.0 §5: the id could not
    be detected): a parse error, or a body over the size limit."""
    err = body.get("error")
    if body.get("id") is not None or not isinstance(err, dict):
        return False
    reasons = [d.get("reason") for d in err.get("data") or [] if isinstance(d, dict)]
    return err.get("code") == codes.PARSE_ERROR or "PAYLOAD_TOO_LARGE" in reasons


def malformed(answer: Answer, sent: Sent, name: str) -> str | None:
    """Why ``answer`` is not a well-formed JSON-RPC 2.0 response to ``sent`` (None when it is)."""
    body = answer.json()
    if not isinstance(body, dict):
        return "not a JSON object"
    if body.get("jsonrpc") != "2.0":
        return f"jsonrpc is {body.get('jsonrpc')!r}"
    if ("result" in body) == ("error" in body):
        return "must hold exactly one of result / error"
    if "error" in body:
        err = body["error"]
        if not (isinstance(err, dict) and type(err.get("code")) is int and isinstance(err.get("message"), str)):
            return f"error is not {{code: int, message: str}}: {err!r}"
    if "id" not in body:
        return "no id"
    expect = sent.spec.expect_id
    if expect != UNCHECKED and sent.spec.target != "subscribe" and body["id"] != expect and not unread(body):
        return f"id {body['id']!r} does not echo the request's id {expect!r}"
    if answer.headers.get("A2A-Agent") != name:
        return f"A2A-Agent is {answer.headers.get('A2A-Agent')!r}, not {name!r}"
    return None


def unanswered(report: Report) -> list[str]:
    """Each message with a valid reply subject gets exactly one well-formed answer within the bound."""
    out = []
    for s in report.sent:
        if s.expected == "none":
            continue
        finals = final_answers(s)
        in_time = [a for a in finals if a.at <= s.waited_until]
        if s.expected == "one" and not in_time:
            late = f" (one came {finals[0].at - s.at:.1f}s after sending)" if finals else ""
            out.append(f"no answer within {ANSWER_BOUND:g}s{late}: {s.describe()}")
        if len(finals) > 1:
            answers = "; ".join(brief(a, 120) for a in finals)
            out.append(f"{len(finals)} answers instead of one: {s.describe()} ⇒ {answers}")
        if finals and s.spec.target != "control" and not s.answers[-1].final:
            out.append(f"a message after the final answer: {s.describe()} ⇒ {brief(s.answers[-1])}")
        for a in s.answers:
            problem = malformed(a, s, report.name)
            if problem:
                out.append(f"malformed answer ({problem}): {s.describe()} ⇒ {brief(a)}")
    return out


def strays(report: Report) -> list[str]:
    """Nothing is published to an invalid reply subject, and nothing answers a message that must go unanswered."""
    out = [f"a reply on an invalid reply subject, from no message of ours: {brief(a)}" for a in report.strays]
    for s in report.sent:
        for a in s.strays:
            out.append(f"published to the invalid reply subject {a.subject!r}: {s.describe()} ⇒ {brief(a)}")
        if s.expected == "none" and s.answers:
            out.append(f"answered though nobody asked: {s.describe()} ⇒ {brief(s.answers[0])}")
    return out


def internal_errors(report: Report) -> list[str]:
    """No -32603 for input the caller got wrong (every hostile message)."""
    out = []
    for s in report.sent:
        for a in final_answers(s):
            err = error_of(a)
            if err is not None and err.get("code") == codes.INTERNAL_ERROR:
                out.append(f"-32603 {err.get('message')!r}: {s.describe()}")
    return out


def wrong_codes(report: Report) -> list[str]:
    """Where docs/protocol.md names the error for an input, the answer carries that code."""
    out = []
    for s in report.sent:
        if s.spec.valid or (s.spec.codes is None and s.spec.result_ok):
            continue
        for a in final_answers(s):
            err = error_of(a)
            if err is None and not s.spec.result_ok:
                out.append(f"a result where an error is due: {s.describe()} ⇒ {brief(a)}")
            elif err is not None and s.spec.codes and err.get("code") not in s.spec.codes:
                want = " or ".join(str(c) for c in sorted(s.spec.codes))
                out.append(f"code {err.get('code')} where {want} is due ({err.get('message')!r}): {s.describe()}")
    return out


def _task_of(answer: Answer) -> dict[str, Any]:
    body = answer.json()
    result = body.get("result") if isinstance(body, dict) else None
    if isinstance(result, dict) and isinstance(result.get("task"), dict):
        return result["task"]  # type: ignore[no-any-return]
    return result if isinstance(result, dict) else {}


def _valid_problem(s: Sent, report: Report) -> str | None:
    finals = final_answers(s)
    if len(finals) != 1:
        return f"{len(finals)} final answers"
    answer = finals[0]
    err = error_of(answer)
    kind = s.spec.valid
    if kind == "not-cancelable":
        return (
            None if err is not None and err.get("code") == codes.TASK_NOT_CANCELABLE else f"not -32002: {brief(answer)}"
        )
    if err is not None:
        return f"an error: {brief(answer)}"
    if kind == "work:data":
        task = _task_of(answer)
        value = json.loads(s.body)["params"]["message"]["parts"][0]["data"]["value"]
        want = {"value": value} if report.target == "agent" else {"result": value}
        state = task.get("status", {}).get("state")
        output = (task.get("artifacts") or [{}])[0].get("parts", [{}])[0].get("data")
        if state != "TASK_STATE_COMPLETED" or output != want:
            return f"state {state}, output {output!r} (want COMPLETED, {want!r})"
    elif kind == "work:stream":
        first = answer if len(s.answers) == 1 else s.answers[0]
        body = answer.json()
        state = body.get("result", {}).get("statusUpdate", {}).get("status", {}).get("state")
        if "task" not in (first.json() or {}).get("result", {}) or state != "TASK_STATE_COMPLETED":
            return f"first event not a task, or final state {state}: {brief(answer)}"
    elif kind == "get":
        task = _task_of(answer)
        if task.get("id") != report.known_task or task.get("status", {}).get("state") != "TASK_STATE_COMPLETED":
            return f"not the completed task {report.known_task}: {brief(answer)}"
    elif kind == "list":
        body = answer.json()
        tasks = body.get("result", {}).get("tasks")
        if not isinstance(tasks, list) or not tasks or not all(isinstance(t, dict) and t.get("id") for t in tasks):
            return f"no list of tasks: {brief(answer)}"
    elif kind == "subscribe":
        task = _task_of(answer)
        if task.get("id") != report.known_task:
            return f"not the task {report.known_task}: {brief(answer)}"
    return None


def failed_valid_calls(report: Report) -> list[str]:
    """Every valid call interleaved with the hostile ones completes correctly."""
    out = []
    for s in report.sent:
        if s.spec.valid:
            problem = _valid_problem(s, report)
            if problem:
                out.append(f"{problem}: {s.describe()}")
    return out


def crashes(report: Report) -> list[str]:
    """No worker crash, no traceback, no error-level event in the processes' logs; every service still runs."""
    out = [
        f"{what} is {state} after the traffic" for what, state in report.services_alive.items() if state != "running"
    ]
    for e in crash_events(report):
        seq = e.fields.get("seq")
        source = f"\n    (sent: {report.by_seq(seq)})" if seq and report.by_seq(seq) else ""
        out.append(e.line().replace("\n", "\n    ") + source)
    return out


def undrained(report: Report) -> list[str]:
    """The work consumer holds nothing pending, unacked or redelivering once the traffic stops."""
    if report.drained:
        return []
    waiting = [s.describe(120) for s in report.sent if s.spec.target == "work" and s.expected == "one" and not s.done()]
    hint = ("\n  work messages still unanswered:\n" + shown(waiting)) if waiting else ""
    return [f"consumer {report.name} did not drain: {report.consumer}{hint}"]


def endless_lines(report: Report) -> list[str]:
    """No log event repeats more than REPEAT_LIMIT times in the quiet window after the traffic."""
    quiet = [e for e in report.logs if e.at >= report.quiet_from and e.level != "debug"]
    seen = Counter(e.event for e in quiet)
    out = []
    for event, count in seen.most_common():
        if count > REPEAT_LIMIT:
            example = next(e for e in quiet if e.event == event)
            out.append(f"{event!r} logged {count}× in the quiet window, e.g. {example.line()[:400]}")
    return out
