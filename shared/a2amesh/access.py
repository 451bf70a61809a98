"""Least-privilege NATS server configuration, generated from the agent definitions (``a2amesh deploy nats-config``).

One user per agent (named after it), one for the executor, one for the gateway, one for the proxies of the
remotes declared through the API (``remotes``), one for the host of the LLM agents stored through the API
(``llm-host``) and one ``admin`` (``a2amesh init``, operators). Secrets are never
written: the file names environment variables the server reads at start (``$A2AMESH_NATS_PASSWORD_<USER>`` or
``$A2AMESH_NATS_NKEY_<USER>``). docs/scaling.md explains the model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from a2amesh.bus.subjects import Subjects
from a2amesh.ids import NAME_RE
from a2amesh.store.definitions import LLM_AGENTS
from a2amesh.store.keys import Keys

ADMIN = "admin"
EXECUTOR = "executor"
GATEWAY = "gateway"
REMOTES = "remotes"
"""The process serving the remotes declared through the management API (``a2amesh remote serve --stored``)."""
LLM_HOST = "llm-host"
"""The process serving the LLM agents stored through the management API (``a2amesh llm-host``)."""
ROLES = (ADMIN, EXECUTOR, GATEWAY, REMOTES, LLM_HOST)
"""Users that are not agents; an agent may not take one of these names."""


class NatsAccess(BaseModel):
    """What the generated configuration is for.

    Args:
        namespace: the mesh's namespace.
        agents: agent names, each a NATS user.
        workflows: workflow names the executor serves; None lets it serve every name that is not an agent's.
        auth: ``password`` (user/password) or ``nkey`` (public nkeys; each process sets ``A2AMESH_SCOPE``).
        account: the NATS account holding the mesh's JetStream.
        tls_cert, tls_key, tls_ca: the server's TLS files; ``tls_verify`` also requires client certificates.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = "a2amesh"
    agents: list[str]
    workflows: list[str] | None = None
    auth: Literal["password", "nkey"] = "password"
    account: str = Field(default="A2AMESH", pattern=r"^[A-Za-z0-9_-]+$")
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    tls_verify: bool = False

    @field_validator("namespace")
    @classmethod
    def _token(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError("must match [A-Za-z0-9_-]+")
        return v

    @field_validator("agents", "workflows")
    @classmethod
    def _names(cls, v: list[str] | None) -> list[str] | None:
        for name in v or []:
            if not NAME_RE.match(name):
                raise ValueError(f"{name!r} must match [A-Za-z0-9_-]+")
            if name in ROLES:
                raise ValueError(f"{name!r} is the name of the {name} user; rename the agent")
        return v


@dataclass
class Permissions:
    """One user's subject permissions."""

    publish: list[str] = field(default_factory=list)
    publish_deny: list[str] = field(default_factory=list)
    subscribe: list[str] = field(default_factory=list)
    subscribe_deny: list[str] = field(default_factory=list)
    allow_responses: bool = False

    def add(self, other: Permissions) -> Permissions:
        return Permissions(
            publish=_unique(self.publish + other.publish),
            publish_deny=_unique(self.publish_deny + other.publish_deny),
            subscribe=_unique(self.subscribe + other.subscribe),
            subscribe_deny=_unique(self.subscribe_deny + other.subscribe_deny),
            allow_responses=self.allow_responses or other.allow_responses,
        )


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def password_variable(user: str) -> str:
    """The environment variable the server reads a user's password from."""
    return f"A2AMESH_NATS_PASSWORD_{user.upper().replace('-', '_')}"


def nkey_variable(user: str) -> str:
    """The environment variable the server reads a user's public nkey from."""
    return f"A2AMESH_NATS_NKEY_{user.upper().replace('-', '_')}"


def caller(s: Subjects, scope: str) -> Permissions:
    """Calling agents and reading the card registry; replies, deltas and inboxes under ``scope`` only."""
    kv = [s.cards_bucket, s.presence_bucket]
    api = "$JS.API"
    return Permissions(
        publish=[
            s.request_all,
            f"{s.ns}.a2a.v1.agent.control.*",
            f"{api}.INFO",
            f"{api}.STREAM.INFO.*",
            f"{api}.DIRECT.GET.{s.replies_stream}.{s.reply_prefix()}{scope}.>",
            *[f"{api}.DIRECT.GET.KV_{b}.>" for b in kv],
            *[f"{api}.CONSUMER.CREATE.KV_{b}" for b in kv],
            *[f"{api}.CONSUMER.CREATE.KV_{b}.>" for b in kv],
            *[f"{api}.CONSUMER.INFO.KV_{b}.*" for b in kv],
            *[f"{api}.CONSUMER.DELETE.KV_{b}.*" for b in kv],
            *[f"$JS.FC.KV_{b}.>" for b in kv],
        ],
        subscribe=[f"{s.reply_prefix()}{scope}.>", f"{s.ns}.a2a.v1.delta.{scope}.>", f"_INBOX.{scope}.>"],
    )


def worker(s: Subjects, name: str) -> Permissions:
    """Serving ``name`` (an agent or a workflow, or ``*``): its queue, its control subject, its card and presence,
    and replies and deltas to calls made to it (the reply subject names the callee)."""
    return Permissions(
        publish=[*own_subjects(s, name), *s.replies_from(name)],
        subscribe=[s.control(name)],
        allow_responses=True,
    )


def own_subjects(s: Subjects, name: str) -> list[str]:
    """What only the user serving ``name`` may publish to: its consumer's API and acks, its card and presence."""
    api = "$JS.API"
    tasks = s.tasks_stream
    return [
        f"{api}.CONSUMER.MSG.NEXT.{tasks}.{name}",
        f"{api}.CONSUMER.INFO.{tasks}.{name}",
        f"{api}.CONSUMER.CREATE.{tasks}.{name}",
        f"{api}.CONSUMER.CREATE.{tasks}.{name}.>",
        f"$JS.ACK.{tasks}.{name}.>",
        f"$KV.{s.cards_bucket}.{name}",
        f"$KV.{s.presence_bucket}.{name}.>",
    ]


DEFINITION_EVENTS = ("created", "updated", "deleted")
REMOTE_EVENTS = ("created", "deleted")


def management(s: Subjects) -> Permissions:
    """What the management API adds to the gateway: announcing definition, memory and remote-agent changes, and
    following the events stream (``/api/events``) through ordered consumers of its own."""
    api = "$JS.API"
    events = s.events_stream
    return Permissions(
        publish=[
            *s.events_all,
            *[s.agent_events_of(e) for e in DEFINITION_EVENTS],
            *[s.remote_events_of(e) for e in REMOTE_EVENTS],
            f"{api}.CONSUMER.CREATE.{events}",
            f"{api}.CONSUMER.CREATE.{events}.>",
            f"{api}.CONSUMER.DELETE.{events}.*",
            f"{api}.CONSUMER.INFO.{events}.*",
            f"$JS.FC.{events}.>",
        ]
    )


def serving_stored(s: Subjects, reserved: Iterable[str]) -> Permissions:
    """Serving any name but ``reserved`` (names known only at run time, as the executor serves any workflow name):
    the ``*`` worker permissions, with each reserved name's own subjects, replies and control subject denied."""
    perms = worker(s, "*")
    for name in reserved:  # a file-declared agent's (or a listed workflow's) subjects stay its own
        perms.publish_deny += [*own_subjects(s, name), *s.replies_from(name)]
        perms.subscribe_deny.append(s.control(name))
    return perms


def stored_remotes(s: Subjects, agents: Iterable[str]) -> Permissions:
    """The proxies of the remotes declared through the management API (``remote/stored.py``), whose names are
    known only at run time: serving any agent name that is not a file-declared agent's (as the executor serves
    any workflow name), hearing remote declarations change, and the JetStream basics (its own inbox, the card and
    presence buckets) a host needs. It calls no agent: no request subject, no other agent's control subject."""
    api = "$JS.API"
    kv = [s.cards_bucket, s.presence_bucket]
    base = Permissions(
        publish=[
            f"{api}.INFO",
            f"{api}.STREAM.INFO.*",
            *[f"{api}.DIRECT.GET.KV_{b}.>" for b in kv],
            *[f"{api}.CONSUMER.CREATE.KV_{b}" for b in kv],
            *[f"{api}.CONSUMER.CREATE.KV_{b}.>" for b in kv],
            *[f"{api}.CONSUMER.INFO.KV_{b}.*" for b in kv],
            *[f"{api}.CONSUMER.DELETE.KV_{b}.*" for b in kv],
            *[f"$JS.FC.KV_{b}.>" for b in kv],
        ],
        # each host's client opens its reply inbox at start; without a request subject it never calls
        subscribe=[
            *(s.remote_events_of(e) for e in REMOTE_EVENTS),
            f"_INBOX.{REMOTES}.>",
            f"{s.reply_prefix()}{REMOTES}.>",
        ],
    )
    return base.add(serving_stored(s, agents))


def llm_host(s: Subjects, reserved: Iterable[str]) -> Permissions:
    """The host of the LLM agents stored through the management API (``agent/pool.py``), whose names are known only
    at run time: serving any name but ``reserved`` (the file-declared agents and the listed workflows), hearing
    LLM agent definitions change, and calling agents as an agent with tools does, its replies, deltas and inboxes
    under its own scope ``llm-host``. It announces nothing and follows no events stream."""
    hear = Permissions(subscribe=[s.agent_events_of(e) for e in DEFINITION_EVENTS])
    return caller(s, LLM_HOST).add(hear).add(serving_stored(s, reserved))


def permissions(access: NatsAccess) -> dict[str, Permissions | None]:
    """Every user's permissions (None: everything, the admin)."""
    s = Subjects(access.namespace)
    users: dict[str, Permissions | None] = {ADMIN: None}
    lifecycle = [s.workflow_events_of(e) for e in DEFINITION_EVENTS]
    # it serves the stored workflows too: it hears their definitions change
    executor = caller(s, EXECUTOR).add(Permissions(publish=list(s.events_all), subscribe=lifecycle))
    if access.workflows is None:  # everything an agent's worker permissions give, denied to the executor
        executor = executor.add(serving_stored(s, access.agents))
    else:
        for workflow in access.workflows:
            executor = executor.add(worker(s, workflow))
    users[EXECUTOR] = executor
    users[GATEWAY] = caller(s, GATEWAY).add(management(s))
    users[REMOTES] = stored_remotes(s, access.agents)
    users[LLM_HOST] = llm_host(s, [*access.agents, *(access.workflows or [])])
    for agent in access.agents:
        users[agent] = caller(s, agent).add(worker(s, agent))
    return users


def _list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{i}"' for i in items) + "]"


