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

#: A model call may legitimately think for minutes; heartbeats, not this
#: timeout, are what notice a dead worker.
MODEL_START_TO_CLOSE = timedelta(minutes=10)
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

# Patch ids (workflow.patched): each marks a change of commands, so histories
# recorded before it replay unchanged. Never reuse or rename one.
#: A run whose workflow id is not a valid run id fails at its start.
PATCH_REFUSE_INVALID_RUN_ID = "refuse-invalid-run-id"
#: Run ids are also refused by encoded length and for Unicode control,
#: format and separator characters (store.base.validate_run_id).
PATCH_STRICT_RUN_ID = "strict-run-id"
#: A turn whose results together exceed MAX_TURN_RESULT_BYTES has them cut.
PATCH_TURN_RESULT_BUDGET = "turn-result-budget"
#: A request over MAX_REQUEST_BYTES fails the run instead of being scheduled.
PATCH_REQUEST_SIZE_LIMIT = "request-size-limit"
#: A cancelled run records its run_end, then closes as cancelled (before: it
#: recorded a failure and closed as completed).
PATCH_CLOSE_CANCELLED = "close-cancelled"
#: A tool call that failed for a reason that is not the tool's (the run's
#: definition nowhere to be found, a call lost for good) ends the run instead
#: of answering the model with our machinery's failure.
PATCH_MACHINERY_NOT_AN_ANSWER = "machinery-not-an-answer"
#: Runs keep the AgentStatus / AgentTokens search attributes current.
PATCH_AGENT_STATUS = "agent-status-search-attributes"
#: A long run continues as new between turns (see `workflows/carry.py`).
PATCH_CONTINUE_AS_NEW = "continue-as-new"
#: A conversation past INLINE_CONVERSATION_BYTES is sent by reference (see
#: `workflows/conversation.py`).
PATCH_CONVERSATION_REFS = "conversation-refs"
#: New events travel in the input of the next `generate` or first `call_tool`
#: activity (the worker mirrors them there) instead of a `journal` local
#: activity before it.
PATCH_JOURNAL_IN_ACTIVITIES = "journal-in-activities"
#: Tool calls are told apart by which use of their call id they are (see
#: `workflows/call_uses.py`): a decision a person took on one call never
#: decides a later call reusing its id, and in one turn a second call with an
#: id another call of a tool that may need approval uses is refused (before:
#: a reused id's call ran, or was denied, on the earlier call's decision).
PATCH_CALL_USES = "call-uses"
#: A turn whose calls' arguments are large: its events go into history before
#: the tools run (they were left for the next step, with the results), and its
#: results are cut to MAX_TURN_RESULT_BYTES less those arguments (each result
#: repeats its call's arguments). Before, four calls of 115 KB arguments
#: returning 300 KB each made one journal step of 2.4 MB: every workflow task
#: failed from then on.
PATCH_TURN_ARGS_BUDGET = "turn-args-budget"
#: A segment's input that would make the run record or send more than one
#: payload holds (its messages after the agent's instructions, a fork's copied
#: events), name a fork parent that is not a run id (the ForkedFrom search
#: attribute takes 2 KB), or carry token counts past MAX_TOKEN_COUNT fails the
#: run at once, saying why (`workflows/input_limits.py`). Before, a plain
#: client's start under 2 MB could still make the `run_start` journal step
#: larger than 2 MB, and every workflow task failed from then on.
PATCH_INPUT_LIMITS = "input-limits"
#: A segment's opening input nested deeper than MAX_INPUT_DEPTH (its messages,
#: a resumed conversation's tail, a fork's copied events) fails the run at
#: once, saying so. Before, messages nested ~500 levels deep passed Temporal
#: and the input checks, and the copy the `run_start` step makes of them hit
#: Python's recursion limit: every workflow task failed from then on. Asked
#: only for such an input, so other runs' histories replay unchanged.
PATCH_INPUT_DEPTH = "input-depth"
#: A continue-as-new whose input would pass MAX_PAYLOAD_BYTES ends the run,
#: saying why, instead of failing every workflow task on Temporal's 2 MB limit
#: (long call ids are counted by digest, and decisions carry no reason, so
#: only a run of very many distinct call ids gets there).
PATCH_CARRY_LIMIT = "carry-limit"
#: A turn's results are cut to leave room for the call ids each repeats (in
#: its event and its tool message), and a request sent by reference whose
#: messages and tool schemas pass MAX_PAYLOAD_BYTES ends the run instead of
#: being scheduled. Before, 500 calls with 860-character ids returning 2 KB
#: each, with 200 KB of tool schemas, made the next `generate` input 2.1 MB:
#: every workflow task failed from then on.
PATCH_TAIL_BUDGET = "tail-budget"
#: A run cancelled while its tools work waits for each call's worker to say
#: how it ended (a sync tool's thread cannot be stopped: the worker waits for
#: it), records the results of the calls that ran, and then closes as
#: cancelled; a call the cancel stopped is answered as such. Before, the run
#: closed at once and a tool that finished afterwards went unrecorded:
#: `resume` rewound the batch and the model called it again, under a new
#: call id its idempotency key did not know (a payment made twice).
PATCH_RECORD_CANCELLED_CALLS = "record-cancelled-calls"
#: Events new since the last journal step that pass MAX_JOURNAL_STEP_BYTES go
#: into history in several steps, each ending its workflow task (a short
#: timer): one step's result is one payload, and the markers of every step in
#: a task travel in its one completion. Before, a turn of 300 calls denied
#: with 4,000-character reasons made one 3.5 MB journal step (nothing else
#: carries a denial's events): every workflow task failed from then on.
PATCH_JOURNAL_STEPS = "journal-steps"
#: The start header a starter puts its own worker's spec for the run's agent
#: in (`workflows.segment.header_spec`): a worker whose spec is the same
#: records no describe step.
SPEC_HEADER = "agentor-spec"
#: Marks an execution whose header's spec its worker did not take (its own
#: spec differed, or it could not say): the describe step ran, and replays
#: run it too. Asked only of executions that have the header.
PATCH_SPEC_HEADER_REFUSED = "spec-header-refused"

