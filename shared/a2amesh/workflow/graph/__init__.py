"""The graph workflow format (SPEC §6): definition, load-time validation, execution state, engine."""
