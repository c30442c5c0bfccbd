"""Agentor 0.1.1's own event and store modules, loaded from its wheel.

Only `agentor/engine/events.py` and `store.py` are needed, and the package's
`__init__` pulls in litellm and more; so those two files are read out of the
wheel (downloaded by `scripts/test` into `.cache/wheels`) and executed under
stub parent packages. Nothing of Agentor is committed here.
"""

from __future__ import annotations

import glob
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WHEEL_GLOB = str(ROOT / ".cache" / "wheels" / "agentor-0.1.1-*.whl")


def load() -> Any:
    """The `agentor.engine.store` module of Agentor 0.1.1, or None if the wheel is absent."""
    if "agentor.engine.store" in sys.modules:
        return sys.modules["agentor.engine.store"]
    wheels = glob.glob(WHEEL_GLOB)
    if not wheels:
        return None
    with zipfile.ZipFile(wheels[0]) as wheel:
        sources = {
            name: wheel.read(f"agentor/engine/{name}.py").decode() for name in ("events", "store")
        }
    for package in ("agentor", "agentor.engine"):
        module = types.ModuleType(package)
        module.__path__ = []
        sys.modules[package] = module
    for name in ("events", "store"):
        full = f"agentor.engine.{name}"
        module = types.ModuleType(full)
        module.__file__ = f"{wheels[0]}/agentor/engine/{name}.py"
        sys.modules[full] = module
        exec(compile(sources[name], module.__file__, "exec"), module.__dict__)
    return sys.modules["agentor.engine.store"]


def tools() -> Any:
    """The `agentor.engine.tools` module of Agentor 0.1.1 (its `stringify`: a tool's
    return value as the text the model reads), or None if the wheel is absent."""
    if "agentor.engine.tools" in sys.modules:
        return sys.modules["agentor.engine.tools"]
    if load() is None:
        return None
    wheel_path = glob.glob(WHEEL_GLOB)[0]
    with zipfile.ZipFile(wheel_path) as wheel:
        source = wheel.read("agentor/engine/tools.py").decode()
    module = types.ModuleType("agentor.engine.tools")
    module.__file__ = f"{wheel_path}/agentor/engine/tools.py"
    sys.modules[module.__name__] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module
