"""Agents that say where their Temporal is (`Agentor(temporal=...)`), for worker.py tests.

`agent` points at AGENT_TEMPORAL; `elsewhere` at AGENT_TEMPORAL_OTHER.
"""

from __future__ import annotations

import os

from helpers import weather_agent

agent = weather_agent(
    base_url=os.environ.get("MODEL_BASE_URL", "http://127.0.0.1:9/v1"),
    task_queue=os.environ.get("AGENT_TASK_QUEUE", "agentor"),
    temporal=os.environ["AGENT_TEMPORAL"],
)
elsewhere = weather_agent(
    name="Elsewhere Agent",
    base_url=os.environ.get("MODEL_BASE_URL", "http://127.0.0.1:9/v1"),
    task_queue=os.environ.get("AGENT_TASK_QUEUE", "agentor"),
    temporal=os.environ.get("AGENT_TEMPORAL_OTHER", "127.0.0.1:9"),
)
