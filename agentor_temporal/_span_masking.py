"""Spans leave the process with every key it knows masked.

A span's attributes may carry a run's content (`gen_ai.input.messages` with
content capture on), and history holds a run's input as its client sent it: a
key pasted into a run started by a plain Temporal client reaches the span as
it is, where the JSONL and `show` mask it. Workflow code cannot mask it (it
knows no secrets), so the exporters this package sets up are wrapped: each
span is copied with its attributes, its events' attributes, its status and
its name masked of the keys this process knows (`_redact.secrets`), error text
(a status, an exception event) redacted as any error is. A span holding none
is exported as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentor_temporal.activities._redact import clean, mask_secrets, secrets


class MaskingExporter:
    """A `SpanExporter` that masks known keys in each span, then hands it to `inner`."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def export(self, spans: Sequence[Any]) -> Any:
        if secrets():
            spans = [masked_span(span) for span in spans]
        return self.inner.export(spans)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))


def _value(value: Any, mask: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_value(item, mask) for item in value)
    return value


def _attributes(attributes: Mapping[str, Any] | None, mask: Callable[[str], str]) -> dict[str, Any]:
    return {name: _value(value, mask) for name, value in (attributes or {}).items()}


def masked_span(span: Any) -> Any:
    """`span` (a `ReadableSpan`) with every known key masked (the same span when none is)."""
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.trace import Status

    attributes = _attributes(span.attributes, mask_secrets)
    events = [
        Event(
            event.name,
            _attributes(event.attributes, clean if event.name == "exception" else mask_secrets),
            event.timestamp,
        )
        for event in span.events
    ]
    description = span.status.description
    status = Status(span.status.status_code, clean(description)) if description else span.status
    name = mask_secrets(span.name)
    if (
        attributes == dict(span.attributes or {})
        and all(a.attributes == b.attributes for a, b in zip(events, span.events, strict=True))
        and status.description == description
        and name == span.name
    ):
        return span
    return ReadableSpan(
        name=name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=attributes,
        events=events,
        links=span.links,
        kind=span.kind,
        status=status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )
