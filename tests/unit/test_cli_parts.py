"""The CLI's pure parts, no server: ages, prune's decisions, progress lines, list queries."""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentor_temporal._cli_parser import build_parser
from agentor_temporal._inspect import list_query, summarize_events
from agentor_temporal._progress import Progress
from agentor_temporal._prune import apply, parse_age, plan
from agentor_temporal.store import Event, FileStore
from agentor_temporal.workflows import Segment

from helpers import ROOT

FIXTURES = ROOT / "tests" / "fixtures"
DAY = 86400.0


def test_ages_need_a_number_and_a_unit() -> None:
    """`--older-than` takes s/m/h/d/w ages and refuses anything else."""
    assert parse_age("30d") == 30 * DAY
    assert parse_age("12h") == 12 * 3600
    assert parse_age("90m") == 90 * 60
    assert parse_age("45s") == 45
    assert parse_age("2w") == 14 * DAY
    assert parse_age("1.5h") == 5400
    for bad in ("30", "d", "-1d", "3x", "", "30 days"):
        with pytest.raises(ValueError, match="invalid age"):
            parse_age(bad)


def test_prune_without_temporal_removes_only_old_logs_that_end_with_run_end(
    tmp_path: Path,
) -> None:
    """Without Temporal, only old logs whose last segment has run_end go; a rewritten one stays."""
    store = FileStore(tmp_path)
    now = time.time()
    for name, fixture, age in [
        ("old-done", "completed-weather-run.jsonl", 40 * DAY),
        ("old-done-2", "completed-weather-run.jsonl", 40 * DAY),
        ("new-done", "completed-weather-run.jsonl", 0.0),
        ("old-crashed", "crashed-after-tool.jsonl", 40 * DAY),
    ]:
        path = tmp_path / f"{name}.jsonl"
        shutil.copy(FIXTURES / fixture, path)
        os.utime(path, (now - age, now - age))
    (tmp_path / "old-empty.jsonl").write_text("")
    os.utime(tmp_path / "old-empty.jsonl", (now - 40 * DAY, now - 40 * DAY))

    decisions = asyncio.run(plan(store, 30 * DAY, None, now=now))
    verdict = {d.run_id: (d.remove, d.reason) for d in decisions}
    assert verdict == {
        "old-done": (True, "finished (completed), last written 40d ago"),
        "old-done-2": (True, "finished (completed), last written 40d ago"),
        "new-done": (False, "newer than the cut-off (last written 0s ago)"),
        "old-crashed": (False, "in flight: its last segment has no run_end"),
        "old-empty": (False, "the log has no events"),
    }
    # a resume appends to one of them between the decision and the removal
    os.utime(tmp_path / "old-done-2.jsonl", (now, now))
    asyncio.run(apply(store, decisions))
    assert sorted(store.list_runs()) == ["new-done", "old-crashed", "old-done-2", "old-empty"]
    assert [d.reason for d in decisions if d.run_id == "old-done-2"] == ["written to while pruning"]


def test_progress_prints_each_event_once_and_skips_a_finished_execution() -> None:
    """Progress narrates new events only, and nothing of an execution that was already over."""
    events = FileStore(FIXTURES).load("completed-weather-run")
    out = io.StringIO()
    progress = Progress(out)
    progress.feed(Segment(execution_run_id="e1", events=events[:3]))
    progress.feed(Segment(execution_run_id="e1", events=events[:3]))
    progress.feed(Segment(execution_run_id="e1", events=events))
    assert out.getvalue().splitlines() == [
        "  turn 1: asking gpt-4o-mini",
        "  turn 1: gpt-4o-mini asked for get_weather [15 tokens, 15 so far]",
        "  turn 1: calling get_weather(city='London')",
        "  turn 1: get_weather -> The weather in London is sunny and 22C.",
        "  turn 2: asking gpt-4o-mini",
        "  turn 2: gpt-4o-mini answered [15 tokens, 30 so far]",
        "  completed, 30 tokens",
    ]
    quiet = io.StringIO()
    skipping = Progress(quiet, skip_execution="e1")
    skipping.feed(Segment(execution_run_id="e1", events=events))
    assert quiet.getvalue() == "" and not skipping.narrated


