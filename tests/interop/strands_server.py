"""A Strands agent served over A2A (strands-agents' own ``A2AServer``), its model on our fake OpenAI server.

Run with the Python of the Strands virtualenv (its a2a-sdk 0.3 line conflicts with ours):
``python strands_server.py PORT OPENAI_BASE_URL``. Not imported by the test suite.
"""

import sys

from strands import Agent
from strands.models.openai import OpenAIModel
from strands.multiagent.a2a import A2AServer

port, base_url = int(sys.argv[1]), sys.argv[2]
model = OpenAIModel(client_args={"base_url": base_url, "api_key": "test"}, model_id="fake-model")


def make_agent(context_id: str) -> Agent:
    return Agent(name="strands helper", description="A Strands agent over A2A", model=model, callback_handler=None)


A2AServer(agent_factory=make_agent, host="127.0.0.1", port=port).serve(log_level="warning")
