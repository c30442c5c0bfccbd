"""`procs.cli_agents:treasurer` on a machine whose worker takes long to start.

WORKER_START_SECONDS (default 0) is added to each embedded worker's start, as a
loaded machine's imports, sandbox check and model client did (20 s at load 12):
a decision command's own worker must be given that time, not have it counted
against the `--wait` it grants other workers to take the decision.
DECISION_PATIENCE_SECONDS sets the facade's own bound (`DECISION_PATIENCE`,
60 s), so a test can show a longer `--wait` is the one honoured.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

from agentor_temporal._embedded_worker import EmbeddedWorker
from agentor_temporal.workflows import policies

from procs.cli_agents import treasurer

__all__ = ["treasurer"]

_build = EmbeddedWorker._build


def _slow_build(self: EmbeddedWorker) -> object:
    time.sleep(float(os.environ.get("WORKER_START_SECONDS", "0")))
    return _build(self)


EmbeddedWorker._build = _slow_build  # type: ignore[method-assign,assignment]

if os.environ.get("DECISION_PATIENCE_SECONDS"):
    policies.DECISION_PATIENCE = timedelta(seconds=float(os.environ["DECISION_PATIENCE_SECONDS"]))
