"""The record of every change to what a run's workflow does: patch ids and behaviour levels.

A history recorded by an older build must replay unchanged, so each change of
commands is adopted either behind a patch id (`workflow.patched`) or at a
behaviour level recorded in the run's spec (`workflows/versions.py`). Each
entry says what changed and why. Read through `policies`, which re-exports
every name here (the knobs the tests lower are set on `policies`).
"""

from __future__ import annotations

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
#: A segment's opening messages (a plain client's input, a resumed
#: conversation's tail) whose assistant `tool_calls` is not a list of objects
#: fail the run at once, saying so. Before, a number or boolean there raised
#: as the run counted the conversation's call ids: every workflow task failed
#: from then on. Asked only for such an input, so other runs' histories
#: replay unchanged.
PATCH_INPUT_CALLS = "input-call-shapes"
#: A continue-as-new whose input would pass MAX_PAYLOAD_BYTES ends the run,
#: saying why, instead of failing every workflow task on Temporal's 2 MB limit
#: (long call ids are counted by digest, and decisions carry no reason, so
#: only a run of very many distinct call ids gets there).
PATCH_CARRY_LIMIT = "carry-limit"
#: A continue-as-new carries the segment's spec, and a continued execution
#: whose worker is built differently from it (or has no such agent) goes on
#: with that spec, its steps left for a worker built as the run was
#: (`DEFINITION_PATIENCE`), as within an execution. Before, such an execution
#: was described again and failed the run at once: in a deploy, a run whose
#: continued execution came to a new build first failed mid-run, for good,
#: though old workers still polled. Asked only when a run continues as new,
#: and in a continued execution only when its describe step is refused; from
#: CARRIED_SPEC_TAKEN a run takes it without asking.
PATCH_CARRIED_SPEC = "carried-spec"
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
#: Marks an execution that took a signal it could not read (no argument, more
#: than one, or one that does not decode: a plain client's `temporal workflow
#: signal` without --input, a payload nested past the recursion limit): from
#: it on such a signal is counted towards PAUSED_SIGNALS (`AgentRunWorkflow
#: ._unreadable_signal`). Before, it failed every workflow task of the run
#: (the handler called with the wrong arguments) or the SDK dropped it
#: uncounted, so a flood of them took the execution to Temporal's cap on
#: signals without the run stopping short of it. Asked only when one comes.
PATCH_UNREADABLE_SIGNALS = "unreadable-signals"
#: Marks an execution in which a tool call carrying the journal's new events
#: (`Journal.fold`) was cancelled in the workflow task that started it (a
#: cancel, a time limit or the history's stop coming with the model's answer):
#: its activity was never scheduled, so those events (the turn's `generation`
#: and `tool_call`s) never reached history, and the run closes recording them
#: (`Journal.unfold`). Before, they were lost: the log went from `run_start`
#: to `run_end`, and resume asked the model that turn again (a second paid
#: request). Asked only when it happens.
PATCH_LOST_FOLD = "lost-fold"
#: Marks an execution whose worker's payloads may not keep their metadata (a
#: codec, external storage: `AgentRunWorkflow.plain_results` False), asked in
#: its first workflow task, before any local activity: from
#: JOURNAL_CHOICE_RECORDED a closing run reads from it, not from a patch asked
#: at its close, whether its last events may go in its result.
PATCH_RESULTS_UNKEPT = "results-unkept"

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
BEHAVIOUR = 33
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
    PATCH_CARRIED_SPEC: 21,
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
#: From this level what a run still waits for once it stops (its calls running
#: after a cancel, a time limit or its history's stop; the calls beside one
#: whose approval expired or whose pause its history stopped; its model
#: request's answer) is waited for only while its history stays short of
#: LAST_HISTORY_BYTES and LAST_HISTORY_EVENTS: past them the calls still
#: running are asked to stop and answered as cut off (they may or may not
#: have run; the turn is kept, not rewound), the request is stopped, and the
#: run closes. Before, those waits had no bound on history: signals sent on
#: after the stop (2 MB a second while a call beside a stopped pause ran for
#: an hour, or a sync tool its CANCEL_GRACE) took the run past 50 MB, and the
#: server terminated it, its turn lost.
HISTORY_LAST_LINE = 17
#: From this level a run waiting for a person that has taken PAUSED_SIGNALS
#: signals in its execution stops too, failed and resumable, as at
#: PAUSED_HISTORY_EVENTS (`Approvals.gate`). Temporal takes 10,000 signals per
#: execution and refuses the rest; a flood of small signals (a client's
#: retry loop, 10,000 junk `decide_signal`s) reached that long before 40,000
#: events, and from then on a decision sent by signal (the fallback past the
#: cap on updates) was refused: the run waited for good.
PAUSE_COUNTS_SIGNALS = 18
#: From this level a run reads its history's size and length as at least what
#: its first workflow task saw plus the signals it has taken since
#: (`history_watch.history_now`), not only as the server reports them: a
#: workflow task the server starts as the one before completes reports the
#: history before the signals that came while that one ran (seen: 0.3 MB
#: reported with 1.8 MB of signals in history), so a run flooded while its
#: model request was in flight missed its stop by a task, and its answer came
#: first and went unkept: resume asked the model that turn again.
SIGNALS_SIZED = 19
#: (class: history limits and long runs) From this level a run waiting for
#: people watches its history's stop once (`Approvals._watch`), not once per
#: call waiting: every call's wait asked `history_now` in every pass of every
#: workflow task, so a turn of 320 calls waiting, decided 20 at a time, spent
#: over 2 s in one task (the SDK's deadlock limit); the task failed, and a
#: decision sent then was refused ("Workflow Task in failed state").
PAUSE_WATCHED_ONCE = 20
#: (class: runs held up for good) From this level a run carries its spec into
#: the execution it continues as new in (PATCH_CARRIED_SPEC) without asking
#: `workflow.patched`, and an execution so continued takes the spec it
#: carries when its worker is built otherwise without asking it either. Both
#: were asked after a local activity (the journal step before a
#: continue-as-new; the refused describe step), and a local activity's result
#: can reach the workflow a workflow task later than it is recorded in (seen
#: with queries arriving as it completed: the marker went in one task's
#: completion, the code after it ran in the next); a replay hands it over in
#: the task that recorded it, where the patch's marker is not yet known, so
#: `patched` answered False and the replay failed (TMPRL1100, "patch marker
#: encountered ... but there is no corresponding change command"). The
#: execution had closed, but every query of it replays it: 111 people who had
#: decided by signal asked it what their decisions came to, and were told
#: after 60 s that no worker had taken them.
CARRIED_SPEC_TAKEN = 21
#: (class: runs held up for good) From this level a closing run decides
#: whether its last events go in its result (JOURNAL_IN_RESULT) from what its
#: history holds: its payloads' keeping (PATCH_RESULTS_UNKEPT, asked in its
#: first workflow task), whether it is a child, and its events' size; it asks
#: no `workflow.patched(PATCH_JOURNAL_AT_CLOSE)`. That was asked as the run
#: closed, often right after a local activity (its last model request with
#: `local_model_calls`, a journal step), and a local activity's result can
#: reach the workflow a task after the one that recorded it: a replay hands it
#: over in that one, where the patch's marker is not yet known, `patched`
#: answered False and the replay failed (TMPRL1100). A run with local model
#: calls that was a `run_agent` child, ran on a worker with a codec, or closed
#: with more events than a result holds could then no longer be queried.
JOURNAL_CHOICE_RECORDED = 22
#: (class: approvals) From this level a `decide_signal` delivered again under
#: a request id whose decision the run took (a sender's re-sending after an
#: outage), its outcome since kept in brief (`Approvals.signalled_briefly`:
#: more than SIGNALLED_DECISIONS_KEPT signals came between), is a duplicate:
#: before, it was checked again as a new decision, refused as already decided
#: by its own sender, and that refusal replaced what the sender was told; a
#: model reusing the call's id in a later turn could even have the repeat
#: decide that later call. A level, not a fix in place: a recorded history in
#: which a repeat decided a later call must replay as it was.
SIGNAL_REPEATS_KEPT = 23
#: (class: runs held up for good) From this level what a run reads of its
#: history (its length and size, Temporal's continue-as-new suggestion) in the
#: workflow task a local activity's result came in is what the task that
#: started the activity read (`steady.reading`). A local activity's result can
#: reach the workflow a task after the one that recorded it, and a replay
#: hands it over in that one: with `local_model_calls`, a turn whose calls ran
#: no activity (a tool the model made up, one withdrawn) read the history for
#: its continue-as-new right after the model's answer, ~3 events more live
#: than in a replay; a budget in that gap continued the run as new live and
#: not in the replay (TMPRL1100 on every query of it, and on any worker
#: without it cached). The stops at PAUSED_HISTORY_* and LAST_HISTORY_*
#: after an approval predicate or a model request read so too.
STEADY_READINGS = 24
#: (class: history limits and long runs) From this level a run waiting for a
#: person stops, failed and resumable, once the signals and accepted updates
#: it took since it began to wait reach PAUSED_WAIT_TASKS (`PauseWatch`).
#: Each is a workflow task in its history, and a worker that does not hold
#: the run in its cache (restarted, or the run evicted under load) replays
#: the whole history in one workflow task: past a few thousand such tasks
#: the replay alone outlasted the 5 s workflow task timeout on every attempt
#: (measured: bench/replay_signals.py), and the run, waiting on, could never
#: take a decision again. The stops before (40,000 events, 9,000 signals)
#: were far past that. So does a run whose tools run (`HistoryWatch`, counted
#: from when its turn's calls began; not while its model request streams,
#: whose own text deltas are signals): it stops mid-turn as at
#: PAUSED_HISTORY_EVENTS, where before a tool running for hours took every
#: signal up to Temporal's 10,000.
PAUSE_COUNTS_TASKS = 25
#: (class: history limits and long runs) From this level an execution
#: continues as new past REPLAYABLE_EVENTS_BUDGET events (3,000), not only past
#: HISTORY_EVENTS_BUDGET (20,000) or when Temporal suggests it (4,096 events by
#: default): a worker without the run in its cache replays the execution's
#: whole history in one workflow task, and on a server whose suggestion comes
#: later (or never) an execution of 17,738 events took 16-28 s to replay, past
#: the 5 s workflow task timeout on every attempt. Levels 26, 27, 29 and 30 are
#: other passes' helpers'.
EVENTS_BUDGET_REPLAYABLE = 28
#: (class: approvals) From this level a continue-as-new carries what the
#: latest CARRIED_OUTCOMES decisions came to, by update or by signal, under
#: their ids (`Carry.outcomes`, `carried_outcomes`), and the next execution
#: answers a decision sent again under one of them with that outcome, by update
#: or by signal. Temporal keeps nothing of a signal's outcome, and an update's
#: only with its execution (serve asked the latest RECENT_EXECUTIONS): sent
#: again under its name (serve's Idempotency-Key, an A2A messageId) once the run
#: had continued as new (or done so 11 times, a run whose later turns need no
#: person), the decision went as a `decide` update to the new execution, and
#: decided the call waiting there, a later turn's call reusing the id, which
#: nobody had seen (a 9,000 transfer to eve).
OUTCOMES_CARRIED = 29
#: (class: approvals) From this level a refusal serve has the run keep under a
#: decision's name (the `decision_refused` update, `refusals`) does not count
#: against PAUSED_WAIT_TASKS while the execution kept no more of them than it
#: took decisions (`refusals.counted`): two reviewers each approving every call
#: of a wide turn (A2A messages always carry a messageId) had the second one's
#: late approvals kept, one workflow task each, and a turn of 500 calls reached
#: the 1,000 tasks mid-turn, the run stopped failed, its last approved call
#: cancelled, though nobody sent anything wrong. A wait thus takes at most
#: 1,500 tasks (500 decisions, as many refusals uncounted, 500 more counted),
#: ~3-3.6 s to replay at the 2.0-2.4 ms a task measured on this 2-core machine
#: under load (docs/benchmarks-notes.md), within the 5 s workflow task timeout.
#: Level 30 is another pass's helper's.
REFUSALS_UNCOUNTED = 31
#: (class: poison) From this level a local model request (`local_model_calls`)
#: of a run with a time limit is bounded by the run's `Deadline.settle_by` (its
#: schedule-to-close, which the worker enforces itself, without a timer), and
#: its timing out so stops the run at its limit, as the limit's timer would
#: have (`Generation.out_of_time`). A local activity holds its workflow task, so
#: the SDK sent the limit's timer and saw it fire only at the task's heartbeat
#: (about every 8 s): a request that never answered had the server time the run
#: out (WORKFLOW_EXECUTION_TIMED_OUT, its turn unsettled) instead of the run
#: stopping DEADLINE_CLOSE before its limit, failed with its own error. Level 32
#: is another pass's helper's.
LOCAL_REQUEST_BOUNDED = 33
#: Outcomes a continue-as-new carries: as many as an execution keeps whole of those
#: by signal (a turn's decisions past them are still found by serve in their execution).
CARRIED_OUTCOMES = 100
#: A carried outcome's size, as encoded, past which it goes in brief (no args).
CARRIED_OUTCOME_BYTES = 600
#: Bytes of a refusal's message a carried outcome in brief keeps.
CARRIED_REFUSAL_BYTES = 300
