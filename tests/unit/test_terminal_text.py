"""`terminal_text` and the log lines it escapes: what would act on a terminal is shown as its
escape, the rest of the text as it is."""

from __future__ import annotations

import io
import logging

from agentor_temporal._terminal import escape_log_lines, terminal_text


def test_controls_bidi_and_lone_surrogates_are_escaped_and_text_kept() -> None:
    """Each acting character is shown as its Python escape; letters, emoji and spaces stay."""
    text = "Olá 👋\x1b[2J\r\x08\x07\x9b\u202etxt\u2028\ud800 é"
    assert terminal_text(text) == "Olá 👋\\x1b[2J\\r\\x08\\x07\\x9b\\u202etxt\\u2028\\ud800 é"
    assert terminal_text("a\nb\tc") == "a\\nb\\tc"
    assert terminal_text("a\nb\tc\x1b", lines=True) == "a\nb\tc\\x1b"


def test_a_log_line_quoting_a_providers_message_is_escaped_on_the_stream_handler() -> None:
    """The CLI's and the worker's stream handler escape a record's controls (its traceback's
    lines kept); a handler of another kind is left alone."""
    root, out = logging.getLogger(), io.StringIO()
    handler, other = logging.StreamHandler(out), logging.NullHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    root.addHandler(handler)
    root.addHandler(other)
    try:
        escape_log_lines()
        escape_log_lines()  # twice: wrapped once
        try:
            raise ValueError("refused: \x1b]0;pwned\x07")
        except ValueError:
            logging.getLogger("t").error("model said %s", "\x1b[2J", exc_info=True)
    finally:
        root.removeHandler(handler)
        root.removeHandler(other)
    said = out.getvalue()
    assert "\x1b" not in said and "\x07" not in said, said
    assert said.startswith("ERROR model said \\x1b[2J\nTraceback"), said
    assert "ValueError: refused: \\x1b]0;pwned\\x07" in said
    assert other.formatter is None


def test_right_to_left_text_keeps_its_marks() -> None:
    """A bidi mark (in Hebrew or Arabic text) reorders nothing beyond itself: kept as it is;
    an override, which reorders what follows, is escaped."""
    hebrew = "\u05e9\u05dc\u05d5\u05dd\u200f 42 \u200e\u061c"
    assert terminal_text(hebrew) == hebrew
    assert terminal_text("a\u202eb") == "a\\u202eb"
