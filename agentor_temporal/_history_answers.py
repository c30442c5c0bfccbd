"""What a segment's history holds that its log lacks, for the next segment or a fork.

A run records its events in workflow tasks; an activity that completed
before the run recorded what it did (the run was terminated, timed out, or
is waiting for a person) still has its result in Temporal's history. Resume
and fork read it from there, so that work is not paid for again.
"""

from __future__ import annotations

import json
from typing import Any

from agentor_temporal.store import Event
from agentor_temporal.workflows import Segment, TemporalStore
from agentor_temporal.workflows.approvals import denied_answer
from agentor_temporal.workflows.payloads import clip_to_size, encoded_size, share_budget
from agentor_temporal.workflows.policies import MAX_TURN_RESULT_BYTES
from agentor_temporal.workflows.tool_calls import CUT_OFF


async def completed_batch(temporal: TemporalStore, segment: Segment) -> list[Event]:
    """Results of the segment's last tool batch that history holds but the journal lacks.

    All or nothing: the workflow journals a batch's results together once the
    last call is done, so a batch with any call still open is rewound (the
    model decides again), as on resume. A call answered without an activity
    (bad arguments, unknown tool) counts as open here.
    """
    generations = [i for i, e in enumerate(segment.events) if e.type == "generation"]
    if not generations:
        return []
    gen = segment.events[generations[-1]]
    after = segment.events[generations[-1] + 1 :]
    calls = gen.calls or []
    recorded = {e.call_id for e in after if e.type == "tool_call"}
    if not calls or any(e.type in ("tool_result", "run_end") for e in after):
        return []
    results: list[Event] = []
    for index, call in enumerate(calls):
        done = await _ran(temporal, segment, gen, index) if call.get("id") in recorded else None
        if done is None:
            return []
        results.append(done)
    # as the workflow cuts a turn's results to fit one payload together
    sizes = [encoded_size(e.result) for e in results]
    if sum(sizes) > MAX_TURN_RESULT_BYTES:
        for event, limit in zip(results, share_budget(sizes, MAX_TURN_RESULT_BYTES), strict=True):
            if limit is not None and event.result is not None:
                event.result = clip_to_size(event.result, limit)
    return results


async def _ran(temporal: TemporalStore, segment: Segment, gen: Event, index: int) -> Event | None:
    """The `tool_result` of call `index` of `gen`'s batch, if history holds its activity's
    completion (None: not run to its end, or not readable as that call's)."""
    call = (gen.calls or [])[index]
    done = segment.completed_tools.get(f"tool-{gen.turn}-{index}")
    if done is None:
        return None
    request, answer = await temporal.decode(done[0]), await temporal.decode(done[1])
    if not isinstance(request, dict) or not isinstance(answer, dict):
        return None
    if request.get("call_id") != str(call.get("id")):
        return None
    return Event(
        type="tool_result",
        name=request.get("name"),
        args=request.get("args"),
        result=answer.get("result"),
        error=answer.get("error"),
        call_id=call.get("id"),
        turn=gen.turn,
        started_at=answer.get("started_at"),
        ended_at=answer.get("ended_at"),
    )


async def waiting_answer(temporal: TemporalStore, segment: Segment) -> dict[str, Any] | None:
    """The recorded answer of a segment waiting for a person, as `AgentRunInput.answer`.

    Its last batch is open only because some calls wait for a decision (an
    `approval_request` and none since); the others ran to their end in
    history. A fork of the running parent, or the resume of one terminated
    or timed out so, goes on from that answer: those calls' results are kept
    ("results"), the waiting calls ask for a decision again, and the model is
    not asked again. So are the calls the workflow answered without running
    (an unknown tool, arguments that are not a JSON object): the new segment
    answers them again, as free; and a call a person denied keeps that answer
    when the segment recorded the decision. None when a call of the batch may
    be about to start.

    A segment that closed mid-turn (terminated, timed out) with some calls
    run to their end and others started but not (`cut_off_answer`) goes on
    from that answer too: the finished calls keep their results and the
    others are answered that they may or may not have run, so neither runs
    again; the turn was rewound, the model asked again, and the calls it asked
    for again (a payment that had been made) ran a second time. A call the
    segment never started runs in the next one. A turn in which no call ran
    to its end is rewound, as before. A fork of a running segment likewise:
    a call started there is answered that the parent runs it still.
    """
    events = segment.events
    generations = [i for i, e in enumerate(events) if e.type == "generation"]
    if not generations:
        return None
    gen, after = events[generations[-1]], events[generations[-1] + 1 :]
    calls = gen.calls or []
    if not calls or gen.turn is None or any(e.type in ("tool_result", "run_end") for e in after):
        return None
    asked = {e.call_id for e in after if e.type == "approval_request"}
    decided = {e.call_id: e for e in after if e.type == "approval_decision"}
    recorded = {e.call_id: e for e in after if e.type == "tool_call"}
    closed = segment.status != "running"
    results: list[dict[str, Any] | None] = []
    ran = cut = 0
    for index, call in enumerate(calls):
        done = await _ran(temporal, segment, gen, index)
        if done is not None:
            ran += 1
            results.append(done.to_dict())
        elif call.get("id") in asked and call.get("id") not in decided:
            results.append(None)
        elif call.get("id") in decided and decided[call.get("id")].status == "denied":
            # never ran: the person's "no" answers it, as it did in the segment
            no = decided[call.get("id")]
            denial = denied_answer(str(no.name), no.args, no.call_id, no.result, no.text)
            results.append(denial.to_dict())
        elif call.get("id") not in asked and _never_runs(call, segment.spec):
            results.append(None)  # answered by the workflow, in its journal's next step
        elif closed and f"tool-{gen.turn}-{index}" not in segment.scheduled_tools:
            results.append(None)  # never started: the next segment runs it
        elif call.get("id") in recorded:
            # started, and the segment closed before its end: it may have run; or, a fork
            # of a running parent, the parent runs it still: answered so, its siblings'
            # results kept (the turn rewound, the model was asked again and the calls
            # that had finished in the parent, a payment made, ran a second time)
            cut += 1
            results.append(cut_off_answer(recorded[call.get("id")], segment.status).to_dict())
        else:
            return None  # running, or about to: the fork would run it a second time
    if ran == len(calls) or len(set(map(_call_id, calls))) < len(calls):
        return None  # all ran (`completed_batch`), or ids a decision cannot tell apart
    if cut and not ran:
        return None  # nothing of the turn to keep: rewound, as a cancelled one is
    return {**_answer(gen), "results": results}


