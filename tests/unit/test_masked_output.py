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


class _Console(io.TextIOWrapper):
    """A text stream over bytes, as a process's stdout is (its `buffer` is the bytes)."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", write_through=False)

    def written(self) -> bytes:
        self.flush()
        raw = self.buffer
        assert isinstance(raw, io.BytesIO)
        return raw.getvalue()


def test_bytes_written_on_the_buffer_are_masked_by_line_and_kept_as_they_came_otherwise() -> None:
    """A tool passing on a command's output as bytes (`sys.stdout.buffer.write`): a key in
    it, whole or cut across writes, is masked; bytes no encoding reads, and lines without a
    key, are written as they came."""
    _redact.remember(KEY)
    console = _Console()
    stream = MaskedStream(console)
    stream.buffer.write(b"\xff\xfe raw \x80 and " + KEY.encode() + b" \xc3\n")
    stream.buffer.write(b"cut: " + KEY[:10].encode())
    assert b"cut" not in console.written()
    stream.buffer.write(bytearray(KEY[10:].encode() + b"\nplain \xff\n"))
    stream.buffer.flush()
    assert console.written() == b"\xff\xfe raw \x80 and *** \xc3\ncut: ***\nplain \xff\n"


def test_text_and_bytes_keep_the_order_they_were_written_in() -> None:
    _redact.remember(KEY)
    console = _Console()
    stream = MaskedStream(console)
    stream.write("text one, ")
    stream.buffer.write(b"bytes one\nbytes held ")
    stream.write(f"text two {KEY}\n")
    stream.buffer.write(b"bytes two\n")
    stream.flush()
    assert console.written() == (b"text one, bytes one\nbytes held text two ***\nbytes two\n")


def test_a_stream_without_a_buffer_still_has_none() -> None:
    with pytest.raises(AttributeError):
        MaskedStream(io.StringIO()).buffer  # noqa: B018
