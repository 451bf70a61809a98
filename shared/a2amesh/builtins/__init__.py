"""Built-in agents: the model work of the agent node catalogue (``llm``, ``tools``, ``tool_loop``) as mesh agents."""