def answered_turn(answer: dict[str, Any] | None) -> list[Event] | None:
    """The `tool_result`s of `waiting_answer`'s turn when it has one for every call.

    A fork with input of a parent whose turn had some calls finished (and the
    others cut off, or denied) records these after the parent's events, so the
    new message follows the whole turn: asked again with the turn rewound, the
    model called the tools again and the calls that had finished in the parent
    (a payment made) ran a second time. None when a call has no answer here (it
    waits for a person, or the workflow answers it): the turn is rewound, as before.
    """
    results = (answer or {}).get("results")
    if not results or any(r is None for r in results):
        return None
    return [Event.from_dict(r) for r in results]


def cut_off_answer(call: Event, status: str) -> Event:
    """The answer of `call` (its `tool_call`), started in a segment that closed (`status`)
    before the call's end: its result, if it had one, never reached the run."""
    if status == "running":
        # a fork's answer: the run forked from runs the call on, and keeps its result
        text = (
            "Error: this call was still running in the run this one was forked from; it may "
            "or may not have run, and its result, if any, is recorded there, not here."
        )
    else:
        how = {"terminated": "was terminated", "timed_out": "timed out"}.get(status, "stopped")
        text = (
            f"Error: this call was still running when its run {how}; it may or may not "
            "have run, and its result, if any, was not recorded."
        )
    return Event(
        type="tool_result",
        name=call.name,
        args=call.args,
        call_id=call.call_id,
        turn=call.turn,
        error=CUT_OFF,
        result=text,
    )


def unstarted_answer(segment: Segment) -> dict[str, Any] | None:
    """The answer of a turn the segment stopped before any of its calls started.

    A run cancelled (or stopped by its time limit or its history) while its
    turn's calls wait for a person, or before their activities were
    scheduled, records their `tool_call`s and its `run_end`, and no result:
    the turn was rewound, and resume asked the model again, a second paid
    request that asks for the same calls. None of them started here (no
    `call_tool` activity of the turn in this execution's history), so the
    next segment goes on from the answer, as `AgentRunInput.answer`: it
    records it again and runs its calls (a call needing a person asks again).

    A person's approval the segment took in the workflow task its cancel came
    in (Temporal hands a task's signals and updates to the run before its
    cancel: a worker away for both, or the two sent at once) is recorded, and
    the call it approved never starts. That turn is gone on from too, the call
    asking a person again (the approval was for the call that waited in the
    cancelled execution, stopped before it ran). Before, the recorded approval
    made resume rewind the turn: the model was asked again (a paid request),
    and the call the person was told was approved was dropped unsaid.

    None when any call may have started, a result or another decision was
    recorded, or the segment did not end itself.
    """
    events = segment.events
    generations = [i for i, e in enumerate(events) if e.type == "generation"]
    if not generations or not events or events[-1].type != "run_end":
        return None
    gen, after = events[generations[-1]], events[generations[-1] + 1 : -1]
    calls = gen.calls or []
    if not calls or gen.turn is None:
        return None
    if any(not _unstarted_event(e) for e in after):
        return None  # a result, or a decision answering its call: kept, or rewound as before
    recorded = [e.call_id for e in after if e.type == "tool_call"]
    if recorded != [c.get("id") for c in calls]:
        return None
    if any(f"tool-{gen.turn}-{index}" in segment.scheduled_tools for index in range(len(calls))):
        return None  # started: it may have run, and the turn is rewound as before
    return _answer(gen)


