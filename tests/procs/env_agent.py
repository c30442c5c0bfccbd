"""The weather agent of `agent_proc.py`, for `python worker.py --agents env_agent:agent`."""

from __future__ import annotations

from agent_proc import build

agent = build()
