"""Hostile messages for the wire fuzzer: hypothesis strategies and the fixed cases of issue 28.

A case is drawn as a :class:`Spec` (what to send and what the protocol promises for it); the harness turns
it into bytes for one namespace, publishes it and checks the answer. Bodies may hold two placeholders,
filled at send time: ``@ns@`` (the test's namespace) and ``@fresh@`` (a new unique token), so messageIds
and task ids never collide between cases.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from a2amesh.protocol import codes

Target = Literal["work", "control", "subscribe"]
"""work: the JetStream request subject; control: the control subject with a NATS reply inbox;
subscribe: the control subject, published (SubscribeToTask) with an ``A2A-Reply-To``."""

ReplyTo = Literal["valid", "none"] | str
"""``valid``: a fresh valid reply subject of the caller; ``none``: no header; else a template of a bad one
(``@prefix@`` = ``{ns}.a2a.v1.reply.``, ``@inst@`` = a fresh instance token of this case)."""

UNCHECKED = "@unchecked@"


@dataclass(frozen=True)
class Spec:
    """One message to send and what the protocol promises for it."""

    kind: str
    target: Target
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    reply_to: ReplyTo = "valid"
    codes: frozenset[int] | None = None
    """When set, an error answer must carry one of these codes (where docs/protocol.md names one)."""
    result_ok: bool = True
    """Whether a result (not an error) is an acceptable answer."""
    expect_id: Any = field(default="@unchecked@")
    """The JSON-RPC id the answer must echo (None: null), or ``@unchecked@``."""
    valid: str | None = None
    """For a valid call: what its answer must show (``work:data``, ``work:stream``, ``get``, ``list`` …)."""
    answers: Literal["one", "none", "at_most_one"] = "one"


FRESH = "@fresh@"

# ---------------------------------------------------------------- building blocks


def dumps(value: Any) -> bytes:
    """JSON with ASCII escapes, so a lone surrogate travels as ``"\\ud800"`` (valid UTF-8 on the wire)."""
    return json.dumps(value).encode()


def message(parts: list[Any], **extra: Any) -> dict[str, Any]:
    return {"messageId": FRESH, "role": "ROLE_USER", "parts": parts, **extra}


def envelope(method: str, params: Any, request_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def send_body(parts: list[Any], *, method: str = "SendMessage", request_id: Any = 1, **extra: Any) -> bytes:
    return dumps(envelope(method, {"message": message(parts, **extra)}, request_id))


def nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=10,
)
hostile_ids = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63),
    st.text(max_size=16),
    st.sampled_from([10**40, -(10**40), "x" * 5000, "", "\ud800", 0, True, 1.5, 1e308]),
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
WORK_METHODS = ["SendMessage", "SendStreamingMessage"]
CONTROL_METHODS = ["GetTask", "CancelTask", "ListTasks"]
hostile_methods = st.one_of(
    st.sampled_from(
        [*WORK_METHODS, *CONTROL_METHODS, "SubscribeToTask", "sendMessage", "", "DoMagic", "rpc.discover", "M" * 4000]
    ),
    st.text(max_size=10),
    json_values,
)


def echo_id(request_id: Any) -> Any:
    """The id an answer must echo for a request id as sent (None when JSON-RPC cannot read one).

    A boolean or a float is left unchecked: echoing it and answering null are both defensible readings.
    """
    if isinstance(request_id, bool | float):
        return UNCHECKED
    if isinstance(request_id, int) and not -(2**63) <= request_id < 2**63:
        return None  # docs/protocol.md: an integer id must fit in 64 bits (-32600, answered with id null)
    if isinstance(request_id, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in request_id):
        return None  # not valid Unicode: no id can be read
    if not isinstance(request_id, str | int):
        return None
    return request_id


# ---------------------------------------------------------------- strategies: work subject


@st.composite
def work_envelopes(draw: st.DrawFn) -> Spec:
    """A SendMessage envelope with its fields dropped, retyped or replaced."""
    env: dict[str, Any] = envelope(draw(st.sampled_from(WORK_METHODS)), {"message": message([{"data": {"k": 1}}])})
    changed = []
    for name, junk in (
        ("jsonrpc", json_values),
        ("id", hostile_ids),
        ("method", hostile_methods),
        ("params", json_values),
    ):
        action = draw(st.sampled_from(["keep", "keep", "drop", "junk"]))
        if action == "drop":
            env.pop(name)
            changed.append(f"-{name}")
        elif action == "junk":
            env[name] = draw(junk)
            changed.append(f"~{name}")
    if draw(st.booleans()):
        env[draw(st.text(min_size=1, max_size=8))] = draw(json_values)
        changed.append("+extra")
    expect = echo_id(env.get("id")) if "id" in env else None
    return Spec(f"work/envelope[{','.join(changed) or 'intact'}]", "work", dumps(env), expect_id=expect)


bad_parts = st.one_of(
    st.fixed_dictionaries({"text": json_values}),
    st.fixed_dictionaries({"data": json_values}),
    st.fixed_dictionaries({"raw": st.text(max_size=20) | json_values}),
    st.fixed_dictionaries({"url": st.text(max_size=20) | json_values}),
    st.sampled_from(
        [
            {},
            {"bogus": 1},
            {"text": "a", "data": {}},
            {"text": "x", "mediaType": 5},
            {"text": "x", "metadata": "nope"},
            {"file": {"uri": "file:///etc/passwd"}},
            {"url": "artifact://"},
            {"url": "artifact://@ns@/nope/nope/result?version=1"},
            {"url": "artifact://@ns@/a/b/c?version=abc"},
            {"url": "artifact://@ns@/a/b/c?version=99999999999999999999999"},
            {"url": "artifact://@ns@/../../../etc/passwd"},
            {"url": "artifact://other-ns/a/b/c?version=1"},
            {"url": "http://127.0.0.1:1/x"},
            {"url": "file:///etc/passwd"},
            {"raw": "!!!not base64!!!"},
            {"data": {"\u0000": "\u0000"}},
        ]
    ),
)


@st.composite
def work_parts(draw: st.DrawFn) -> Spec:
    """A well-formed envelope whose message carries hostile parts."""
    parts = draw(st.lists(bad_parts, min_size=0, max_size=3))
    method = draw(st.sampled_from(WORK_METHODS))
    request_id = draw(st.integers(min_value=0, max_value=10**6))
    return Spec("work/parts", "work", send_body(parts, method=method, request_id=request_id), expect_id=request_id)


deadline_values = st.one_of(
    st.sampled_from(["1" * 320, "-1", "-" + "9" * 30, "abc", "1e3", " 5", "0x10", "NaN", "inf", "1.5", "", "9" * 19]),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
)
depth_values = st.one_of(
    st.sampled_from(["11", "-1", "abc", "1" * 320, "1.0", "", " 3"]),
    st.integers(min_value=-5, max_value=2**65).map(str),
)
header_text = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=40)


@st.composite
def work_headers(draw: st.DrawFn) -> Spec:
    """A valid SendMessage with hostile A2A-* headers."""
    hdrs: dict[str, str] = {}
    which = draw(st.sets(st.sampled_from(["deadline", "depth", "version", "other"]), min_size=1))
    if "deadline" in which:
        hdrs["A2A-Deadline"] = draw(deadline_values)
    if "depth" in which:
        hdrs["A2A-Call-Depth"] = draw(depth_values)
    if "version" in which:
        hdrs["A2A-Version"] = draw(st.sampled_from(["", "1", "1.0.0", "2.0", "0.3", "1.0,0.3", "*"]) | header_text)
    if "other" in which:
        for name in draw(
            st.sets(
                st.sampled_from(
                    [
                        "A2A-Extensions",
                        "A2A-User",
                        "Authorization",
                        "traceparent",
                        "A2A-Final",
                        "A2A-Seq",
                        "A2A-Attempt",
                    ]
                ),
                min_size=1,
            )
        ):
            hdrs[name] = draw(header_text)
    request_id = draw(st.integers(min_value=0, max_value=10**6))
    body = send_body([{"data": {"k": request_id}}], request_id=request_id)
    return Spec(f"work/headers[{','.join(sorted(hdrs))}]", "work", body, tuple(hdrs.items()), expect_id=request_id)


# ---------------------------------------------------------------- strategies: control subject


def control_params(method: str) -> st.SearchStrategy[Any]:
    if method == "ListTasks":
        fields = {
            "pageSize": json_values | st.integers(min_value=-(2**40), max_value=2**40),
            "pageToken": json_values | st.sampled_from(["-1", "9" * 40, "abc"]),
            "status": json_values | st.sampled_from(["TASK_STATE_NOPE", "completed"]),
            "contextId": json_values | st.just("\ud800"),
            "historyLength": json_values | st.sampled_from([-1, 2**63]),
            "includeArtifacts": json_values,
        }
        return st.fixed_dictionaries({}, optional=fields)
    return st.fixed_dictionaries(
        {},
        optional={"id": json_values | st.sampled_from(["\ud800", "x" * 3000, "a.b.*", "k:{x}"]), "junk": json_values},
    )


@st.composite
def control_envelopes(draw: st.DrawFn) -> Spec:
    """A control request with a hostile envelope or hostile params."""
    method = draw(st.sampled_from(CONTROL_METHODS))
    env: dict[str, Any] = envelope(method, draw(control_params(method)), draw(hostile_ids))
    changed = []
    for name, junk in (("jsonrpc", json_values), ("method", hostile_methods), ("params", json_values)):
        if draw(st.integers(min_value=0, max_value=5)) == 0:
            if draw(st.booleans()):
                env.pop(name)
                changed.append(f"-{name}")
            else:
                env[name] = draw(junk)
                changed.append(f"~{name}")
    kind = f"control/{method}[{','.join(changed) or 'params'}]"
    return Spec(kind, "control", dumps(env), expect_id=echo_id(env["id"]))


@st.composite
def control_headers(draw: st.DrawFn) -> Spec:
    method = draw(st.sampled_from(CONTROL_METHODS))
    params = {} if method == "ListTasks" else {"id": "no-such-task"}
    hdrs = {"A2A-Version": draw(st.sampled_from(["", "1", "2.0", "0.3"]) | header_text)}
    return Spec(f"control/{method}[version]", "control", dumps(envelope(method, params, 5)), tuple(hdrs.items()))


# ---------------------------------------------------------------- fixed cases (issue 28 and the brief)

PARSE = frozenset({codes.PARSE_ERROR})
ENVELOPE = frozenset({codes.PARSE_ERROR, codes.INVALID_REQUEST})
PARAMS = frozenset({codes.INVALID_PARAMS})
HEADER = frozenset({codes.INVALID_REQUEST})
BAD_REPLY_TO = [
    ("empty call id", "@prefix@@inst@.callee."),
    ("empty instance", "@prefix@.callee.@inst@"),
    ("space in a token", "@prefix@@inst@.callee.call x"),
    ("wildcard * call id", "@prefix@@inst@.callee.*"),
    ("wildcard > call id", "@prefix@@inst@.callee.>"),
    ("wildcard * instance", "@prefix@*.callee.@inst@"),
    ("only >", "@prefix@>"),
    ("wrong namespace", "zz@inst@.a2a.v1.reply.@inst@.callee.call"),
    ("extra token", "@prefix@scope.@inst@.callee.call.extra"),
    ("missing call id", "@prefix@@inst@.callee"),
    ("double dot", "@prefix@@inst@.callee..call"),
    ("blank", "   "),
    ("not a subject", "@inst@"),
]


def fixed_work_cases() -> list[Spec]:
    """The structured hostile work requests: every item of issue 28 and the brief, each at least once."""
    ok = [{"data": {"k": 1}}]
    cases = [
        Spec("work/not JSON", "work", b'{"jsonrpc": "2.0", "id": 1, "method": ', codes=PARSE, expect_id=None),
        Spec(
            "work/invalid UTF-8", "work", b'{"jsonrpc": "2.0", "id": 1, "x": "\xff\xfe"}', codes=PARSE, expect_id=None
        ),
        Spec("work/empty body", "work", b"", codes=PARSE, expect_id=None),
        Spec("work/JSON array body", "work", b"[1, 2]", codes=ENVELOPE, expect_id=None),
        Spec("work/2000 nested arrays (whole body)", "work", nested(2000).encode(), codes=ENVELOPE, expect_id=None),
        Spec(
            "work/2000 nested arrays as id",
            "work",
            (b'{"jsonrpc": "2.0", "method": "SendMessage", "params": {}, "id": ' + nested(2000).encode() + b"}"),
            codes=ENVELOPE,
            expect_id=None,
        ),
        Spec(
            "work/600 nested arrays in a data part",
            "work",
            send_body([{"data": {"deep": "@deep600@"}}], request_id=11).replace(b'"@deep600@"', nested(600).encode()),
            result_ok=False,
            expect_id=11,
        ),
        Spec(
            "work/1000 nested objects in metadata",
            "work",
            send_body(ok, request_id=12, metadata={"m": "@deepobj@"}).replace(
                b'"@deepobj@"', ('{"a":' * 1000 + "1" + "}" * 1000).encode()
            ),
            result_ok=False,
            expect_id=12,
        ),
        Spec(
            "work/lone surrogate in a text part", "work", send_body([{"text": "a\ud800b"}], request_id=21), expect_id=21
        ),
        Spec(
            "work/lone surrogate in a data key",
            "work",
            send_body([{"data": {"\udc00k": 1}}], request_id=22),
            expect_id=22,
        ),
        Spec(
            "work/lone surrogate in a data value",
            "work",
            send_body([{"data": {"k": "\udfff"}}], request_id=23),
            expect_id=23,
        ),
        Spec(
            "work/lone surrogate in messageId",
            "work",
            dumps(envelope("SendMessage", {"message": {**message(ok), "messageId": "m\ud800" + FRESH}}, 24)),
            expect_id=24,
        ),
        Spec(
            "work/lone surrogate in contextId", "work", send_body(ok, request_id=25, contextId="c\ud800"), expect_id=25
        ),
        Spec("work/lone surrogate in taskId", "work", send_body(ok, request_id=26, taskId="t\ud800"), expect_id=26),
        Spec("work/lone surrogate as request id", "work", send_body(ok, request_id="\ud800"), expect_id=None),
        Spec("work/huge integer id", "work", send_body(ok, request_id=10**40), expect_id=None),
        Spec(
            "work/unknown method", "work", dumps(envelope("DoMagic", {}, 31)), codes=frozenset({-32601}), expect_id=31
        ),
        Spec(
            "work/control method on the work subject",
            "work",
            dumps(envelope("GetTask", {"id": "x"}, 32)),
            codes=frozenset({-32601}),
            expect_id=32,
        ),
        Spec("work/message with no parts", "work", send_body([], request_id=33), codes=PARAMS, expect_id=33),
        Spec(
            "work/artifact:// url naming nothing",
            "work",
            send_body([{"url": "artifact://@ns@/ctx/" + FRESH + "/result?version=1"}], request_id=34),
            expect_id=34,
        ),
        Spec(
            "work/unknown taskId",
            "work",
            send_body(ok, request_id=35, taskId="no-such-task-" + FRESH),
            codes=frozenset({codes.TASK_NOT_FOUND}),
            result_ok=False,
            expect_id=35,
        ),
    ]
    no_version = (("A2A-Version", ""),)
    cases.append(
        Spec(
            "work/no A2A-Version",
            "work",
            send_body(ok, request_id=41),
            no_version,
            codes=frozenset({-32009}),
            expect_id=41,
        )
    )
    for label, value, allowed, result_ok in [
        ("A2A-Deadline of 320 digits", "1" * 320, HEADER, True),
        ("A2A-Deadline non-numeric", "soon", HEADER, False),
        ("A2A-Deadline negative", "-5", frozenset({codes.TRANSPORT_ERROR, codes.INVALID_REQUEST}), False),
        ("A2A-Deadline 2^64", str(2**64), HEADER, True),
        ("A2A-Deadline float", "1.5e12", HEADER, True),
        ("A2A-Call-Depth 320 digits", "1" * 320, frozenset({codes.TRANSPORT_ERROR, codes.INVALID_REQUEST}), False),
        ("A2A-Call-Depth non-numeric", "deep", HEADER, False),
        ("A2A-Call-Depth 11", "11", frozenset({codes.TRANSPORT_ERROR}), False),
    ]:
        name = "A2A-Deadline" if "Deadline" in label else "A2A-Call-Depth"
        cases.append(
            Spec(
                f"work/{label}",
                "work",
                send_body(ok, request_id=50),
                ((name, value),),
                codes=allowed,
                result_ok=result_ok,
                expect_id=50,
            )
        )
    for label, template in BAD_REPLY_TO:
        cases.append(Spec(f"work/A2A-Reply-To {label}", "work", send_body(ok), reply_to=template, answers="none"))
    cases.append(Spec("work/no A2A-Reply-To", "work", send_body(ok), reply_to="none", answers="none"))
    return cases


def large_work_case(max_payload: int) -> Spec:
    """A valid SendMessage just under the server's max_payload (headers included)."""
    skeleton = send_body([{"text": "@big@"}], request_id=61)
    filler = "x" * (max_payload - len(skeleton) - 2048)
    return Spec("work/body near max_payload", "work", skeleton.replace(b"@big@", filler.encode()), expect_id=61)


