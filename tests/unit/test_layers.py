"""The package's layout: one namespace, one-way layers that cover every module."""

from __future__ import annotations

import pkgutil
import sys
from pathlib import Path

import tomllib

import agentor_temporal

ROOT = Path(__file__).resolve().parents[2]


def _modules() -> list[str]:
    names = ["agentor_temporal"]
    for info in pkgutil.walk_packages(agentor_temporal.__path__, "agentor_temporal."):
        names.append(info.name)
    return sorted(names)


def _layers() -> list[list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contract = next(c for c in config["contracts"] if c["type"] == "layers")
    return [[m.strip() for m in line.replace("|", ":").split(":")] for line in contract["layers"]]


def test_every_module_is_in_a_layer() -> None:
    """A module left out of the layers contract would escape the one-way rule unnoticed."""
    entries = [m for layer in _layers() for m in layer]
    containers = {"agentor_temporal", "agentor_temporal.workflows"}
    missing = [
        name
        for name in _modules()
        if name not in containers
        and not any(name == e or name.startswith(e + ".") for e in entries)
    ]
    assert missing == []


def test_the_package_imports_lazily() -> None:
    """The workflow sandbox imports the package afresh per run: that must load nothing else."""
    import subprocess

    code = (
        "import sys, agentor_temporal; "
        "print(sorted(m for m in sys.modules if m.startswith('agentor_temporal.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/"
    )
    assert out.stdout.strip() == "[]"
    from agentor_temporal import Agentor, AgentorPlugin, TemporalStore

    assert Agentor.__name__ == "Agentor" and AgentorPlugin and TemporalStore
    assert set(agentor_temporal.__all__) == set(agentor_temporal._EXPORTS)
