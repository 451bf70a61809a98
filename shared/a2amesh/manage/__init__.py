"""What the management API, the CLI and the MCP server share: definitions, executions, reviews and events."""
