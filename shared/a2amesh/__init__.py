"""a2amesh: A2A 1.0 agents and workflows over NATS JetStream, with execution state in Redis."""

__version__ = "0.1.0"
