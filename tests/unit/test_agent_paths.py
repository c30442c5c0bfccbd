"""An agent path that cannot be loaded is refused with one line naming why."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agentor_temporal.worker import ConfigError, import_object


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("raise RuntimeError('boom')", "failed: RuntimeError: boom"),
        ("import sys\nsys.exit(3)", "called sys.exit(3) while being imported"),
        ("import argparse\nargparse.ArgumentParser().parse_args(['--nope'])", "sys.exit(2)"),
    ],
    ids=["raises", "exits", "parses-arguments"],
)
def test_a_module_that_fails_or_exits_at_import_is_a_config_error(
    body: str, said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module exiting while imported is refused like one raising (it ended workers silently)."""
    name = f"agent_mod_{abs(hash(body))}"
    (tmp_path / f"{name}.py").write_text(body + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(ConfigError) as info:
        import_object(f"{name}:agent")
    assert said in str(info.value) and f"{name}:agent" in str(info.value)