def _user(access: NatsAccess, name: str, perms: Permissions | None, password: str | None) -> list[str]:
    if access.auth == "nkey":
        lines = [f"      {{nkey: ${nkey_variable(name)}"]
    elif password is not None:
        lines = [f'      {{user: {name}, password: "{password}"']
    else:
        lines = [f"      {{user: {name}, password: ${password_variable(name)}"]
    if perms is not None:
        lines.append("        permissions: {")
        lines.append("          publish: {")
        lines.append(f"            allow: {_list(perms.publish)}")
        if perms.publish_deny:
            lines.append(f"            deny: {_list(perms.publish_deny)}")
        lines.append("          }")
        lines.append("          subscribe: {")
        lines.append(f"            allow: {_list(perms.subscribe)}")
        if perms.subscribe_deny:
            lines.append(f"            deny: {_list(perms.subscribe_deny)}")
        lines.append("          }")
        if perms.allow_responses:
            lines.append("          allow_responses: true")
        lines.append("        }")
    lines.append("      }")
    return lines


def accounts_config(access: NatsAccess, passwords: Mapping[str, str] | None = None) -> str:
    """The ``accounts`` block (and the ``tls`` block when TLS files are given) of the server configuration.

    ``passwords`` (user to password, ``a2amesh deploy init``) are written into the file; without them each
    password is read from the server's environment."""
    lines = [
        f"# a2amesh least-privilege users for namespace {access.namespace} (a2amesh deploy nats-config)",
        "accounts {",
        f"  {access.account} {{",
        "    jetstream: enabled",
        "    users: [",
    ]
    for name, perms in permissions(access).items():
        lines += _user(access, name, perms, None if passwords is None else passwords[name])
    lines += ["    ]", "  }", "}"]
    if access.tls_cert or access.tls_key or access.tls_ca:
        lines.append("tls {")
        if access.tls_cert:
            lines.append(f'  cert_file: "{access.tls_cert}"')
        if access.tls_key:
            lines.append(f'  key_file: "{access.tls_key}"')
        if access.tls_ca:
            lines.append(f'  ca_file: "{access.tls_ca}"')
        if access.tls_verify:
            lines.append("  verify: true")
        lines.append("}")
    return "\n".join(lines) + "\n"


