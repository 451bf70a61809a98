"""Strands' own A2A client (``A2AAgent``) calls an agent or workflow through our gateway and prints the answer.

Run with the Python of the Strands virtualenv: ``python strands_client.py AGENT_URL TEXT [TEXT...]``; each TEXT is a
turn of one conversation (the agent keeps its context); prints one JSON line per turn. Not imported by the suite.
"""

import asyncio
import json
import sys

from strands.agent.a2a_agent import A2AAgent


async def main() -> None:
    agent = A2AAgent(endpoint=sys.argv[1], timeout=60)
    for text in sys.argv[2:]:
        result = await agent.invoke_async(text)
        print(json.dumps({"text": str(result), "stop_reason": str(result.stop_reason)}), flush=True)


asyncio.run(main())
