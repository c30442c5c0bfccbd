"""The weather agent on the network: `python serve.py` (from this directory).

Agentor's routes (`POST /chat`, `GET /health`, A2A), durable run routes and a
page at http://127.0.0.1:8000/. This process also runs the agent; for a web
tier in front of a worker fleet use `agentor-temporal serve --agents agent:agent`
and `agentor-temporal worker --agents agent:agent`. Needs the `serve` extra:
`pip install 'agentor-temporal[serve]'`.
"""

from agent import agent

if __name__ == "__main__":
    agent.serve(port=8000)