def server_config(access: NatsAccess, *, listen: str, store_dir: str, http_port: int | None = None) -> str:
    """A whole nats-server configuration: listener, JetStream and the users of :func:`accounts_config`."""
    lines = [f"listen: {listen}", "max_payload: 8MB"]
    if http_port is not None:
        lines.append(f"http_port: {http_port}")
    lines += ["jetstream {", f'  store_dir: "{store_dir}"', "  sync_interval: always", "}"]
    return "\n".join(lines) + "\n" + accounts_config(access)


# --- Valkey ACL users ----------------------------------------------------------------------------------

REDIS_COMMANDS = (
    "-@all +@read +@write +@scripting +@transaction +@connection +@fast -@dangerous +info +config|get "
    "+cluster|slots +cluster|shards +cluster|info"
)
"""What every mesh user may run: data, Lua scripts, transactions and ``WAIT``; no KEYS, FLUSH*, CONFIG SET,
DEBUG, MONITOR or other administration (``CONFIG GET`` stays: the startup check reads ``maxmemory-policy``;
on a cluster the client reads the slot map with ``CLUSTER SLOTS`` / ``SHARDS``)."""


def redis_password_variable(user: str) -> str:
    """The environment variable ``deploy valkey-acl`` reads a Redis user's password from."""
    return f"A2AMESH_REDIS_PASSWORD_{user.upper().replace('-', '_')}"


