"""Names, timeouts and retry policies: every Temporal knob in one place.

Each value carries the reason for it. Recovery speed after a worker dies is
set by three of them: an in-flight activity is retried once its heartbeat
timeout fires, and a workflow task stuck on a dead worker's sticky queue moves
after the sticky timeout (see `worker.py`). Short values notice a lost worker
in seconds; the cost is heartbeat traffic, which the activities throttle.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

# every patch id and behaviour level, re-exported: read as policies.NAME
from agentor_temporal.workflows.changes import *  # noqa: F403

#: Workflow type name: written into history and used by plain clients.
WORKFLOW_TYPE = "AgentRun"
#: Default task queue, shared by the facade, the worker and the CLI.
TASK_QUEUE = "agentor"
#: The longest task queue name Temporal takes (its `limit.maxIDLength`, in
#: bytes): `run_agent` refuses a longer one, whose child start the server would
#: refuse in every workflow task of the caller's workflow.
MAX_TASK_QUEUE_BYTES = 1000
#: Task queue names the server keeps for itself: it refuses a start on one.
RESERVED_TASK_QUEUE_PREFIX = "/_sys/"


def validate_task_queue(task_queue: object) -> str:
    """Return `task_queue` if a worker of ours can poll it.

    Temporal takes a blank name, one with whitespace at either end and one
    with control characters, and a run started on it waits for ever: no
    worker's `--task-queue` or environment setting names it (shells, env
    files and YAML lose the whitespace, and cannot carry the rest). So these
    are refused, as are what the server would refuse (no text, over
    `MAX_TASK_QUEUE_BYTES`, the reserved prefix), before anything starts.

    Raises:
        ValueError: naming the value and what is wrong with it.
    """
    if not isinstance(task_queue, str) or len(task_queue.encode()) > MAX_TASK_QUEUE_BYTES:
        shown = repr(task_queue)
        raise ValueError(
            f"task_queue must be text of at most {MAX_TASK_QUEUE_BYTES:,} bytes (Temporal's "
            f"limit), got {shown if len(shown) <= 100 else shown[:97] + '...'}"
        )
    problem = None
    if not task_queue.strip():
        problem = "is blank"
    elif task_queue != task_queue.strip():
        problem = "begins or ends with whitespace"
    elif not all(c.isprintable() or c == " " for c in task_queue):
        problem = "holds control or invisible characters"
    elif task_queue.startswith(RESERVED_TASK_QUEUE_PREFIX):
        problem = f"starts with {RESERVED_TASK_QUEUE_PREFIX!r}, which Temporal reserves"
    if problem is not None:
        shown = ascii(task_queue if len(task_queue) <= 60 else task_queue[:60] + "...")
        raise ValueError(
            f"task_queue {shown} {problem}: no worker would poll it, and runs on it "
            f"would wait for ever. Name the queue your workers poll (default {TASK_QUEUE!r})."
        )
    return task_queue


# Activity names are written into history and shown in the UI: renaming one
# is a versioning change (workflow.patched), never a refactor.
DESCRIBE_AGENT = "describe_agent"
GENERATE = "generate"
CALL_TOOL = "call_tool"
JOURNAL = "journal"
NEEDS_APPROVAL = "needs_approval"
RUN_OUTCOME = "run_outcome"

#: A model call may legitimately think for minutes; heartbeats, not this
#: timeout, are what notice a dead worker.
MODEL_START_TO_CLOSE = timedelta(minutes=10)
#: A whole reply within this (MODEL_START_TO_CLOSE's less a margin), and a
#: streamed one's chunks no further apart. The client's timeout (the same
#: 570 s) bounds each read, not the reply: an endpoint that keeps the
#: connection open sending keep-alives (a proxy waiting on a stuck upstream,
#: a body trickled a byte at a time) held the request for ever, each attempt
#: timing out and the next joining it.
MODEL_REPLY_LIMIT = timedelta(seconds=570)
#: How long the model client waits to connect to the endpoint (TCP and TLS).
#: An endpoint that silently drops connection attempts (a firewall, a host
#: that is down) held each try for the kernel's SYN retries (~127 s) when
#: the connect was bounded by the request's 570 s; a reachable endpoint
#: connects in well under a second, a slow TLS handshake in a few.
MODEL_CONNECT_LIMIT = timedelta(seconds=30)
#: Long enough for a busy 2-core worker to keep beating, short enough that a
#: killed worker's generation is retried elsewhere within seconds. The first
#: beat comes 2 s after the server started the call (HEARTBEAT_INTERVAL) and
#: the SDK sends later ones every 80% of this (4 s), leaving 3 s of slack for
#: a worker that runs late; 4 s lost live calls under load (each costs a
#: second model request), and 6 s bought nothing more in the same benchmark.
MODEL_HEARTBEAT_TIMEOUT = timedelta(seconds=5)
#: Provider hiccups (429, 5xx, connection resets) are retried with backoff.
#: No attempt limit here: a lost worker or a worker stopping must never use
#: up a run's budget (that would record our machinery's failure as the
#: model's). The activity itself makes a provider failure final once
#: MODEL_RETRY_BUDGET has passed since the call was first scheduled.
MODEL_RETRY_POLICY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=0,
    non_retryable_error_types=["ModelRequestError"],
)
#: How long a provider may keep failing (429, 5xx, unreachable) before the
#: run fails and `resume` can continue it: about what 15 attempts with this
#: backoff took when attempts were the limit.
MODEL_RETRY_BUDGET = timedelta(minutes=5)
#: A reply that is not a usable completion (`choices: []`, a call without a
#: name) is retried this long, 1 s apart, then the run fails saying what was
#: wrong: a garbled proxy answer gets a second chance, a model that always
#: answers so does not hold the run for minutes.
MALFORMED_REPLY_BUDGET = timedelta(seconds=5)
MALFORMED_REPLY_RETRY_DELAY = timedelta(seconds=1)
#: A worker whose agent is built differently from a run's (or lacks it)
#: hands the run's tasks back this often, for a worker with the run's
#: definition to take (see activities/_definition.py); after the patience
#: the run fails naming what differs. Five minutes covers a rolling deploy's
#: overlap; runs are never mixed meanwhile.
DEFINITION_RETRY_DELAY = timedelta(seconds=1)
DEFINITION_PATIENCE = timedelta(minutes=5)

#: Default for one tool call; a tool may set its own with `timeout=`. The
#: activity enforces it and answers the model "timed out" (a tool's own
#: outcome, never retried); the activity's start-to-close is that plus
#: TOOL_TIMEOUT_GRACE, so it fires only for a worker that stopped answering.
TOOL_START_TO_CLOSE = timedelta(minutes=30)
TOOL_TIMEOUT_GRACE = timedelta(seconds=30)
#: The longest a tool's `timeout=` or `approval_timeout=` may be, in seconds
#: (about 31 years: far past any call or decision a run waits for). A run
#: turns each into a timer or an activity timeout in workflow code, where a
#: value Python's timedelta cannot hold (inf, 1e20) failed every workflow
#: task of the run, for ever.
MAX_WAIT_SECONDS = 1_000_000_000
#: As for the model: a killed worker's tool call reruns elsewhere in seconds.
#: A false alarm here is worse than for the model (an in-flight tool runs
#: twice, though with the same idempotency key), so no shorter than the model's.
TOOL_HEARTBEAT_TIMEOUT = timedelta(seconds=5)
#: A tool's own outcome (return, raise, timeout) answers the model inside
#: the activity and is never retried (unless the tool opts in with
#: `retries=N`); only lost workers, stopping workers and a worker with a
#: different definition reach this policy, and none of those is the tool's
#: answer, so there is no attempt limit (starts lost with their worker are
#: bounded by LOST_TOOL_STARTS instead). The first retry is almost immediate:
#: the heartbeat timeout has already waited for the dead worker, and waiting
#: again only adds to recovery (1 s here was 1 s of the measured recovery
#: time; see bench/recovery.py).
TOOL_RETRY_POLICY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=0,
)

#: Starts of one tool call lost with their worker (its process died, or the
#: tool held the GIL past the heartbeat timeout) after which it is not
#: started again: the model is answered that it never finished. A tool that
#: kills its own process would otherwise crash every worker of a fleet in
#: turn, for ever. Counted from the second attempt on (see
#: `activities/_starts.py`), so a call is started at most this plus one times.
LOST_TOOL_STARTS = 2
#: Sends of one model request lost with their worker (after the first) after
#: which it is not sent again: the run fails saying so, and `resume` continues
#: it. A request whose worker dies every time (killed for its memory on a huge
#: body, a crash in native code) would otherwise be sent by every worker of a
#: fleet in turn, for ever, each send a paid request. Counted as for tools
#: (`activities/_starts.py`): a request is sent at most this plus one times.
LOST_MODEL_STARTS = 2

#: Heartbeat cadence of long activities, on the server's clock. Every
#: heartbeat is a write on the server, so the first comes only after this
#: long (most model calls and tools finish before it and never beat), and
#: the SDK sends the rest at most every 80% of the timeout. 2 s leaves 3 s
#: of slack inside a 5 s timeout for a worker busy enough to beat late.
HEARTBEAT_INTERVAL = timedelta(seconds=2)
#: How long `Agentor.approve`/`deny` wait for a worker to take the decision
#: before raising `TimeoutError` (a worker that is up takes it in
#: milliseconds; with none, the call would otherwise wait for ever).
DECISION_PATIENCE = timedelta(seconds=60)
#: outcomes of decisions sent by signal an execution keeps for their senders'
#: `signalled_decision` queries (the oldest go first)
SIGNALLED_DECISIONS_KEPT = 100
#: how often a sender asks what its decision sent by signal came to
SIGNALLED_DECISION_POLL = timedelta(milliseconds=100)
#: How long a sync tool call whose run was cancelled is waited for (a thread
#: cannot be stopped), so that the run records what it did rather than run it
#: again on resume. Past it, the call is abandoned and answered "still running
#: after its run was cancelled", and the run closes as cancelled.
CANCEL_GRACE = timedelta(seconds=60)
#: How long a run cancelled while its model request is in flight waits for
#: that answer (`policies.GENERATION_KEPT`): the smaller of the request's own
#: timeout and CANCEL_GRACE, the patience a cancel already gives a sync tool's
#: thread. Past it the request is stopped and resume sends it again.
ANSWER_GRACE = min(CANCEL_GRACE, MODEL_START_TO_CLOSE)
#: How long before its own time limit (a start's `execution_timeout` or
#: `run_timeout`) a run stops itself, settling its turn as a cancel does
#: (`policies.DEADLINE_SETTLES`): its running calls are asked to stop and
#: answered, and its `run_end` is recorded. Timed out by the server instead,
#: the run recorded nothing of its turn, and `resume` ran its finished calls
#: again. A running call learns it is to stop from the answer to its next
#: heartbeat, which the SDK sends at most every 0.8 TOOL_HEARTBEAT_TIMEOUT
#: (measured: 3 s after the request, a 12 s run's async call had not yet
#: heard, and the server timed the run out); then two workflow tasks record
#: and close. A limit under twice this keeps half of itself
#: (DEADLINE_MARGIN_SHARE), so a run limited to less than ~12 s may still be
#: timed out by the server mid-turn.
DEADLINE_MARGIN = timedelta(seconds=10)
DEADLINE_MARGIN_SHARE = 0.5
#: Of that margin, what a run stopped by its time limit keeps for its closing
#: (the workflow tasks that record the turn and close, a mirror step): a sync
#: tool's thread is waited for until then at most, not `CANCEL_GRACE`, so the
#: server does not time the run out first, losing the turn's finished calls
#: (which `resume` then ran again). Half the margin at most, for short limits.
DEADLINE_CLOSE = timedelta(seconds=3)
#: The least a local model request of a run with a time limit is given when its
#: run's `settle_by` has passed already (`LOCAL_REQUEST_BOUNDED`): it times out
#: at once, and the run stops at its limit.
LOCAL_BOUND_FLOOR = timedelta(seconds=0.1)
#: The error type of a local model request given up at its run's `settle_by`
#: (`LOCAL_REQUEST_BOUNDED`): the run stops at its time limit.
LOCAL_OUT_OF_TIME = "LocalRequestOutOfTime"
#: A bounded local request's schedule-to-close past its run's `settle_by`: the
#: worker's own backstop, should the request not give up by itself (the SDK's
#: timeout of a local activity was seen not to reach the workflow at times).
LOCAL_BOUND_BACKSTOP = timedelta(seconds=1)
#: Heartbeats go out from a thread, so a worker whose event loop is blocked
#: (an async tool calling `time.sleep`, a long CPU-bound step) still shows
#: its calls alive and the server does not hand them to another worker to
#: run again. A loop that has not run for this long is taken for hung: its
#: calls stop beating, time out and are retried elsewhere.
STALLED_LOOP_LIMIT = timedelta(seconds=60)
#: An `async def` approval predicate that holds the worker's event loop this
#: long in one step (a `time.sleep` or a sync HTTP call inside it) is warned
#: about: every run on the worker waited that long, and nothing can stop it
#: (its timeout is checked on the same loop). Long enough that a loaded
#: worker's ordinary steps (parsing a large reply) are not flagged; asyncio's
#: debug mode flags 0.1 s, which a GIL shared with busy tool threads exceeds.
BLOCKING_STEP = timedelta(seconds=1)


#: Loop steps the run gives a turn's completions before cancelling its calls
#: (a completion needs two: its handle's, then its call's).
CANCEL_READ_STEPS = 4
#: The metadata key of a result payload that carries its run's last events
#: ({"start", "events", "refs"}, as a journal step's result has them).
RESULT_JOURNAL = "agentor-journal"
MAX_RESULT_JOURNAL_BYTES = 256 * 1024
#: The metadata key of a result payload that carries a new run's whole log
#: (`Closing._whole_log` says when): `Agentor.run` builds its `RunResult` from
#: the close event instead of reading history again (~5 ms a run, measured).
#: Not a replay concern: Temporal does not compare a completion's result.
RESULT_EVENTS = "agentor-events"
MAX_RESULT_EVENTS_BYTES = 64 * 1024
PATCH_JOURNAL_AT_CLOSE = "journal-at-close"
TOKENS_INTERVAL = timedelta(seconds=10)

#: Journal and describe run as local activities: no server round trip, their
#: results land in history with the next workflow task completion.
LOCAL_START_TO_CLOSE = timedelta(seconds=30)
#: How long a step waits for its run's mirror store before it goes on without it
#: (`activities._store_patience`): inside LOCAL_START_TO_CLOSE, so a journal step
#: whose store never answers ends once, not on each of its retries.
STORE_PATIENCE = timedelta(seconds=20)
LOCAL_RETRY_POLICY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=5),
    maximum_attempts=5,
)
#: How long a tool's approval predicate may take (in a thread, see
#: `ToolDef.asks_person`) before a person is asked instead: with a wait for a
#: thread (SYNC_TOOL_THREAD_WAIT) it stays inside LOCAL_START_TO_CLOSE, so a
#: slow predicate is asked once, not again on each of the local activity's
#: retries.
APPROVAL_CHECK_TIMEOUT = timedelta(seconds=15)
#: The last mirror of a run retries a store that keeps failing briefly, then
#: gives up with a logged warning: the run's answer matters more, Temporal
#: still has every event, and `resume` or `export` catches the mirror up.
FINAL_MIRROR_RETRY_POLICY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=4),
    maximum_attempts=3,
)

#: `run_agent` reading the outcome of a run its id already named: each try
#: describes it once, and one still running is asked again with backoff (no
#: attempt limit: it may wait for a person for days), at most every minute.
RUN_OUTCOME_TIMEOUT = timedelta(seconds=30)
RUN_OUTCOME_RETRY_POLICY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=0,
)

#: Workflow tasks on a dead worker's sticky queue move to the shared queue
#: after this; the SDK default (10 s) alone would blow the recovery budget. A
#: live worker takes its sticky tasks within milliseconds, so this only fires
#: for a dead or saturated one, where the cost is one replay elsewhere; below
#: ~2 s a worker that is merely busy on 2 cores starts losing its cache.
STICKY_QUEUE_TIMEOUT = timedelta(seconds=2)
#: A workflow task that a killed worker was processing (a kill while the
#: journal mirrors, say) is retried after this; Temporal's default is 10 s.
#: Replaying even a long run takes well under a second, and a local activity
#: that runs longer keeps its task alive by heartbeat, so 5 s is safe. Set by
#: the facade when it starts a run; plain clients get their own (default 10 s).
WORKFLOW_TASK_TIMEOUT = timedelta(seconds=5)

# Payload budgets. Temporal refuses any payload over 2 MB, counted as encoded
# JSON (non-ASCII escaped: an emoji is 12 bytes), and a workflow task that
# would record one is retried forever. One workflow task completion carries a
# turn's journal marker (its tool results) and the next generation's request
# together, so those two budgets also keep it under gRPC's 4 MB message limit.
#: One tool result, cut (with a note saying so) in the activity.
MAX_TOOL_RESULT_BYTES = 256_000
#: All the results of one turn together (parallel calls), cut in the workflow.
MAX_TURN_RESULT_BYTES = 1_000_000
#: A generation's request sent whole (runs recorded before conversations went
#: by reference): one whose conversation outgrew it failed, saying so, rather
#: than wedge at the 2 MB limit.
MAX_REQUEST_BYTES = 1_500_000
#: Events new since the last journal step ride in the next activity's input
#: only up to this size, and only while that input stays under
#: MAX_REQUEST_BYTES (a turn's results are also in the request that follows
#: them); larger ones take a journal step, whose result is a payload of its own.
#: (Like the budgets above, it decides commands: change it only behind a patch.)
MAX_FOLD_BYTES = 256_000
#: Events a journal step resends to a store behind, besides the new ones
#: (`Journal._catch_up`): the worker reads what it lacks beyond them from
#: history. About a wide turn's events, so a short outage catches up in one step.
MAX_CATCH_UP_EVENTS = 1_000
#: What one journal step records at most (`PATCH_JOURNAL_STEPS`): more new
#: events go in several steps, one a workflow task. A single event is bounded
#: by the budgets above (arguments by MAX_REPLY_BYTES, a decision's texts by
#: MAX_DECISION_TEXT), so a step of one is under Temporal's 2 MB, and the step
#: leaves room in its task's completion (gRPC's 4 MB) for the next request.
MAX_JOURNAL_STEP_BYTES = 1_000_000
#: The timer that ends a journal step's workflow task before the next step.
JOURNAL_STEP_PAUSE = timedelta(milliseconds=1)
#: A model reply (text, reasoning and tool calls) larger than this fails the
#: run at once, saying so, with one request paid: a final answer is recorded
#: three times (generation, message, run_end) in the journal step that ends
#: the run, one payload (before: a reply over 2 MB was asked for again and
#: again, one over ~700 KB failed the run's last workflow task for ever).
MAX_REPLY_BYTES = 512_000
#: Tool calls one reply may ask for: more fails the run at once, saying so
#: (Temporal refuses a workflow task that would leave over 2,000 activities
#: pending, and would refuse it again on every retry).
MAX_CALLS_PER_REPLY = 500
#: Agent runs one workflow execution's `run_agent` calls keep pending at once
#: (started, not yet ended); a further call waits for one to end. Temporal
#: refuses a workflow task that would leave more than 2,000 child executions
#: pending (`limit.numPendingChildExecutions.error`), all its commands with
#: it, on every retry: a parent starting a few thousand runs side by side
#: started none of them, for good. The margin leaves the parent's own
#: children room.
MAX_PENDING_AGENT_RUNS = 1_000
#: Input bytes of the agent runs `run_agent` starts in one workflow task; a
#: further run starts in the next. The task's completion carries every start's
#: input, and gRPC refuses one past 4 MB: three runs of 1.3 MB prompts
#: gathered side by side failed the parent's task on every retry. The first
#: start of a task always goes (an input is at most MAX_REQUEST_BYTES).
RUN_AGENT_TASK_BYTES = 2_000_000
#: Characters of a decision's reason, and of who decided: the reason is
#: recorded in the run's log (and told the model on a denial), and carried over
#: continue-as-new with the decision; a megabyte of it wedged the run.
MAX_DECISION_TEXT = 4_000
#: The same as Temporal records it (escaped JSON, an emoji 12 bytes), from
#: BOUNDED_DECISION_BYTES on: each text is recorded about four times, and a
#: turn may have MAX_CALLS_PER_REPLY calls decided, so a turn's decisions stay
#: near 16 MB of history, inside the 50 MB at which Temporal terminates a run.
MAX_DECISION_BYTES = 4_000
#: The most a run lets one payload hold where its size is not otherwise
#: budgeted: a continue-as-new input (the conversation's tail, call-id counts,
#: decisions), the messages a request sent by reference carries (the turn's
#: new ones, or a resumed conversation's tail) with the tool schemas, or a
#: segment's opening input (what its `run_start` journal step records).
#: Past it the run ends, saying why: Temporal refuses a payload over 2 MB
#: (2,097,152 bytes), and the margin covers the rest of the activity input or
#: workflow input around it.
MAX_PAYLOAD_BYTES = 1_900_000
#: Call ids longer than this are counted (`call_uses`) and carried by a digest
#: of this length: a model's 40 KB ids, carried whole across continue-as-new,
#: passed 2 MB within a few turns.
LONG_CALL_ID_CHARS = 64
#: Token counts a provider reports are taken up to this (AgentTokens is a
#: 64-bit search attribute; a count past it would fail every workflow task).
MAX_TOKEN_COUNT = 2**53
#: Deepest nesting of lists and objects a run takes in its input messages
#: (the message list is level 1, a message 2). Far above any chat message's
#: shape, as MAX_ARGUMENT_DEPTH is above any tool's; the workflow copies and
#: encodes messages recursively, and ~500 levels fail on Python's recursion
#: limit in every workflow task.
MAX_INPUT_DEPTH = 100
#: `local_model_calls`: a request whose messages and unjournaled events come to
#: more than this goes as an activity, as it would without the option (a
#: local activity's marker carries its request, in the same workflow task
#: completion as the reply and the events recorded after it).
MAX_LOCAL_REQUEST_BYTES = 256_000
#: `local_model_calls`: a local request must begin this soon after its
#: workflow task started, or it is not made (the run asks in an activity
#: instead). Measured at 1,000 runs in flight on one worker: a first task
#: started 1.6 s after its run and timed out at 5 s with its model request
#: made, one request in 2,000 asked twice. (A task that times out or fails
#: after its answer came does not lose it: the SDK hands it to the next task,
#: docs/benchmarks-notes.md, twelfth pass.)
LOCAL_START_LIMIT = timedelta(seconds=1.5)
#: The error type of a local request refused for starting late.
LOCAL_CALL_LATE = "LocalCallLate"
#: What a model endpoint takes in one request. With the conversation sent by
#: reference no Temporal limit applies to it; this guards the endpoint only.
#: The largest context windows (about 2 M tokens) hold roughly 8 MB of text,
#: and endpoints refuse far larger bodies outright, so a conversation past
#: this is over every model's window: the run ends saying so instead of
#: sending a request no endpoint would take.
MAX_MODEL_REQUEST_BYTES = 16_000_000

# Long runs. History grows by about a turn's messages per turn once the
# conversation goes by reference; continue-as-new keeps each execution small.
#: A conversation up to this size is sent whole with every request (the
#: Temporal UI then shows it on each `generate`); past it, by reference. At
#: 1 KB a turn that is ~30 turns of inline requests, ~0.5 MB of history.
INLINE_CONVERSATION_BYTES = 32_000
#: An execution continues as new at the first safe point after its history
#: passes this (or the server suggests it: 4 MB or 4,096 events by default).
#: A turn adds at most MAX_TURN_RESULT_BYTES of results (however many calls:
#: BOUNDED_TOOL_RESULTS) and one answer, so no execution's history passes
#: HISTORY_LIMIT_BYTES (the documented bound).
HISTORY_BUDGET_BYTES = 8_000_000
HISTORY_LIMIT_BYTES = 10_000_000
#: The same for events (Temporal terminates at 51,200).
HISTORY_EVENTS_BUDGET = 20_000
#: From `EVENTS_BUDGET_REPLAYABLE` an execution continues as new past this many
#: events too: what a worker that does not hold the run in its cache (restarted,
#: or the run evicted under load) replays in one workflow task well within its
#: 5 s timeout. Measured (docs/benchmarks-notes.md, "Long executions replay"):
#: 4,103 events replay in 2.4-4.7 s at load 12 on 2 cores, 17,738 events in
#: 16-28 s, so a run on a server that suggests continue-as-new later than
#: Temporal's default 4,096 events (or never) was taken by no worker again
#: after a restart.
REPLAYABLE_EVENTS_BUDGET = 3_000
#: What a run waiting for a person may grow to before it stops
#: (`PAUSE_STOPS_SHORT`): short of Temporal's 50 MB and 51,200 events by
#: what the rest of a turn adds once decided (10 MB: a turn's results are
#: at most MAX_TURN_RESULT_BYTES; 11,200 events: 500 calls take ~3,000).
PAUSED_HISTORY_BYTES = 40_000_000
PAUSED_HISTORY_EVENTS = 40_000
#: Signals an execution waiting for a person may take before it stops
#: (`PAUSE_COUNTS_SIGNALS`): short of Temporal's 10,000 per execution by
#: what a workflow task may bring in at once.
PAUSED_SIGNALS = 9_000
#: Signals and accepted updates a run waiting for a person may take from when
#: it began to wait, or a run whose tools run from when they began
#: (`PAUSE_COUNTS_TASKS`): each is at most one workflow task,
#: and a fresh worker replays a history of ~1,000 of them well within the
#: 5 s workflow task timeout, where 3,000-5,000 took longer under load
#: (docs/benchmarks-notes.md). A decision sent by each person is one.
PAUSED_WAIT_TASKS = 1_000
#: Past these, a run that stopped waits for nothing more and closes
#: (`HISTORY_LAST_LINE`): short of Temporal's 50 MB and 51,200 events by what
#: its close adds (its turn's results, at most MAX_TURN_RESULT_BYTES, its last
#: journal step and result, ~1,000 events for 500 answered calls) and by a
#: workflow task's worth of signals more.
LAST_HISTORY_BYTES = 46_000_000
LAST_HISTORY_EVENTS = 48_000

#: Stream topics: recorded events (published by the workflow) and text
#: deltas (published by the generate activity while the model streams).
EVENTS_TOPIC = "events"
DELTAS_TOPIC = "deltas"
#: Encoded bytes of stream items a run keeps in memory beyond what history
#: holds (see `stream_window`): a follower within it reads live; one further
#: behind reads the events it missed from history.
STREAM_WINDOW_BYTES = 1_000_000
#: Deltas are batched into one signal per interval: each batch is a history
#: event and a workflow task, so this trades delta latency for history size.
#: The text that comes within one interval also goes as one item of it
#: (`streaming.PacedDeltas`): each item costs ~190 bytes of history.
DELTA_BATCH_INTERVAL = timedelta(milliseconds=100)
#: One streamed reply's deltas go out as they come for this long, then
#: gathered into one item per DELTAS_SLOW_INTERVAL, and after DELTAS_UNTIL not
#: at all (the reply still arrives whole in its events). Each batch is a
#: signal, four history events with its workflow task, and a follower's poll
#: for it an update (Temporal takes 2,000 per execution): a reply streamed for
#: 30 minutes at 10 batches a second would add 72,000 events, past the 51,200
#: at which Temporal terminates the run. Bounded: ~1,140 batches a reply.
DELTAS_LIVE_FOR = 60.0
DELTAS_SLOW_INTERVAL = 1.0
DELTAS_UNTIL = 600.0
#: A follower polls again this soon after a batch; polls long-poll anyway,
#: so this bounds added latency, not load.
STREAM_POLL_COOLDOWN = timedelta(milliseconds=20)
#: the update followers poll `WorkflowStream` by (`stream_window.PollGuard`)
STREAM_POLL_UPDATE = "__temporal_workflow_stream_poll"
#: Poll answers of one workflow task share this (its completion, with a
#: journal step of up to MAX_JOURNAL_STEP_BYTES and a request of up to
#: MAX_PAYLOAD_BYTES, must stay under gRPC's 4 MB); one answer of one item
#: may pass it (the stream caps an answer at 1 MB). Ten answers of 1 MB in one
#: task made its completion pass 4 MB, and Temporal terminated the run.
POLL_BYTES_PER_TASK = 1_000_000
#: Poll answers one execution records at most (each is in history, once per
#: follower); past it new polls are refused and followers read history. With
#: the run's own (under HISTORY_LIMIT_BYTES) it stays well under Temporal's 50 MB.
POLL_BYTES_PER_EXECUTION = 16_000_000
#: Events past which an execution refuses new polls, and their followers read
#: history. Each poll is an update (two events and a workflow task's three), and
#: a run continues as new only between turns: six followers of one long
#: streamed reply (a poll each per delta batch) took one generation's execution
#: past 7,000 events and Temporal's 2,000 updates, and once a workflow task
#: timed out on the loaded worker its replay (17 s) timed out on every attempt.
POLL_EVENTS_PER_EXECUTION = REPLAYABLE_EVENTS_BUDGET
#: the signal `WorkflowStream` takes published items by (`stream_window.guard_publish`)
STREAM_PUBLISH_SIGNAL = "__temporal_workflow_stream_publish"
#: the `events` query's answer at most (JSON bytes, at least one event): gRPC
#: refuses an answer past 4 MB, and a segment paused with a 1 MB turn and
#: calls beside it held more, so the query failed for good for that position
EVENTS_QUERY_BYTES = 2_000_000
#: the signal a decision goes by when Temporal refuses the `decide` update
DECIDE_SIGNAL = "decide_signal"
#: the update a refused decision's sender keeps the refusal by, under the decision's id
REFUSED_DECISION_UPDATE = "decision_refused"

#: Worker sizing. Activity calls running at once on one worker: a model call
#: or an async tool is an await, not a thread, so this bounds memory, not
#: CPU. How many calls a worker accepts *ahead* of starting them is bounded
#: separately (ACTIVITY_BACKLOG): that, not this, is what kept live calls
#: from being timed out under load (see `agentor_temporal/_admission.py`).
MAX_CONCURRENT_ACTIVITIES = 100
#: Activity slots granted but not yet started in Python, at most. An idle
#: worker's core holds 6 for its pollers, so 8 leaves room for 2 calls
#: dispatched eagerly with a workflow task (below 7 a run's calls all went
#: through matching instead, +3-4 ms each). Measured at 100 runs in flight
#: on one worker (model latency 0): with a fixed 100 slots, calls waited a
#: median 3.6 s (max 8 s) between the server starting them and Python
#: starting them, and 18% timed out on heartbeat while live and were asked
#: again; with a backlog of 20, 3% still were; with 10, 8 and 6 none were,
#: waiting a median 0.56, 0.31 and 0.27 s, at the same throughput.
ACTIVITY_BACKLOG = 8
#: Workflow tasks processed at once (the SDK's default).
MAX_CONCURRENT_WORKFLOW_TASKS = 100
MAX_CONCURRENT_LOCAL_ACTIVITIES = 200
#: Cached runs replay nothing on their next task; a run is a few KB in cache.
MAX_CACHED_WORKFLOWS = 2000
#: How long a stopping worker waits for in-flight activities to finish: a
#: rolling deploy then loses no tool call that was about to complete.
GRACEFUL_SHUTDOWN = timedelta(seconds=30)
#: How often a worker serving metrics counts the runs awaiting approval
#: (a visibility query per agent): a gauge for dashboards, not for paging.
WAITING_GAUGE_INTERVAL = timedelta(seconds=15)
#: Sync tool calls running at once per registry (asyncio's default pool is
#: only cpu+4 threads, which would serialise slow sync tools across runs). A
#: call abandoned by its timeout no longer counts (activities/_threads.py).
SYNC_TOOL_THREADS = 64
#: How long a sync tool call waits for a thread when SYNC_TOOL_THREADS calls
#: are running; its own timeout starts only once it runs. Past this it is
#: handed back to Temporal unstarted (for this worker later, or another):
#: well inside TOOL_TIMEOUT_GRACE, so waiting plus the tool's full timeout
#: stays under the activity's start-to-close, which would otherwise run a
#: live call a second time.
SYNC_TOOL_THREAD_WAIT = timedelta(seconds=10)