def test_progress_waits_for_every_call_of_a_turn_sharing_an_id() -> None:
    """Two calls of a turn with one id: the next turn is announced after both answers."""
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    events = [
        Event(type="generation", turn=1, model="m", calls=[call, call]),
        Event(type="tool_result", turn=1, name="f", call_id="c", result="one"),
        Event(type="tool_result", turn=1, name="f", call_id="c", result="two"),
    ]
    out = io.StringIO()
    Progress(out).feed(Segment(execution_run_id="e1", events=events))
    assert out.getvalue().splitlines()[1:] == [
        "  turn 1: f -> one",
        "  turn 1: f -> two",
        "  turn 2: asking the model",
    ]


def test_store_logs_summarize_like_runs() -> None:
    """A store's log gives the same turns, tokens and status `show --store` prints."""
    completed = summarize_events("r", FileStore(FIXTURES).load("completed-weather-run"))
    assert (completed.status, completed.turns, completed.usage.total_tokens) == ("completed", 2, 30)
    crashed = summarize_events("r", FileStore(FIXTURES).load("crashed-after-tool"))
    assert crashed.status == "unfinished" and crashed.final_output is None


def test_list_filters_quote_agent_names_safely() -> None:
    """An agent name with a quote is filtered on with the other quote, never broken into."""
    assert list_query("Weather Agent", "running") == (
        "WorkflowType = 'AgentRun' AND AgentName = 'Weather Agent' AND ExecutionStatus = 'Running'"
    )
    assert "AgentName = \"O'Brien's Agent\"" in list_query("O'Brien's Agent", None)
    assert "ExecutionStatus" not in list_query(None, "failed")
    with pytest.raises(ValueError, match="both kinds of quote"):
        list_query("""it's "quoted\"""", None)


_AGENT = ["--agent", "app:agent"]


@pytest.mark.parametrize(
    "argv, run_ids",
    [
        (["show", "--", "-abc"], {"run_id": "-abc"}),
        (["export", "--", "-abc"], {"run_id": "-abc"}),
        (["resume", *_AGENT, "--", "-abc"], {"run_id": "-abc"}),
        (["fork", *_AGENT, "--fork-id=-new", "--", "-abc"], {"run_id": "-abc", "fork_id": "-new"}),
        (["approve", "--", "-abc", "-call"], {"run_id": "-abc", "call_id": "-call"}),
        (["deny", "--reason", "no", "--", "-abc", "-call"], {"run_id": "-abc"}),
        (["run", *_AGENT, "--run-id=-abc", "hi"], {"run_id": "-abc"}),
    ],
    ids=["show", "export", "resume", "fork", "approve", "deny", "run"],
)
def test_every_command_takes_a_run_id_starting_with_a_dash(
    argv: list[str], run_ids: dict[str, str]
) -> None:
    """A run id starting with `-` is taken after `--`, or after `=` as an option's value."""
    args = build_parser().parse_args(argv)
    assert {name: getattr(args, name) for name in run_ids} == run_ids


@pytest.mark.parametrize(
    "argv, hint",
    [
        (["show", "-abc"], "agentor-temporal show [options] -- -abc"),
        (["resume", *_AGENT, "-abc"], "agentor-temporal resume [options] -- -abc"),
        (["approve", "-abc", "-call"], "agentor-temporal approve [options] -- -abc"),
        (["run", *_AGENT, "--run-id", "-abc", "hi"], "goes after `=`: --run-id=-abc"),
        (["fork", "p", *_AGENT, "--fork-id", "-new"], "goes after `=`: --fork-id=-new"),
    ],
    ids=["show", "resume", "approve", "run-id", "fork-id"],
)
def test_a_run_id_read_as_an_option_is_a_usage_error_that_says_how(
    capsys: pytest.CaptureFixture[str], argv: list[str], hint: str
) -> None:
    """A run id starting with `-` given bare is a usage error naming `--` or `=`."""
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    assert info.value.code == 2
    assert hint in capsys.readouterr().err


def test_a_message_read_from_a_closed_stdin_is_a_usage_error_not_a_traceback() -> None:
    """`deny RUN CALL --reason -` (or `run -`, `fork --input -`) started with stdin closed
    (`<&-`: sys.stdin is None) says so and exits 2: it ended in an AttributeError."""
    result = subprocess.run(
        [sys.executable, "-m", "agentor_temporal", "deny", "r1", "c1", "--reason", "-"],
        preexec_fn=lambda: os.close(0),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "stdin: it is closed" in result.stderr, result.stderr
