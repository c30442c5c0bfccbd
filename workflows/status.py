"""What a run is doing, where operators look: search attributes and metrics.

`RunStatus` keeps two search attributes current, `AgentStatus` (running,
awaiting_approval, completed, max_turns, failed) and `AgentTokens` (tokens
spent by the whole run so far; while the status stays the same, updated at
most every `policies.TOKENS_INTERVAL`), so a fleet's paused or expensive runs
are one visibility query away (`AgentStatus='awaiting_approval'`,
`AgentTokens > 100000`) in the UI, `temporal workflow list` and
`agentor-temporal pending`. Changes are upsert commands (`Attributes`), so
they are set only on runs that began after this existed (`versions.adopted`)
and only where the namespace has the attributes (the worker registers them;
see `AgentSpec.status_attributes`).

`RunMetrics` counts runs, pauses, approvals and tokens on the worker's
runtime metric meter, which skips replays: a run a second worker finishes is
counted once. Both follow the run through the events it records.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from temporalio import workflow
from temporalio.common import MetricMeter, SearchAttributeKey, SearchAttributeUpdate

from agentor_temporal.store.encoding import encodable_text
from agentor_temporal.store.events import Event, Usage
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.types import AgentSpec
from agentor_temporal.workflows.versions import adopted, level

AGENT_STATUS = SearchAttributeKey.for_keyword("AgentStatus")
AGENT_TOKENS = SearchAttributeKey.for_int("AgentTokens")

#: AgentStatus values (`run_end` statuses besides these two).
RUNNING = "running"
AWAITING_APPROVAL = "awaiting_approval"


class Attributes:
    """A run's search-attribute changes, sent to Temporal as upsert commands.

    Each upsert command is a history event, a visibility write on the server
    and a payload the SDK converts: from `policies.COALESCED_ATTRIBUTES` on, the
    changes a run makes while the workflow handles one activation go in one
    command (issued when the activation's other work is done, latest value per
    attribute); runs recorded at a lower level keep one command per change.
    """

    def __init__(self) -> None:
        self._pending: dict[str, SearchAttributeUpdate[Any]] = {}

    def upsert(self, updates: list[SearchAttributeUpdate[Any]]) -> None:
        """Set `updates` (at once, or with the activation's other changes)."""
        if level() < policies.COALESCED_ATTRIBUTES:
            workflow.upsert_search_attributes(updates)
            return
        if not self._pending:
            # the workflow's event loop runs this before the activation ends
            asyncio.get_running_loop().call_soon(self._flush)
        for update in updates:
            self._pending[update.key.name] = update

    def _flush(self) -> None:
        pending, self._pending = list(self._pending.values()), {}
        if pending:
            workflow.upsert_search_attributes(pending)


class RunStatus:
    """AgentStatus and AgentTokens of one run, upserted when they change."""

    def __init__(self) -> None:
        self.attributes = Attributes()
        self.enabled = False
        self.status: str | None = None
        self.tokens = 0
        #: when AgentTokens was last sent (None: not yet in this execution)
        self._sent_at: datetime | None = None
        #: tokens spent before this segment
        self._prior = 0
        #: call ids waiting for a person
        self._waiting: set[str] = set()

    def begin(self, spec: AgentSpec, prior: Usage) -> None:
        """Decide whether this run keeps the attributes (once, at its start)."""
        # the patch marker is recorded only where the attributes exist: a run
        # on a namespace without them has no command to version
        self.enabled = spec.status_attributes and adopted(policies.PATCH_AGENT_STATUS)
        self._prior = self.tokens = prior.total_tokens

    def on_event(self, event: Event) -> None:
        """Follow the run's recorded events."""
        if not self.enabled:
            return
        kind = event.type
        if kind == "run_start":
            self._set(RUNNING, self._prior)
        elif kind == "generation" and event.usage is not None:
            self._set(self.status or RUNNING, self.tokens + event.usage.total_tokens)
        elif kind == "approval_request" and event.call_id:
            self._waiting.add(str(event.call_id))
            self._set(AWAITING_APPROVAL, self.tokens)
        elif kind == "approval_decision" and event.call_id:
            self._waiting.discard(str(event.call_id))
            self._set(AWAITING_APPROVAL if self._waiting else RUNNING, self.tokens)
        elif kind == "run_end":
            self._set(str(event.status or "completed"), self.tokens)

    def settle(self, status: str) -> None:
        """Set a status no event records: a fork that is a snapshot of a finished run."""
        if self.enabled:
            self._set(status, self.tokens)

    def _set(self, status: str, tokens: int) -> None:
        if status == self.status and tokens == self.tokens:
            return
        tokens_only = status == self.status
        self.status, self.tokens, now = status, tokens, workflow.now()
        # tokens alone are sent at most once per interval (a short run's count
        # goes with its end); the next change of status takes them
        if (
            tokens_only
            and level() >= policies.COALESCED_ATTRIBUTES
            and self._sent_at is not None
            and now - self._sent_at < policies.TOKENS_INTERVAL
        ):
            return
        self._sent_at = now
        self.attributes.upsert([AGENT_STATUS.value_set(status), AGENT_TOKENS.value_set(tokens)])


class RunMetrics:
    """Run-level counters on the worker's metric meter (a no-op without metrics)."""

    def __init__(self) -> None:
        self._meter: MetricMeter | None = None
        self._counters: dict[str, Any] = {}
        self._waiting: set[str] = set()
        self._new_run = False

    def begin(self, spec: AgentSpec, new_run: bool) -> None:
        """Label everything with the agent and model; `new_run`: not a resumed segment."""
        # a label the core cannot take (a lone surrogate) failed every workflow task
        self._meter = workflow.metric_meter().with_additional_attributes(
            {"agent": encodable_text(spec.name), "model": encodable_text(spec.model)}
        )
        self._new_run = new_run

    def _add(self, name: str, description: str, value: int = 1, **labels: str) -> None:
        if self._meter is None or value <= 0:
            return
        counter = self._counters.get(name)
        if counter is None:
            counter = self._counters[name] = self._meter.create_counter(name, description)
        counter.add(value, labels or None)

    def on_event(self, event: Event) -> None:
        """Follow the run's recorded events."""
        kind = event.type
        if kind == "run_start" and self._new_run:
            self._add("agentor_runs_started", "Agent runs started")
        elif kind == "generation" and event.usage is not None:
            self._add("agentor_input_tokens", "Prompt tokens spent", event.usage.input_tokens)
            self._add("agentor_output_tokens", "Completion tokens spent", event.usage.output_tokens)
        elif kind == "approval_request" and event.call_id:
            if not self._waiting:
                self._add("agentor_runs_paused", "Times a run began waiting for a person")
            self._waiting.add(str(event.call_id))
            self._add("agentor_approvals_requested", "Tool calls put to a person", tool=_s(event))
        elif kind == "approval_decision" and event.call_id:
            self._waiting.discard(str(event.call_id))
            self._add(
                "agentor_approvals_decided",
                "Decisions on tool calls (approved, denied, expired)",
                tool=_s(event),
                decision=str(event.status),
            )
        elif kind == "run_end":
            self._add(
                "agentor_runs_ended",
                "Agent run segments ended, by status",
                status=str(event.status or "completed"),
            )


def _s(event: Event) -> str:
    return str(event.name or "")
