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

Past `print` too: a tool passing on the output of a command it ran as the bytes it came
as (`sys.stdout.buffer.write(proc.stdout)`: a `curl -v`'s `Authorization` line) wrote
under the mask, so each stream's byte buffer is masked alike (`MaskedBuffer`); and
`sys.__stdout__`/`sys.__stderr__`, the interpreter's own streams, are the masked ones.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, BinaryIO, TextIO

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
        self._buffer: MaskedBuffer | None = None

    @property
    def buffer(self) -> MaskedBuffer:
        """The stream's byte buffer, masked as its text is (made at first use)."""
        with self._lock:
            if self._buffer is None:
                encoding = getattr(self._inner, "encoding", None) or "utf-8"
                self._buffer = MaskedBuffer(self._inner.buffer, self, encoding)
            return self._buffer

    def write(self, text: str) -> int:
        with self._lock:
            if self._buffer is not None:
                # bytes written before this text, still held for their line's end, go first
                self._buffer.write_held()
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
            self.write_held()
            if self._buffer is not None:
                self._buffer.write_held()
        self._inner.flush()

    def write_held(self) -> None:
        """Write (masked) the text held for its line's end: bytes written next go after it."""
        with self._lock:
            if self._held:
                held, self._held = self._held, ""
                self._write(mask_secrets(held))

    def __getattr__(self, name: str) -> Any:
        # fileno, isatty, encoding, ...: the wrapped stream's
        return getattr(self._inner, name)


class MaskedBuffer:
    """A stream's byte buffer writing every line with known keys masked, as `MaskedStream`
    writes its text: a line is held until its end or a flush, read in the stream's encoding
    (a byte it cannot read kept as it is), and written as it came unless a key was in it."""

    def __init__(self, inner: BinaryIO, text: MaskedStream, encoding: str) -> None:
        self._inner = inner
        self._text = text
        self._encoding = encoding
        self._held = b""

    def write(self, data: Any) -> int:
        data = memoryview(data).tobytes()  # a bytes-like object, as the buffer takes
        with self._text._lock:
            # text written before these bytes goes first, as it would unwrapped once flushed
            self._text.write_held()
            self._text._inner.flush()
            held = self._held + data
            cut = held.rfind(b"\n") + 1
            if len(held) - cut > _HELD_CHARS:
                cut = len(held)
            self._held = held[cut:]
            if cut:
                self._inner.write(self._masked(held[:cut]))
        return len(data)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def write_held(self) -> None:
        """Write (masked) the bytes held for their line's end: text written next goes after."""
        with self._text._lock:
            if self._held:
                held, self._held = self._held, b""
                self._inner.write(self._masked(held))
                self._inner.flush()

    def flush(self) -> None:
        self.write_held()
        self._inner.flush()

    def _masked(self, data: bytes) -> bytes:
        try:
            text = data.decode(self._encoding, "surrogateescape")
        except LookupError:
            text = data.decode("utf-8", "surrogateescape")
        masked = mask_secrets(text)
        if masked == text:
            return data
        return masked.encode(self._encoding, "surrogateescape")

    def __getattr__(self, name: str) -> Any:
        # fileno, isatty, raw, ...: the wrapped buffer's
        return getattr(self._inner, name)


def guard_streams() -> None:
    """Wrap `sys.stdout` and `sys.stderr` in `MaskedStream` (once)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, MaskedStream):
            masked = MaskedStream(stream)
            setattr(sys, name, masked)
            if getattr(sys, f"__{name}__") is stream:
                # the interpreter's own stream is the same file: a tool printing to it
                # (`file=sys.__stderr__`) wrote past the mask
                setattr(sys, f"__{name}__", masked)