def _unstarted_event(event: Event) -> bool:
    """Whether `event` may follow a turn's answer none of whose calls started."""
    if event.type == "approval_decision":
        return event.status == "approved"
    return event.type in ("tool_call", "approval_request")


def mirrored_waiting_answer(events: list[Event]) -> dict[str, Any] | None:
    """`waiting_answer` from a run's store alone (the server came back without it).

    Only what the log shows is taken: a call with its `tool_result` there ran,
    one asked for and undecided waits again, one denied keeps its denial. Any
    other call may have been running when the server lost the run: None, and
    the model is asked again, as before.
    """
    generations = [i for i, e in enumerate(events) if e.type == "generation"]
    if not generations:
        return None
    gen, after = events[generations[-1]], events[generations[-1] + 1 :]
    calls = gen.calls or []
    if not calls or gen.turn is None or any(e.type == "run_end" for e in after):
        return None
    ran = {e.call_id: e for e in after if e.type == "tool_result"}
    asked = {e.call_id for e in after if e.type == "approval_request"}
    decided = {e.call_id: e for e in after if e.type == "approval_decision"}
    results: list[dict[str, Any] | None] = []
    for call in calls:
        call_id = call.get("id")
        if call_id in ran:
            results.append(ran[call_id].to_dict())
        elif call_id in asked and call_id not in decided:
            results.append(None)
        elif call_id in decided and decided[call_id].status == "denied":
            no = decided[call_id]
            results.append(
                denied_answer(str(no.name), no.args, no.call_id, no.result, no.text).to_dict()
            )
        else:
            return None
    if len(ran) == len(calls) or len(set(map(_call_id, calls))) < len(calls):
        return None
    return {**_answer(gen), "results": results}


def _never_runs(call: dict[str, Any], spec: Any) -> bool:
    """Whether the segment's workflow answers `call` without an activity (as `_screen` does):
    its arguments are not a JSON object, or its agent (`spec`, as recorded) has no such tool.

    A tool disabled after failures is not told apart here: such a call counts as running.
    """
    function = call.get("function")
    if not isinstance(function, dict):
        return False
    try:
        args = json.loads(function.get("arguments") or "{}")
    except ValueError:
        return True
    except (TypeError, RecursionError):
        return False  # not what the workflow's own reading would say: counted as running
    if not isinstance(args, dict):
        return True
    tools = spec.get("tools") if isinstance(spec, dict) else None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        return False  # the agent as it was is not known: any tool might have run
    return str(function.get("name") or "") not in {t.get("name") for t in tools}


def _call_id(call: dict[str, Any]) -> str:
    return str(call.get("id"))


async def completed_answer(temporal: TemporalStore, segment: Segment) -> dict[str, Any] | None:
    """A model answer history holds but the segment never recorded, as `AgentRunInput.answer`.

    A segment stopped for good (terminated, timed out) after its `generate`
    activity completed, before a workflow task recorded the `generation`:
    its request is what the log replays to (the turn before it is whole), so
    the next segment goes on from the answer rather than paying for it again.
    None when the segment ended itself (`run_end`), or its last answer is
    recorded, or its last turn's results are not all recorded.
    """
    events = segment.events
    if not segment.completed_generations or any(e.type == "run_end" for e in events):
        return None
    generations = [i for i, e in enumerate(events) if e.type == "generation"]
    if generations:
        last = events[generations[-1]]
        answered = [e for e in events[generations[-1] + 1 :] if e.type == "tool_result"]
        if last.turn is None or not last.calls or len(answered) < len(last.calls):
            return None
        turn = last.turn + 1
    elif any(e.type == "run_start" for e in events):
        turn = min(_turns(segment.completed_generations), default=0)
    else:
        return None
    payload = segment.completed_generations.get(f"generate-{turn}")
    if payload is None or len(segment.completed_generations) > len(generations) + 1:
        return None
    answer = await temporal.decode(payload)
    if not isinstance(answer, dict):
        return None
    calls = answer.get("calls") or []
    usage = answer.get("usage") or {}
    if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        return None
    if not isinstance(answer.get("text"), (str, type(None))) or not isinstance(usage, dict):
        return None
    return {
        "text": answer.get("text"),
        "reasoning": answer.get("reasoning"),
        "calls": calls,
        "usage": usage,
        "started_at": answer.get("started_at"),
        "ended_at": answer.get("ended_at"),
    }


def _turns(ids: dict[str, Any]) -> list[int]:
    numbers = (name.removeprefix("generate-") for name in ids)
    return [int(n) for n in numbers if n.isdigit()]


def _answer(gen: Event) -> dict[str, Any]:
    """A recorded `generation` as `AgentRunInput.answer` takes it (without its results)."""
    return {
        "text": gen.text,
        "reasoning": gen.reasoning,
        "calls": [dict(c) for c in gen.calls or []],
        "started_at": gen.started_at,
        "ended_at": gen.ended_at,
    }
