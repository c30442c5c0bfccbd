"""A fork of a fork of ... reads its whole line of parents, however long.

`fork(run_id, input)` is how a conversation goes on with a new message (resume
takes none), so a chat app that forks its last run at each message makes a
line of forks as long as the chat. A fork's log begins with its parent's first
events, which it references rather than copies; its log was read down the line
at most 100 parents deep, so from the 101st message on (with Temporal as the
only record, no store) every fork of the newest run was refused for good ("its
first 4 events are neither in Temporal nor in None; it cannot be forked"), its
log read short, and a long conversation sent by reference could not be rebuilt.
"""

from __future__ import annotations

from temporalio.client import Client

from agentor_temporal import TemporalStore
from agentor_temporal.testing import Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import policies

from helpers import scripted_agent

#: Forks in the line: past the 100 parents the log was read down before.
LINE = 102


async def test_a_fork_of_a_long_line_of_forks_reads_it_whole_and_forks_again(
    client: Client, task_queue: str
) -> None:
    """The newest fork of a line of 102 is read whole (the first run's events first),
    and forks again, with no store to fall back on."""
    with ScriptedModelServer(lambda request: Reply("ok")) as model:
        agent = scripted_agent(model, client, task_queue, embedded_worker=False)
        async with build_worker(client, [agent], task_queue=task_queue):
            first = await agent.arun("hi")
            at = len(first.events)
            # the line started as a plain client starts forks (what the facade's fork
            # sends, less the replayed conversation): a facade fork reads the whole
            # line above it each time, 5,000 history reads for a line this long
            parent = str(first.run_id)
            execution = (await client.get_workflow_handle(parent).describe()).run_id
            handles = []
            for index in range(LINE):
                handle = await client.start_workflow(
                    policies.WORKFLOW_TYPE,
                    {
                        "agent": agent.name,
                        "input": f"message {index}",
                        "event_offset": at,
                        "fork": {"run_id": parent, "at": at, "execution": execution},
                    },
                    id=f"line-{index}-{task_queue}",
                    task_queue=task_queue,
                )
                handles.append(handle)
                parent, execution = handle.id, handle.first_execution_run_id
            for handle in handles:
                assert (await handle.result())["status"] == "completed"

            log = await TemporalStore(client).aload(parent)
            assert [e.to_dict() for e in log[:at]] == [e.to_dict() for e in first.events]
            assert log[at].type == "fork"

            fork = await agent.afork(parent, "and one more")
            assert fork.status == "completed", fork.error
            assert [e.to_dict() for e in fork.events[: len(log)]] == [e.to_dict() for e in log]
