"""A command's stdout and stderr, wrapped so that known keys never show (`_masked_output`)."""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Iterator

import pytest

from agentor_temporal.activities import _redact
from agentor_temporal.activities._masked_output import MaskedStream

KEY = "sk-printed-by-threads-31337"


@pytest.fixture
def switching_often() -> Iterator[None]:
    """Threads switched as often as the interpreter can, so that a race shows."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


@pytest.mark.usefixtures("switching_often")
def test_what_many_threads_print_is_written_once_each_masked() -> None:
    """Sync tools print from their own threads (print writes a line, then its end): no
    text is lost or written twice, and no key shows."""
    _redact.remember(KEY)
    inner = io.StringIO()
    stream = MaskedStream(inner)
    start = threading.Barrier(8)
    pieces = [f"uses {KEY}\n" if i % 7 == 0 else f"piece {i} " for i in range(2000)]

    def printer() -> None:
        start.wait()
        for piece in pieces:
            stream.write(piece)
            if len(piece) % 5 == 0:
                stream.flush()

    threads = [threading.Thread(target=printer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stream.flush()
    written = inner.getvalue()
    assert KEY not in written
    for piece in set(pieces):
        shown = _redact.mask_secrets(piece)
        assert written.count(shown) == 8 * pieces.count(piece), piece


def test_a_partial_line_is_held_until_its_end_or_a_flush() -> None:
    _redact.remember(KEY)
    inner = io.StringIO()
    stream = MaskedStream(inner)
    stream.write(KEY[:8])
    assert inner.getvalue() == ""
    stream.write(KEY[8:] + " done\nnext ")
    assert inner.getvalue().endswith(" done\n") and KEY not in inner.getvalue()
    stream.flush()
    assert inner.getvalue().endswith("next ")


def test_a_threads_traceback_without_a_stderr_goes_nowhere_as_pythons_own_does(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A worker started with `2>&-` has `sys.stderr` None: Python's own hooks then print
    nothing, and ours (masking secrets) printed a failed thread's traceback on stdout, into
    the process's output (`print(file=None)` writes there)."""
    monkeypatch.setattr(threading, "excepthook", threading.__excepthook__)
    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)
    monkeypatch.setattr("warnings.formatwarning", __import__("warnings").formatwarning)
    _redact._guard_stderr_hooks()
    assert threading.excepthook is not threading.__excepthook__
    monkeypatch.setattr(sys, "stderr", None)

    def fails() -> None:
        raise RuntimeError("a tool's own thread failed")

    thread = threading.Thread(target=fails)
    thread.start()
    thread.join()
    sys.unraisablehook(
        type(
            "U",
            (),
            {
                "err_msg": None,
                "object": None,
                "exc_type": RuntimeError,
                "exc_value": RuntimeError("x"),
                "exc_traceback": None,
            },
        )()
    )
    assert capsys.readouterr().out == ""
