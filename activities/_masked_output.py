"""What a command's process prints on stdout and stderr, past logging, with known keys masked.

A tool runs in the worker's process (the `worker` command, or the embedded
worker of `run`, `resume`, `serve`): its `print(f"using {token}")` goes to the
process's stdout as it is, where a container's log collector keeps it, while
its log records are masked (`_redact.guard_handlers`). So the streams of a
command are wrapped once: each whole line is written with every key the
process knows masked (`mask_secrets`: content is left as it is otherwise, a
URL in `show`'s output stays whole). A line is held until its end, or until
the stream is flushed, so a key written in pieces is masked whole. Text the
stream cannot encode (a lone surrogate) is written replaced, never raised.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, TextIO

from agentor_temporal.activities._redact import mask_secrets
from agentor_temporal.store.encoding import encodable_text

#: A line held longer than this is written as it is so far (masked): a progress bar
#: without line breaks still shows.
_HELD_CHARS = 65536


class MaskedStream:
    """A text stream writing every line to `inner` with known keys masked."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner
        self._held = ""
        # sync tools print from their threads: without it two writes could both take
        # the same held text (printed twice) or drop one another's. Reentrant: a signal
        # handler printing in the main thread while it writes must not wait on itself.
        self._lock = threading.RLock()

    def write(self, text: str) -> int:
        with self._lock:
            held = self._held + text
            cut = held.rfind("\n") + 1
            if len(held) - cut > _HELD_CHARS:
                cut = len(held)
            self._held = held[cut:]
            if cut:
                self._write(mask_secrets(held[:cut]))
        return len(text)

    def _write(self, text: str) -> None:
        # a lone surrogate (a person's reason, a run a plain client started) as
        # U+FFFD, and a character the stream's encoding lacks replaced: `show`
        # ended in a traceback at the first line holding one
        text = encodable_text(text)
        try:
            self._inner.write(text)
        except UnicodeEncodeError:
            encoding = getattr(self._inner, "encoding", None) or "utf-8"
            self._inner.write(text.encode(encoding, "replace").decode(encoding))

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        with self._lock:
            if self._held:
                held, self._held = self._held, ""
                self._write(mask_secrets(held))
        self._inner.flush()

    def __getattr__(self, name: str) -> Any:
        # fileno, isatty, encoding, buffer, ...: the wrapped stream's
        return getattr(self._inner, name)


def guard_streams() -> None:
    """Wrap `sys.stdout` and `sys.stderr` in `MaskedStream` (once)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, MaskedStream):
            setattr(sys, name, MaskedStream(stream))
