"""The DAG workflow format (SPEC §5): node models, definition, load-time validation, execution state, engine."""
