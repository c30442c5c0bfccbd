"""`FailureBudget`: Agentor's limit on a tool that keeps failing.

A tool whose calls fail `max_tool_failures` times is withdrawn: its schema
is no longer offered, a call to it anyway is answered "disabled", and the
model is told once, after the turn's results. Outcomes a person caused
(denied, expired approvals) are decisions, not malfunctions, and do not
count; a call to a tool that does not exist does, or a model inventing one
would burn every turn.
"""

from __future__ import annotations

from typing import Any

from agentor_temporal.store.events import Event

#: Tool results a person caused: not malfunctions, so not in the failure budget.
DECIDED_ERRORS = ("denied", "approval expired")


class FailureBudget:
    """Failures per tool, and the tools withdrawn because of them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.failures: dict[str, int] = {}
        #: withdrawn tools, in the order they were withdrawn
        self.disabled: list[str] = []

    def count(self, results: list[Event]) -> list[str]:
        """Count the turn's failed results; return the tools withdrawn just now."""
        newly: list[str] = []
        for event in results:
            if (
                event.error is None
                or event.error in DECIDED_ERRORS
                or event.name is None
                or event.name in self.disabled
            ):
                continue
            self.failures[event.name] = self.failures.get(event.name, 0) + 1
            if self.failures[event.name] >= self.limit:
                self.disabled.append(event.name)
                newly.append(event.name)
        return newly

    def notice(self, name: str) -> dict[str, Any]:
        """The user message telling the model a tool was withdrawn."""
        count = self.failures[name]
        return {
            "role": "user",
            "content": (
                f"The tool '{name}' failed {count} "
                f"time{'s' if count != 1 else ''} and is now unavailable. "
                "Answer without it, or explain what you cannot do."
            ),
        }
