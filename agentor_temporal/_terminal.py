"""Text others wrote, made safe to print on a person's terminal.

A model's reply, a tool's result, a tool name the model made up, a provider's
error message and a plain client's names reach the human-readable output of the
CLI (`run`'s progress and answer, `show`, `list`, error and log lines). A
control character in them acts on the reader's terminal: an escape sequence
clears it, moves the cursor up to write over a line, sets its title or makes a
link; a carriage return or a backspace hides what came before; a bidi override
reorders what is read. Each such character is shown as its Python escape
(`\\x1b`, `\\r`, `\\u202e`) instead, so it is visible and never acts; machine
output (`--json`, `--jsonl`, `export`) keeps the exact text.
"""

from __future__ import annotations

import logging
import re

#: C0 and C1 controls (newline and tab apart), line and paragraph separators,
#: bidi embeddings, overrides and isolates (which reorder what follows them), and
#: lone surrogates (which no terminal encoding can write: printing one raises
#: UnicodeEncodeError). The bidi marks (U+200E, U+200F, U+061C) stay: right-to-left
#: text carries them, and they reorder nothing beyond themselves.
_ACTING = "\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_IN_LINE = re.compile(f"[{_ACTING}\t\n]")
_IN_LINES = re.compile(f"[{_ACTING}]")


def _escaped(match: re.Match[str]) -> str:
    return ascii(match.group())[1:-1]


def terminal_text(text: str, *, lines: bool = False) -> str:
    """`text` with every character that would act on a terminal shown as its escape.

    Args:
        text: what a model, a tool, a provider or a client wrote.
        lines: keep newlines and tabs (an answer of several lines); else they are
            escaped too, so the text stays on its one line.
    """
    return (_IN_LINES if lines else _IN_LINE).sub(_escaped, text)


class _TerminalFormatter(logging.Formatter):
    """Formats as the formatter it wraps, then escapes what would act on a terminal
    (a record's lines and a traceback's line breaks are kept)."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        return terminal_text(self.inner.format(record), lines=True)


def escape_log_lines() -> None:
    """Each line the root logger's stream handlers print (`logging.basicConfig`'s, to a
    terminal or a log collector) shows control characters escaped: a log line quotes a
    provider's error message or a tool's text as it came. A handler of another kind (a
    user's file handler, a test's capture) is left as it is."""
    for handler in logging.getLogger().handlers:
        if type(handler) is logging.StreamHandler and not isinstance(
            handler.formatter, _TerminalFormatter
        ):
            handler.setFormatter(_TerminalFormatter(handler.formatter or logging.Formatter()))
