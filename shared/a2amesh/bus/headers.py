"""Header names of the binding (SPEC §3.4)."""

from __future__ import annotations

VERSION = "A2A-Version"
EXTENSIONS = "A2A-Extensions"
REPLY_TO = "A2A-Reply-To"
DEADLINE = "A2A-Deadline"
CALL_DEPTH = "A2A-Call-Depth"
AGENT = "A2A-Agent"
ATTEMPT = "A2A-Attempt"
SEQ = "A2A-Seq"
FINAL = "A2A-Final"
USER = "A2A-User"
AUTHORIZATION = "Authorization"
TRACEPARENT = "traceparent"
MSG_ID = "Nats-Msg-Id"
TTL = "Nats-TTL"

# Headers a callee copies from its request onto the requests it makes (SPEC §3.4, §10).
PROPAGATED = (USER, AUTHORIZATION, TRACEPARENT)
