"""Agents whose tool breaks the worker serving it, for `worker.py --agents loop_breakers:agent`.

AGENT_BREAK says how: `callback_exit` (a callback the tool schedules on the
worker's loop calls sys.exit), `callback_interrupt` (one raises
KeyboardInterrupt), `loop_stop` (one calls loop.stop()), `thread_exit` (a
thread the tool starts calls sys.exit), `thread_sigterm` (one raises SIGTERM in
the process), `thread_os_exit` (one calls os._exit). The tool writes its ledger
line (AGENT_LEDGER) first, then breaks once per worker process: a second
worker runs it plainly. Also MODEL_BASE_URL, AGENT_TASK_QUEUE.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time

from agentor_temporal import function_tool

from helpers import ledger_write, weather_agent

#: Set by the first worker that breaks: a file whose presence means "already broken once".
_BROKEN = os.environ.get("AGENT_BROKEN_FLAG", "")


def _first_time() -> bool:
    if not _BROKEN:
        return True
    try:
        with open(_BROKEN, "x"):
            return True
    except FileExistsError:
        return False


def _exit() -> None:
    sys.exit(3)


def _interrupt() -> None:
    raise KeyboardInterrupt


@function_tool
async def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: The city to look up.
    """
    ledger_write(os.environ.get("AGENT_LEDGER"), "get_weather", city)
    how = os.environ.get("AGENT_BREAK", "")
    if _first_time():
        loop = asyncio.get_running_loop()
        if how == "callback_exit":
            loop.call_soon(_exit)
        elif how == "callback_interrupt":
            loop.call_later(0.01, _interrupt)
        elif how == "loop_stop":
            loop.call_soon(loop.stop)
        elif how == "thread_exit":
            threading.Thread(target=_exit).start()
        elif how == "thread_sigterm":
            threading.Thread(target=signal.raise_signal, args=(signal.SIGTERM,)).start()
        elif how == "thread_os_exit":
            threading.Thread(target=os._exit, args=(4,)).start()
            time.sleep(5)
    return f"The weather in {city} is sunny and 22C."


agent = weather_agent(
    base_url=os.environ.get("MODEL_BASE_URL", "http://127.0.0.1:9/v1"),
    task_queue=os.environ.get("AGENT_TASK_QUEUE", "agentor"),
    tools=[get_weather],
)