#: The behaviour this build gives a new run, recorded in the run's spec by its
#: describe step (a local activity, or the start header its worker took: either
#: way in history, so a replay reads the level the run began with). A change of
#: commands made after the describe step is adopted at a level: a run
#: recorded at that level or later takes it without asking
#: `workflow.patched`, whose marker and TemporalChangeVersion upsert cost two
#: history events per patch per run; a run recorded before (level 0: every
#: run before levels existed) asks `workflow.patched` exactly as it did, so
#: its history replays unchanged. A new change: give it the next level here,
#: raise BEHAVIOUR to it, and record a golden history at the new level.
BEHAVIOUR = 16
#: The level each patch became part of (`versions.adopted`). The run-id
#: patches are decided before the describe step, so they stay patches.
ADOPTED = {
    PATCH_TURN_RESULT_BUDGET: 1,
    PATCH_REQUEST_SIZE_LIMIT: 1,
    PATCH_CLOSE_CANCELLED: 1,
    PATCH_MACHINERY_NOT_AN_ANSWER: 1,
    PATCH_AGENT_STATUS: 1,
    PATCH_CONTINUE_AS_NEW: 1,
    PATCH_CONVERSATION_REFS: 1,
    PATCH_JOURNAL_IN_ACTIVITIES: 1,
    PATCH_CALL_USES: 2,
    PATCH_TURN_ARGS_BUDGET: 3,
    PATCH_INPUT_LIMITS: 4,
    PATCH_CARRY_LIMIT: 4,
    PATCH_TAIL_BUDGET: 4,
    PATCH_RECORD_CANCELLED_CALLS: 5,
    PATCH_JOURNAL_STEPS: 9,
}
#: From this level a run's search-attribute changes of one workflow task go
#: in one upsert command, and a change of AgentTokens alone is sent at most
#: once per TOKENS_INTERVAL (before: one command per change, seven in the
#: seed's run; now two). Each upsert cost the dev server ~7 persistence reads
#: (search-attribute validation), measured from its metrics.
COALESCED_ATTRIBUTES = 1
#: From this level a run is paused (`paused`, `wait_paused`, so `run()`'s
#: `awaiting_approval`) only once no call's approval predicate is still being
#: asked: a turn whose predicates ran one after another was reported paused
#: with the first call that needed a person, and the next moment waited for
#: another too.
WHOLE_PAUSE = 5
#: From this level a call waiting for a person when its run is cancelled waits
#: no more: a decision sent while the run finishes its other calls is refused
#: ("no tool call waiting"), where it was taken and answered "approved" for a
#: call that never ran.
CANCEL_ENDS_WAITING = 5
#: From this level a run that closes (completed, failed or out of turns; not
#: cancelled, not continuing as new) with its events not mirrored by its
#: worker puts its last events in its result's payload (`RESULT_JOURNAL`)
#: instead of a journal step: one local activity and one workflow
#: activation fewer per run. Where it cannot (the worker's payloads go
#: through a codec or external storage, which may not keep a payload's
#: metadata, or the events pass MAX_RESULT_JOURNAL_BYTES) the journal step
#: runs, and PATCH_JOURNAL_AT_CLOSE marks it for replays.
JOURNAL_IN_RESULT = 6
#: From this level a run stamps its events with times history holds
#: (`Journal.now`): the run's start, the times its steps report (for an event
#: that follows a step in the same workflow task), a person's own decision
#: time, an approval's deadline; only an event that opens a later task with no
#: time of its own (a cancel, a step failed for good) takes the task's start.
#: `workflow.now()` is when the running workflow task started, and a task that
#: fails or times out runs again later and stamps anew what its first attempt
#: already mirrored or sent to a follower (measured: a `run_end` 47 ms apart
#: in the JSONL mirror and the run's result, an `approval_request` 224 ms
#: apart in a follower's stream and history). Commands are unchanged; the
#: level keeps a run begun before it stamping as it did, so its replays make
#: the events it mirrored.
STABLE_EVENT_TIMES = 7
#: From this level each `call_tool` of a turn is given its share of
#: MAX_TURN_RESULT_BYTES (`CallToolInput.max_result_bytes`) and cuts its result
#: to it, as the workflow would cut it after: history records each activity's
#: result, so a turn's results cut only in the workflow had already put every
#: call's whole 256 kB there (measured: 120 such calls made a 32 MB history,
#: and ~200 passed the 50 MB at which Temporal terminates the run). The
#: shares are what the workflow's cut gives when every call returns the most
#: it may; a call whose siblings return little reads no more than that share.
#: A failed call's text, recorded twice (its error, and the answer the model
#: reads), takes half its share each: the workflow's cut never counted the
#: errors, and 300 calls failing with 4,000 characters wedged the run.
BOUNDED_TOOL_RESULTS = 8
#: From this level a decision sent by signal (and the `decide` validator of
#: every run: validators do not run on replay) refuses a reason or name over
#: MAX_DECISION_BYTES as Temporal encodes it
#: (`Decision.size_problem`): 4,000 emoji were 48 kB each, recorded four
#: times, and 300 calls denied so made one turn's history 53 MB.
BOUNDED_DECISION_BYTES = 9
#: From this level a continue-as-new carries only the latest CARRIED_DECISIONS
#: decisions, each name cut to CARRIED_NAME_BYTES as encoded (`carry.carried_decisions`):
#: all of a run's decisions, names of 100 emoji kept (1.3 kB a decision), made
#: the carry pass MAX_PAYLOAD_BYTES after three turns of 500 decisions, and
#: the run ended "could not continue as new".
BOUNDED_CARRY = 9
#: A whole turn's decisions (MAX_CALLS_PER_REPLY), which a client may send
#: again as the run continues as new; older ones are refused all the same.
CARRIED_DECISIONS = 500
#: Bytes of who decided, as a carried decision keeps it (for "already approved by ...").
CARRIED_NAME_BYTES = 40
#: Call-id counts a run carries (or a resumed run's input holds) one by one up
#: to this size, as encoded (~7,000 ids); past it, the ids used once go in a
#: Bloom filter of CALL_IDS_SEEN_BITS (175 kB as carried) and only reused ids
#: are counted (`call_uses.CallUses.compacted`, from BOUNDED_CARRY on). One by
#: one, 50,000 unique ids (100 turns of 500 calls) passed MAX_PAYLOAD_BYTES.
CARRIED_USES_BYTES = 256_000
#: The filter's size and hashes: one id in 1,000 taken for seen at 50,000
#: ids, one in 12 at 200,000 (such an id's first call is keyed `<id>#2`).
CALL_IDS_SEEN_BITS = 1 << 20
CALL_IDS_SEEN_HASHES = 4
#: From this level a turn in which an approval expires on a tool whose timeout
#: fails the run (`on_approval_timeout="fail"`) ends with every call's result
#: recorded before the `run_end`: calls still waiting for a person wait no
#: more (answered as not run), calls running are waited for, and the expired
#: call is answered as not approved. Before, the run ended the moment the
#: approval expired: the results of calls that had run (an approved transfer,
#: a lookup beside it) were never recorded, so `resume` rewound the turn and
#: the model asked for them again, and they ran twice; a call still running
#: was left to finish with its result dropped.
EXPIRY_KEEPS_CALLS = 10
#: From this level a turn in which a call fails for a reason that is not the
#: tool's (`CallFailed`: no worker with the run's definition within
#: DEFINITION_PATIENCE, an internal error) ends as one an expired approval
#: fails: calls waiting for a person are answered as not run, calls running
#: are waited for, and the failed call is answered that it may or may not
#: have run; every result is recorded before the `run_end`. Before, the run
#: ended without the results of the calls that had finished, so `resume`
#: rewound the turn and ran them again (a transfer made twice). A turn in
#: which no call ran to an answer of its own is still rewound.
FAILURE_KEEPS_CALLS = 11
#: From this level a run started with a time limit (`execution_timeout` or
#: `run_timeout`, e.g. `run_agent(..., execution_timeout=...)`) stops itself
#: DEADLINE_MARGIN before it (a timer), settling its turn as a cancel does:
#: calls running are asked to stop and their answers recorded, calls waiting
#: for a person are answered as not run, and the `run_end` says the run
#: reached its time limit; the run returns "failed", and `resume` goes on
#: after the recorded calls. Before, the server timed the run out mid-turn:
#: its finished calls' results were never recorded, so `resume` rewound the
#: turn and ran them again (a transfer made twice). A run with no limit (the
#: facade's) issues no command for it.
DEADLINE_SETTLES = 12
#: From this level a call whose completion reaches the run in the same
#: workflow task as the run's cancel (or its time limit's stop) keeps its
#: result: the run lets the completions of that task reach their calls
#: (`CANCEL_READ_STEPS` loop steps, no command) before it asks the turn's
#: calls to stop. Before, the finished call was asked to stop first, read as
#: not run, and when no other call had finished the turn was rewound: resume
#: asked the model again and the call ran a second time (seen under load,
#: where the worker took the cancel's task only after the call had finished).
CANCEL_KEEPS_ENDED = 13
#: From this level a run stopped (cancelled, or at its time limit) while its
#: model request is in flight leaves the request running and waits for its
#: answer, within a bound (`ANSWER_GRACE`; at a time limit, until
#: DEADLINE_CLOSE before it): the answer is recorded (its `generation`, usage
#: counted; its tool calls not run) and the run closes as before. `resume`
#: then goes on from that answer (`AgentRunInput.answer`): it runs the calls,
#: or takes the final text, without asking the model again. Before, the
#: request was asked to stop and its answer lost: resume sent it again, a
#: second paid request (also for an answer that came in the cancel's own
#: workflow task). Past the bound the request is stopped, as before.
GENERATION_KEPT = 14
#: From this level a run waiting for a person whose history passes
#: PAUSED_HISTORY_BYTES or PAUSED_HISTORY_EVENTS stops, failed and resumable,
#: keeping its turn's results (`Approvals.gate`). A waiting run cannot
#: continue as new, and every signal or accepted update sent to it adds
#: history: ~12,000 repeated `decide_signal`s (a client's retry loop), or 25
#: junk signals of 2 MB, reached Temporal's limit, and the server terminated
#: the run.
PAUSE_STOPS_SHORT = 15
#: From this level a run whose history passes PAUSED_HISTORY_BYTES or
#: PAUSED_HISTORY_EVENTS mid-turn, not waiting for a person (a tool running
#: for long, its model request in flight), stops as a cancel would, failed and
#: resumable, keeping what its calls did (`history_watch`: its tool calls' and
#: model request's waits are watched, not the whole loop). It cannot continue
#: as new mid-turn either, and 25 junk signals of 2 MB sent while a tool ran an
#: hour took it to Temporal's 50 MB, where the server terminated it, its turn
#: lost.
HISTORY_STOPS_SHORT = 16
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
#: What a run waiting for a person may grow to before it stops
#: (`PAUSE_STOPS_SHORT`): short of Temporal's 50 MB and 51,200 events by
#: what the rest of a turn adds once decided (10 MB: a turn's results are
#: at most MAX_TURN_RESULT_BYTES; 11,200 events: 500 calls take ~3,000).
PAUSED_HISTORY_BYTES = 40_000_000
PAUSED_HISTORY_EVENTS = 40_000

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
#: the signal `WorkflowStream` takes published items by (`stream_window.guard_publish`)
STREAM_PUBLISH_SIGNAL = "__temporal_workflow_stream_publish"

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