def fixed_control_cases() -> list[Spec]:
    out = [
        Spec("control/not JSON", "control", b"{", codes=PARSE, expect_id=None),
        Spec("control/invalid UTF-8", "control", b'{"id": "\xc3\x28"}', codes=PARSE, expect_id=None),
        Spec(
            "control/2000 nested arrays (whole body)", "control", nested(2000).encode(), codes=ENVELOPE, expect_id=None
        ),
        Spec(
            "control/GetTask 2000 nested arrays as params",
            "control",
            b'{"jsonrpc": "2.0", "id": 71, "method": "GetTask", "params": ' + nested(2000).encode() + b"}",
            result_ok=False,
            expect_id=71,
        ),
        Spec(
            "control/work method on the control subject",
            "control",
            send_body([{"text": "x"}], request_id=72),
            codes=frozenset({-32601}),
            expect_id=72,
        ),
        Spec("control/unknown method", "control", dumps(envelope("DoMagic", {}, 73)), codes=frozenset({-32601})),
        Spec(
            "control/GetTask unknown id",
            "control",
            dumps(envelope("GetTask", {"id": "nope-" + FRESH}, 74)),
            codes=frozenset({codes.TASK_NOT_FOUND}),
            result_ok=False,
            expect_id=74,
        ),
        Spec(
            "control/GetTask lone surrogate id",
            "control",
            dumps(envelope("GetTask", {"id": "\ud800"}, 75)),
            expect_id=75,
        ),
        Spec(
            "control/CancelTask lone surrogate id",
            "control",
            dumps(envelope("CancelTask", {"id": "t\udc00"}, 76)),
            expect_id=76,
        ),
        Spec(
            "control/ListTasks lone surrogate contextId",
            "control",
            dumps(envelope("ListTasks", {"contextId": "\ud800"}, 77)),
            expect_id=77,
        ),
        Spec(
            "control/GetTask 100 KB id", "control", dumps(envelope("GetTask", {"id": "y" * 100_000}, 78)), expect_id=78
        ),
        Spec(
            "control/ListTasks pageSize -1",
            "control",
            dumps(envelope("ListTasks", {"pageSize": -1}, 79)),
            codes=PARAMS,
            expect_id=79,
        ),
        Spec(
            "control/no A2A-Version",
            "control",
            dumps(envelope("GetTask", {"id": "x"}, 80)),
            (("A2A-Version", ""),),
            codes=frozenset({-32009}),
            expect_id=80,
        ),
    ]
    for label, template in BAD_REPLY_TO:
        out.append(
            Spec(
                f"subscribe/A2A-Reply-To {label}",
                "subscribe",
                dumps(envelope("SubscribeToTask", {"id": "@known@"}, 81)),
                reply_to=template,
                answers="none",
            )
        )
    out.append(
        Spec(
            "subscribe/bad params",
            "subscribe",
            dumps(envelope("SubscribeToTask", {"id": 5, "x": []}, 82)),
            codes=PARAMS,
            result_ok=False,
            expect_id=82,
        )
    )
    out.append(
        Spec(
            "subscribe/lone surrogate id",
            "subscribe",
            dumps(envelope("SubscribeToTask", {"id": "\ud800"}, 83)),
            answers="at_most_one",
            expect_id=83,
        )
    )
    return out


