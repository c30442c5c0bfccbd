"""Holds a launcher's own import of `LAUNCH_GATE_MODULE` (the interpreter importing the package
at start, 1-2 s of it) until the path `LAUNCH_GATE` exists, having touched `<path>.importing`,
so a test can stop the process right then. Put this folder first on PYTHONPATH."""

from __future__ import annotations

import os
import sys
import time
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any


class _Gate:
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        gate = os.environ.get("LAUNCH_GATE")
        if gate and name == os.environ.get("LAUNCH_GATE_MODULE"):
            Path(f"{gate}.importing").touch()
            deadline = time.monotonic() + 60
            while not Path(gate).exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        return None  # the import goes on as usual


sys.meta_path.insert(0, _Gate())
