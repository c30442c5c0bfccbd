"""`env_agent`'s agent behind a slow import (a model loaded as the module is imported).

`AGENT_IMPORT_GATE`: a path; the import touches `<path>.importing`, then waits
(up to 60 s) for the path to exist, so a test can stop a worker while it starts.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

gate = os.environ.get("AGENT_IMPORT_GATE")
if gate:
    Path(f"{gate}.importing").touch()
    deadline = time.monotonic() + 60
    while not Path(gate).exists() and time.monotonic() < deadline:
        time.sleep(0.02)

from agent_proc import build  # noqa: E402 - after the gate, as a slow import would be

agent = build()