# ---------------------------------------------------------------- valid calls, interleaved


def valid_work(i: int, *, streaming: bool) -> Spec:
    method = "SendStreamingMessage" if streaming else "SendMessage"
    body = send_body([{"data": {"value": i}}], method=method, request_id=f"valid-{i}")
    return Spec(
        f"valid/{method}",
        "work",
        body,
        expect_id=f"valid-{i}",
        valid="work:stream" if streaming else "work:data",
        codes=frozenset(),
    )


def valid_control(i: int) -> list[Spec]:
    return [
        Spec(
            "valid/GetTask",
            "control",
            dumps(envelope("GetTask", {"id": "@known@"}, f"get-{i}")),
            valid="get",
            codes=frozenset(),
            expect_id=f"get-{i}",
        ),
        Spec(
            "valid/ListTasks",
            "control",
            dumps(envelope("ListTasks", {"pageSize": 5}, f"list-{i}")),
            valid="list",
            codes=frozenset(),
            expect_id=f"list-{i}",
        ),
        Spec(
            "valid/CancelTask of a finished task",
            "control",
            dumps(envelope("CancelTask", {"id": "@known@"}, f"cancel-{i}")),
            valid="not-cancelable",
            codes=frozenset({codes.TASK_NOT_CANCELABLE}),
            result_ok=False,
            expect_id=f"cancel-{i}",
        ),
        Spec(
            "valid/SubscribeToTask of a finished task",
            "subscribe",
            dumps(envelope("SubscribeToTask", {"id": "@known@"}, f"sub-{i}")),
            valid="subscribe",
            codes=frozenset(),
        ),
    ]


# ---------------------------------------------------------------- drawing


def draw_specs(strategy: st.SearchStrategy[Spec], count: int) -> list[Spec]:
    """``count`` examples of ``strategy``, the same ones on every run (derandomized, no example database)."""
    out: list[Spec] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        deadline=timedelta(seconds=2),
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(spec: Spec) -> None:
        out.append(spec)

    collect()
    return out[:count]
