"""The public API: a short explicit __all__ that users import from."""

import a2amesh


def test_exports_are_pinned() -> None:
    """Changing what `import a2amesh` offers must be deliberate."""
    assert sorted(a2amesh.__all__) == [
        "A2AMeshError",
        "AgentCard",
        "AgentHost",
        "Artifact",
        "Call",
        "Client",
        "ConfigError",
        "InputRequired",
        "Message",
        "Part",
        "RetryWithFeedback",
        "RpcError",
        "Settings",
        "Task",
        "TaskContext",
        "TaskOutcome",
        "TaskState",
        "TransportError",
        "connect",
        "make_message",
    ]
    for name in a2amesh.__all__:
        assert getattr(a2amesh, name) is not None
