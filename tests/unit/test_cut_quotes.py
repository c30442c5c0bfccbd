"""A value quoted in an error, cut to fit a line, is masked before the cut."""

from __future__ import annotations

import pytest

from agentor_temporal._decided import check_execution_run_id


def test_an_execution_run_id_quoted_cut_never_shows_part_of_a_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An approval's `execution_run_id` that is not one (a key pasted in the wrong field) is
    quoted in the refusal cut at 80 characters: a key the process knows across the cut was
    left in part, which the serve's and the CLI's masking after no longer knew."""
    key = "ek-" + "Rt5" * 20
    monkeypatch.setenv("OPENAI_API_KEY", key)
    with pytest.raises(ValueError, match="is not an execution run id") as caught:
        check_execution_run_id("x" * 60 + key)
    assert key[:8] not in str(caught.value), caught.value
    assert "***" in str(caught.value) or "..." in str(caught.value)
