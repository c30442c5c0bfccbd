"""SIGHUP (a terminal closed, an ssh session dropped) is handled exactly as SIGTERM is.

`tests/integration/test_exit_scripts.py` sends each signal to real scripts; SIGHUP
there only where it differs in timing (as the idle worker stops). What made its
other variants differ is pinned here: the same handler as SIGTERM's, in a call
and at exit, the same line, and the process ended by SIGHUP itself.

Also here, a drain's signals arriving while another's line is written: each is recorded
before its line is said, and each line is one write.
"""

from __future__ import annotations

import io
import signal
import sys
from typing import Any

import pytest

from agentor_temporal import _ending, _live, _sigterm
from agentor_temporal._runtime import Runtime

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP here")


@pytest.fixture
def defaults() -> Any:
    """SIGINT, SIGTERM, SIGHUP on Python's defaults for the test, then as they were."""
    names = ("SIGINT", "SIGTERM", "SIGHUP")
    kept = {name: signal.getsignal(getattr(signal, name)) for name in names}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    yield
    for name, handler in kept.items():
        signal.signal(getattr(signal, name), handler)


def test_a_call_puts_the_same_handler_on_sighup_as_on_sigterm_and_leaves_both_on(
    defaults: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """During a facade call: one handler for both; after it, both stay while the worker serves."""
    monkeypatch.setattr(_sigterm, "_serving", lambda: True)
    with _sigterm.draining_on_sigterm():
        on = signal.getsignal(signal.SIGHUP)
        assert on is signal.getsignal(signal.SIGTERM)
        assert on not in (signal.SIG_DFL, signal.default_int_handler)
    assert signal.getsignal(signal.SIGHUP) is signal.getsignal(signal.SIGTERM) is on
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    _sigterm._DRAINING.restore()  # as a later call would, once the worker stopped
    assert signal.getsignal(signal.SIGHUP) is signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_an_exit_drain_puts_the_same_handler_on_sighup_as_on_sigterm(defaults: None) -> None:
    """While the exit hook drains: one handler for both, and the process ends by the one noted."""
    with _sigterm.patient_exit(True):
        on = signal.getsignal(signal.SIGHUP)
        assert on is signal.getsignal(signal.SIGTERM)
        assert on is not signal.SIG_DFL
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
    assert _sigterm.ending_signal([signal.SIGHUP]) is signal.SIGHUP


class _Serving:
    """What `_drain_then_end` asks of the runtime: it serves, and its workers stop."""

    def __init__(self, done: list[str]) -> None:
        self.done = done

    def serving(self) -> bool:
        return True

    def stop_workers(self, timeout: float | None = None) -> None:
        self.done.append("drained")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_mid_call_drains_says_so_and_ends_the_process_by_itself(
    monkeypatch: pytest.MonkeyPatch, signum: signal.Signals
) -> None:
    """SIGHUP's drain mid-call is SIGTERM's, step for step, but ends the process by SIGHUP."""
    done: list[str] = []
    monkeypatch.setattr(Runtime, "_instance", _Serving(done))
    monkeypatch.setattr(
        _sigterm, "note_line", lambda s, then="": done.append(f"{s.name} noted{then}")
    )
    monkeypatch.setattr(_sigterm, "end_by", lambda s: done.append(f"ended by {s.name}"))
    monkeypatch.setattr(_live, "say_left_open", lambda runtime, ending=False: done.append("left"))
    monkeypatch.setattr(_sigterm, "_then", [])
    _sigterm._drain_then_end(signum)
    name = signum.name
    assert done == [f"{name} noted, then exiting", "drained", "left", f"ended by {name}"]


def test_a_sigterm_while_ctrl_cs_line_is_written_is_noted_and_ends_the_process_after_the_drain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl+C mid-tool, and a SIGTERM arriving while the Ctrl+C's line is written (a client
    escalating on reading it): the SIGTERM's handler runs nested, before the first returns.
    Before, the Ctrl+C was recorded only after its line, so the SIGTERM found no drain under
    way and ended the process at once, mid-call, saying nothing (seen in a clean-clone run:
    the script killed by SIGTERM with no 'SIGTERM:' line); the next worker ran the tool again.
    Now it is noted in its own line and the process ends by it once the call is finished."""
    done: list[str] = []
    said: list[signal.Signals] = []

    def note_line(signum: signal.Signals, then: str = "") -> None:
        said.append(signum)
        if len(said) == 1:
            _sigterm._drain_noted(signal.SIGTERM)  # delivered while the line is written

    def ended(signum: signal.Signals) -> None:
        done.append(f"ended by {signum.name}")

    def left_open(runtime: Any, ending: bool = False) -> None:
        done.append("left open said")

    monkeypatch.setattr(Runtime, "_instance", _Serving(done))
    monkeypatch.setattr(_sigterm, "note_line", note_line)
    monkeypatch.setattr(_sigterm, "end_by", ended)
    monkeypatch.setattr(_live, "say_left_open", left_open)
    monkeypatch.setattr(_sigterm, "_then", [])
    try:
        _sigterm._drain_then_end(signal.SIGINT)
    except KeyboardInterrupt:  # the process would have ended by Ctrl+C
        done.append("KeyboardInterrupt")
    assert said == [signal.SIGINT, signal.SIGTERM]
    assert done == ["drained", "left open said", "ended by SIGTERM"]


class _Interrupting(io.StringIO):
    """stderr where a signal is handled right after the first write: its handler's line."""

    fired = False

    def write(self, text: str) -> int:
        written = super().write(text)
        if not self.fired:
            self.fired = True
            _sigterm.note_line(signal.SIGTERM, ", then exiting")
        return written


def test_a_signal_handled_while_a_line_is_written_never_splits_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The io layer runs signal handlers between its writes, and `print` wrote the text and
    its newline apart: a SIGTERM after Ctrl+C put its own line inside the Ctrl+C's (seen in a
    loaded run: no stderr line began with 'SIGTERM:'). Each line is now one write."""
    err = _Interrupting()
    monkeypatch.setattr(sys, "stderr", err)
    _sigterm.note_line(signal.SIGINT, ", then stopping")
    lines = err.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines] == ["SIGINT", "SIGTERM"], lines
    assert all(line.endswith("(the next worker runs them again)") for line in lines), lines


class _Refusing(io.StringIO):
    def write(self, text: str) -> int:
        raise RuntimeError("a replaced stderr that refuses")


@pytest.mark.parametrize("stream", [None, "closed", "refusing"])
def test_a_line_said_without_a_usable_stderr_is_dropped_never_raised(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stream: str | None
) -> None:
    """A script started with `2>&-` has `sys.stderr` None: the line a drain says raised
    AttributeError from the signal's handler and ended the drain (the call in flight cut off,
    run again by the next worker; `tests/integration/test_exit_streams.py`). Any stderr that
    cannot take it loses the line only, and stdout never gets it instead."""
    err: Any = None
    if stream == "closed":
        err = io.StringIO()
        err.close()
    elif stream == "refusing":
        err = _Refusing()
    monkeypatch.setattr(sys, "stderr", err)
    _sigterm.note_line(signal.SIGTERM, ", then exiting")
    _ending.say_line("agentor_temporal: a line")
    assert capsys.readouterr().out == ""
