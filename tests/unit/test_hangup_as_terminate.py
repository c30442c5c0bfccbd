"""SIGHUP (the terminal closed) is handled as SIGTERM, by the very same handler, in the CLI's
commands and in the `worker` process.

The integration tests send a real SIGHUP only where its handling differs; where it is the
same code path as SIGTERM or Ctrl+C (an `approve` or `resume` interrupted, a worker stopped
mid-call), these pin that it is, and the SIGTERM/SIGINT variants test the path itself.
"""

from __future__ import annotations

import asyncio
import signal

import pytest

from agentor_temporal import cli
from agentor_temporal._worker_stop import on_stop_signals

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def test_a_commands_sighup_gets_the_handler_of_its_sigterm_and_ctrl_c() -> None:
    """`python -m agentor_temporal ...` (`cli.main` installs `INTERRUPTS`): one handler for the
    three; what it does depends only on whether the command's outcome is decided."""
    with cli.INTERRUPTS.installed():
        handlers = {sig: signal.getsignal(sig) for sig in STOPS}
    assert handlers[signal.SIGHUP] is handlers[signal.SIGTERM] is handlers[signal.SIGINT]
    assert callable(handlers[signal.SIGHUP])
    assert handlers[signal.SIGHUP] not in (signal.SIG_DFL, signal.SIG_IGN)
    # and they are put back after
    assert all(signal.getsignal(sig) is not handlers[sig] for sig in STOPS)


@pytest.mark.parametrize("signum", STOPS, ids=lambda s: s.name)
def test_an_undecided_commands_interrupt_ends_its_wait_as_ctrl_c_does(
    signum: signal.Signals, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the outcome is decided each of the three raises KeyboardInterrupt (the command
    says "interrupted" and drains), remembering which signal ended it."""
    ended: list[signal.Signals] = []
    monkeypatch.setattr(cli, "_ENDED_BY", ended)
    with pytest.raises(KeyboardInterrupt):
        cli._raise_interrupt(signum, None)
    assert ended == [signum]


def test_a_workers_sighup_gets_the_handler_of_its_sigterm_and_sigint() -> None:
    """`worker` (and `worker.py`): the first of any of the three stops polling and drains,
    a second abandons the calls: the same handler for all."""
    before = {sig: signal.getsignal(sig) for sig in STOPS}
    loop = asyncio.new_event_loop()
    try:
        on_stop_signals(loop, asyncio.Event())
        handlers = {sig: signal.getsignal(sig) for sig in STOPS}
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        loop.close()
    assert handlers[signal.SIGHUP] is handlers[signal.SIGTERM] is handlers[signal.SIGINT]
    assert handlers[signal.SIGHUP] is not before[signal.SIGHUP]