def redis_key_patterns(namespace: str, role: str) -> list[str]:
    """The key patterns a role (``admin``, ``executor``, ``gateway``, ``remotes``, ``llm-host`` or an agent name)
    reads and writes, from store/keys.py's layout.

    An agent gets the task records, claims and subscriber sets (keyed by task id), artifacts, its own task
    index (each of its shards, by exact name), conversation locks and histories, its remote proxy's slots
    (``mesh_concurrency``) and ``{ns}:app:{agent}:*`` for its handler's own data. The executor and the gateway
    get the namespace: they read and write executions, schedules and task records of every workflow. The stored
    remotes' proxies (``remotes``) serve names known at run time: the task records, claims, subscriber sets and
    artifacts as an agent, every agent's task index and every remote's slots; they only read the declarations
    (:func:`redis_read_patterns`) and reach no execution, schedule, definition, history or handler data.
    """
    ns = namespace
    if role in (ADMIN, EXECUTOR, GATEWAY):
        return [f"{ns}:*"]
    shared = [f"{ns}:task:*", f"{ns}:claim:*", f"{ns}:subs:*"]
    artifacts = [f"{ns}:artifact:*", f"{ns}:artifacts:*"]
    if role == REMOTES:
        return [
            *shared,
            *(Keys(ns).agent_tasks("*", shard) for shard in Keys(ns).shards),
            *artifacts,
            Keys(ns).remote_slots("*"),
        ]
    if role == LLM_HOST:
        return [
            *shared,
            *(Keys(ns).agent_tasks("*", shard) for shard in Keys(ns).shards),
            f"{ns}:ctxlock:*",
            f"{ns}:history:*",
            *artifacts,
        ]
    return [
        *shared,
        *(Keys(ns).agent_tasks(role, shard) for shard in Keys(ns).shards),
        f"{ns}:ctxlock:{role}:*",
        f"{ns}:history:{role}:*",
        *artifacts,
        Keys(ns).remote_slots(role),
        f"{ns}:app:{role}:*",
    ]


def redis_read_patterns(namespace: str, role: str) -> list[str]:
    """The key patterns a role may only read: the stored remote declarations, for ``remotes``; the stored LLM agent
    definitions (heads and versions), for ``llm-host``."""
    keys = Keys(namespace)
    if role == REMOTES:
        return [keys.remotes()]
    if role == LLM_HOST:
        return [keys.definition_heads(LLM_AGENTS), keys.definition_versions(LLM_AGENTS, "*")]
    return []


def valkey_acl(namespace: str, agents: Iterable[str], password_hashes: dict[str, str]) -> str:
    """A Valkey ACL file: one user per role, each with its key patterns and :data:`REDIS_COMMANDS`.

    ``password_hashes`` maps each user to the SHA-256 hex digest of its password (the file holds no password).
    """
    lines = ["user default off resetpass"]  # an ACL file has no comments; no "nopass" left for protected mode
    for user in (*ROLES, *agents):
        digest = password_hashes[user]
        if user == ADMIN:
            lines.append(f"user {user} on #{digest} ~* &* +@all")
            continue
        patterns = [f"~{p}" for p in redis_key_patterns(namespace, user)]
        patterns += [f"%R~{p}" for p in redis_read_patterns(namespace, user)]
        keys = " ".join(patterns)
        lines.append(f"user {user} on #{digest} resetchannels {keys} {REDIS_COMMANDS}")
    return "\n".join(lines) + "\n"
