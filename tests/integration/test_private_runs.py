"""Private runs: with encryption keys, Temporal's history holds no prompt, argument or answer.

Every test runs real runs on the session's dev server through the real
codec, then reads the history as an operator would (`temporal workflow show
-o json`, base64 decoded) and looks for any fragment of the prompt, the tool's
arguments and result, the answer and the instructions. The same detector finds
them all in an unencrypted run, so it can fail. The runs still complete,
stream, survive a SIGKILLed worker, rotate keys, mirror plain JSONL, and
everything that reads them (TemporalStore, resume, the CLI) works given the
key and names the missing key otherwise.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client
from temporalio.service import RPCError

from agentor_temporal import FileStore, TemporalStore, _stuck
from agentor_temporal._runtime import Runtime
from agentor_temporal.codec import EncryptionKeyError
from agentor_temporal.connection import connect
from agentor_temporal.testing import ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import (
    SEED_EVENT_TYPES,
    free_port,
    ledger_lines,
    polled,
    scripted_agent,
    until,
    weather_agent,
)
from integration.test_cli import AGENT, Running, cli, parsed
from private import (
    CITY,
    SECRET_ANSWER,
    SECRET_PROMPT,
    SECRETS,
    history_json,
    key_file,
    keys_of,
    leaks,
    make_keys,
)

KEYS = make_keys("A", "B")


async def test_encrypted_run_streams_completes_and_leaves_no_plaintext_in_history(
    client: Client,
    temporal_address: str,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
) -> None:
    """A streamed encrypted run: no secret in `temporal workflow show -o json`, plain JSONL 0600."""
    runs = tmp_path / "runs"
    agent = scripted_agent(
        model, client, task_queue, store=FileStore(runs), encryption_keys=keys_of(KEYS["A"])
    )
    run_id = uuid.uuid4().hex
    streamed = [e async for e in agent.stream_chat(SECRET_PROMPT, run_id=run_id, stream_text=True)]
    # an `error` marker says a model attempt was retried (a loaded machine): what was
    # streamed before it is void
    recorded = [e for e in streamed if e.type not in ("text_delta", "error")]
    assert [e.type for e in recorded] == SEED_EVENT_TYPES
    live = [e for e in streamed if e.turn == 2 and e.type in ("text_delta", "error")]
    last = live[max((i for i, e in enumerate(live) if e.type == "error"), default=-1) + 1 :]
    assert "".join(e.text or "" for e in last) == SECRET_ANSWER
    result = await agent.aresume(run_id)
    assert result.status == "completed" and result.final_output == SECRET_ANSWER

    history = history_json(temporal_address, run_id)
    assert "binary/encrypted" in " ".join(leaks(history, ["binary/encrypted"]))
    assert leaks(history) == []
    # the stream's polls are workflow updates: in history, and encrypted too
    assert "workflowExecutionUpdateCompletedEventAttributes" in history

    # the mirror is the user's own store: plain, owner-only, equal to history
    mirrored = FileStore(runs).load(run_id)
    assert mirrored[0].messages is not None and mirrored[0].messages[-1]["content"] == SECRET_PROMPT
    assert (runs / f"{run_id}.jsonl").stat().st_mode & 0o777 == 0o600
    readable = await connect(client, encryption_keys=keys_of(KEYS["A"]))
    projected = await TemporalStore(readable).aload(run_id)
    assert [e.to_dict() for e in projected] == [e.to_dict() for e in mirrored]

    # a client without the key is told which key it needs
    with pytest.raises(EncryptionKeyError, match="key 'A', and no encryption keys"):
        await TemporalStore(await connect(temporal_address)).aload(run_id)

    # the detector is real: an unencrypted run's history shows every secret
    # (another queue: one process runs one embedded worker per queue, with one codec)
    plain = weather_agent(
        base_url=model.base_url, task_queue=f"{task_queue}-plain", temporal=client
    )
    shown = await plain.arun(SECRET_PROMPT)
    assert leaks(history_json(temporal_address, shown.run_id)) == SECRETS


@pytest.mark.slow
async def test_encrypted_run_survives_a_sigkilled_worker(
    client: Client,
    temporal_address: str,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
) -> None:
    """Worker processes with a key file: one SIGKILLed mid-tool, the next finishes the run."""
    keys = key_file(tmp_path / "keys.txt", KEYS["A"])
    runs, gate = tmp_path / "runs", tmp_path / "gate"
    env = {
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_LEDGER": ledger,
        "AGENT_STORE": str(runs),
        "AGENT_GATE": str(gate),
    }
    command = ["worker", "--agents", AGENT, "--temporal", temporal_address]
    first = Running([*command, "--encryption-keys-file", str(keys)], env)
    second: Running | None = None
    try:
        first.wait_for("stdout", "worker ready")
        starter = scripted_agent(
            model, client, task_queue, embedded_worker=False, encryption_keys=keys
        )
        run_id = uuid.uuid4().hex
        running = asyncio.ensure_future(starter.arun(SECRET_PROMPT, run_id=run_id))

        async def tool_in_flight() -> bool:
            try:
                described = await client.get_workflow_handle(run_id).describe()
            except RPCError:
                return False  # not started yet
            return any(
                a.activity_type.name == "call_tool"
                and a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                for a in described.raw_description.pending_activities
            )

        for _ in range(3000):
            if await tool_in_flight():
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the tool never started")
        first.process.send_signal(signal.SIGKILL)
        first.finish(10)
        # the key from the environment this time
        second = Running(command, {**env, "AGENTOR_ENCRYPTION_KEYS": KEYS["A"]})
        second.wait_for("stdout", "worker ready")
        gate.write_text("go")
        result = await asyncio.wait_for(running, 120)
    finally:
        first.kill()
        if second is not None:
            second.kill()
    assert result.status == "completed" and result.final_output == SECRET_ANSWER
    assert len(ledger_lines(ledger)) == 1  # the killed worker's call never got past its gate
    assert [e.type for e in FileStore(runs).load(run_id)] == SEED_EVENT_TYPES
    assert leaks(history_json(temporal_address, run_id)) == []


async def test_keys_rotate_and_a_removed_key_is_named(
    client: Client,
    temporal_address: str,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
) -> None:
    """Written under A; B current with A kept reads and resumes it; B alone names A."""
    under_a = weather_agent(
        base_url=model.base_url,
        task_queue=task_queue,
        temporal=temporal_address,
        encryption_keys=keys_of(KEYS["A"]),
    )
    # one turn only: the run stops at max_turns, so resuming it writes a new segment
    stopped = await under_a.arun(SECRET_PROMPT, max_turns=1)
    assert stopped.status == "max_turns"
    # the rollout is over: no worker with A alone is left (one would fail B's tasks)
    await asyncio.to_thread(Runtime.get().stop_workers)

    rotated = weather_agent(
        base_url=model.base_url,
        task_queue=task_queue,
        temporal=temporal_address,
        encryption_keys=keys_of(KEYS["B"], KEYS["A"]),
    )
    resumed = await rotated.aresume(stopped.run_id)
    assert resumed.status == "completed" and resumed.final_output == SECRET_ANSWER
    segments = await TemporalStore(
        await connect(client, encryption_keys=keys_of(KEYS["B"], KEYS["A"]))
    ).segments(stopped.run_id)
    assert len(segments) == 2

    def key_ids(execution: str) -> set[str]:
        history = json.loads(history_json(temporal_address, stopped.run_id, execution))
        text = json.dumps(history)
        return {k for k in ("QQ==", "Qg==") if f'"encryption-key-id": "{k}"' in text}

    # segment 1 was written under A, segment 2 (after the rotation) under B only
    assert key_ids(segments[0].execution_run_id) == {"QQ=="}
    assert key_ids(segments[1].execution_run_id) == {"Qg=="}
    for segment in segments:
        assert leaks(history_json(temporal_address, stopped.run_id, segment.execution_run_id)) == []

    # A removed: every reader names the key it lacks
    only_b = keys_of(KEYS["B"])
    with pytest.raises(EncryptionKeyError, match="key 'A', which is not configured") as info:
        await TemporalStore(await connect(client, encryption_keys=only_b)).aload(stopped.run_id)
    assert info.value.key_id == "A"
    b_file = key_file(tmp_path / "b.txt", KEYS["B"])
    shown = cli(
        "show",
        stopped.run_id,
        "--temporal",
        temporal_address,
        "--encryption-keys-file",
        str(b_file),
    )
    assert shown.returncode == 1
    assert shown.stderr.startswith("error: This data is encrypted with key 'A'")
    assert "Traceback" not in shown.stderr
    # `list` shows the run it cannot read as such, and still lists the others
    here = ["--temporal", temporal_address, "--encryption-keys-file", str(b_file)]
    # newest first on a server other tests share: room for runs they start meanwhile
    listed = cli("list", *here, "--json", "--limit", "100")
    assert listed.returncode == 0, listed.stderr
    [row] = [r for r in json.loads(listed.stdout) if r["run_id"] == stopped.run_id]
    assert row["status"] == "unreadable" and "key 'A'" in row["error"]

    # and a worker that lacks the run's key says so instead of running garbage
    queue = f"{task_queue}-b"  # served by that worker alone
    worker = Running(
        [
            "worker",
            "--agents",
            AGENT,
            "--temporal",
            temporal_address,
            "--encryption-keys-file",
            str(b_file),
        ],
        {"MODEL_BASE_URL": model.base_url, "AGENT_TASK_QUEUE": queue},
    )
    try:
        worker.wait_for("stdout", "worker ready")
        starter = weather_agent(
            base_url=model.base_url,
            task_queue=queue,
            temporal=temporal_address,
            embedded_worker=False,
            encryption_keys=keys_of(KEYS["A"]),
        )
        run_id = uuid.uuid4().hex
        task = asyncio.ensure_future(starter.arun(SECRET_PROMPT, run_id=run_id))
        line = await asyncio.to_thread(
            worker.wait_for, "stderr", "This data is encrypted with key 'A'"
        )
        assert "which is not configured here (keys 'B'" in line
        task.cancel()
        await client.get_workflow_handle(run_id).terminate("test over")
    finally:
        worker.kill()


def test_cli_reads_encrypted_runs_given_the_key(
    temporal_address: str, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    """`run`, `show`, `list` and `export` read encrypted runs given the key (file or env)."""
    keys = key_file(tmp_path / "keys.txt", KEYS["A"])
    env = {"MODEL_BASE_URL": model.base_url, "AGENT_TASK_QUEUE": task_queue}
    here = ["--temporal", temporal_address]
    ran = cli(
        "run",
        "--agent",
        AGENT,
        *here,
        "--encryption-keys-file",
        str(keys),
        "--json",
        SECRET_PROMPT,
        env=env,
    )
    assert ran.returncode == 0, ran.stderr
    run_id = json.loads(ran.stdout)["run_id"]
    assert leaks(history_json(temporal_address, run_id)) == []

    with_env = {**env, "AGENTOR_ENCRYPTION_KEYS": KEYS["A"]}
    shown = cli("show", run_id, *here, env=with_env)
    assert shown.returncode == 0, shown.stderr
    assert SECRET_PROMPT in shown.stdout and f"get_weather(city='{CITY}')" in shown.stdout
    listed = cli("list", *here, "--json", "--limit", "100", env=with_env)
    assert listed.returncode == 0, listed.stderr
    assert run_id in listed.stdout
    out = tmp_path / "exported.jsonl"
    exported = cli("export", run_id, *here, "-o", str(out), "--encryption-keys-file", str(keys))
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [e["type"] for e in lines] == SEED_EVENT_TYPES
    assert lines[-1]["text"] == SECRET_ANSWER
    assert out.stat().st_mode & 0o777 == 0o600

    missing = cli("show", run_id, *here)
    assert missing.returncode == 1
    assert "error: This data is encrypted with key 'A', and no encryption keys" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_codec_server_decodes_history_for_the_temporal_cli(
    temporal_address: str, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    """`temporal workflow show --codec-endpoint` reads an encrypted run through the codec server."""
    keys = key_file(tmp_path / "keys.txt", KEYS["A"])
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    env = {"MODEL_BASE_URL": model.base_url, "AGENT_TASK_QUEUE": task_queue}
    ran = cli(
        "run",
        "--agent",
        AGENT,
        "--temporal",
        temporal_address,
        "--json",
        "--encryption-keys-file",
        str(keys),
        SECRET_PROMPT,
        env=env,
    )
    assert ran.returncode == 0, ran.stderr
    run_id = json.loads(ran.stdout)["run_id"]

    port = free_port()
    server = Running(
        [
            "codec-server",
            "--port",
            str(port),
            "--encryption-keys-file",
            str(keys),
            "--token-file",
            str(token),
        ],
        {},
    )
    try:
        ready = server.wait_for("stdout", "codec server on")
        assert "bearer token required" in ready and KEYS["A"].split(":")[1] not in ready
        endpoint = ["--codec-endpoint", f"http://127.0.0.1:{port}"]
        decoded = history_json(
            temporal_address, run_id, None, *endpoint, "--codec-auth", "Bearer s3cret"
        )
        assert set(leaks(decoded)) >= {CITY, "sunny and 22C", "Answer based on tool"}
        # without the token the server answers 401 (and the temporal CLI gives up)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/decode", data=b'{"payloads": []}', method="POST"
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 401
    finally:
        server.process.send_signal(signal.SIGTERM)
        assert server.finish(10) == 0


def test_bad_keys_are_usage_errors(temporal_address: str, tmp_path: Path) -> None:
    """A malformed key is one line naming the entry (exit 2), never the key, never a trace."""
    short = "A:" + "QUJD" * 4
    bad = cli("show", "r1", "--temporal", temporal_address, env={"AGENTOR_ENCRYPTION_KEYS": short})
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "error: AGENTOR_ENCRYPTION_KEYS, entry 1 (key id 'A'): the key is 12 bytes, AES-256 "
        "needs 32; make one with `agentor-temporal keygen KEY_ID` (or: python -c 'import "
        "base64,os; print(base64.b64encode(os.urandom(32)).decode())')"
    )
    missing = cli(
        "worker",
        "--agents",
        AGENT,
        "--temporal",
        temporal_address,
        "--encryption-keys-file",
        str(tmp_path / "nope.txt"),
    )
    assert missing.returncode == 2
    assert "cannot read the encryption keys file" in missing.stderr
    made = cli("keygen", "2025-07")
    assert made.returncode == 0 and made.stdout.startswith("2025-07:")
    assert keys_of(made.stdout.strip()).current_id == "2025-07"
    assert cli("keygen", "bad id").returncode == 2
    no_keys = cli("codec-server", "--port", str(free_port()))
    assert no_keys.returncode == 2
    assert no_keys.stderr.startswith("error: the codec server needs the encryption keys")


def test_the_private_run_commands_explain_themselves() -> None:
    """`codec-server`, `keygen` and `dev` say how encryption is switched on, with examples."""
    wanted = {
        "codec-server": ["--cors-origin", "--token-file", "--encryption-keys-file", "--host"],
        "keygen": ["key_id"],
        "dev": ["--codec-port", "--encryption-keys-file"],
        "show": ["--encryption-keys-file"],
        "worker": ["--encryption-keys-file"],
    }
    # the parser `python -m agentor_temporal` uses, here (test_cli runs the real entry point)
    for command, needles in wanted.items():
        code, stdout, stderr = parsed(command, "--help")
        assert code == 0, stderr
        assert f"agentor-temporal {command}" in stdout or command == "worker"
        for needle in needles:
            assert needle in stdout, (command, needle)


@pytest.mark.slow
async def test_a_worker_without_the_key_leaves_the_run_and_the_caller_is_told(
    client: Client,
    temporal_address: str,
    model: ScriptedModelServer,
    task_queue: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker that cannot read an encrypted run fails its workflow task, which Temporal
    retries: the run waits for a worker with the key, and its caller (arun, stream) is told
    once why nothing moves, in a warning naming the run and the missing key. A worker with
    no codec at all failed the run for good as 'Invalid AgentRun input'; the caller of a
    worker with a codec but no keys waited in silence."""
    monkeypatch.setattr(_stuck, "STUCK_POLL", 0.2)
    monkeypatch.setattr(_stuck, "STUCK_ATTEMPTS", 2)  # Temporal waits ~10 s before the third
    caplog.set_level(logging.WARNING, logger="agentor_temporal")
    keyed = await connect(client, encryption_keys=keys_of(KEYS["A"]))
    agent = scripted_agent(model, keyed, task_queue, embedded_worker=False)

    def warned(run_id: str) -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.name == "agentor_temporal" and f"Run {run_id} is not moving" in r.getMessage()
        ]

    # a worker with no codec at all (a plain Temporal client): the run waits
    run_id = uuid.uuid4().hex
    plain = await Client.connect(temporal_address)
    no_codec = scripted_agent(model, plain, task_queue)
    async with build_worker(plain, [no_codec], task_queue=task_queue):
        await polled(plain, task_queue)
        waiting = asyncio.ensure_future(agent.arun(SECRET_PROMPT, run_id=run_id))
        await until(lambda: warned(run_id) or waiting.done(), "a warning for the stuck run")
        assert not waiting.done(), waiting.result()
    message = warned(run_id)[0]
    assert "encrypted with key 'A', and this worker has no encryption codec" in message
    assert f"temporal workflow terminate --workflow-id {run_id}" in message

    # a worker with the codec but no keys: a follower is told too
    streamed: list[str] = []
    stream_id = uuid.uuid4().hex

    async def follow() -> None:
        async for event in agent.stream_chat(SECRET_PROMPT, run_id=stream_id):
            streamed.append(event.type)

    keyless = await connect(temporal_address)
    no_keys = scripted_agent(model, keyless, task_queue)
    async with build_worker(keyless, [no_keys], task_queue=task_queue):
        await polled(keyless, task_queue)
        following = asyncio.ensure_future(follow())
        await until(lambda: warned(stream_id), "a warning for the stuck stream")
    assert "key 'A', and no encryption keys are configured here" in warned(stream_id)[0]

    # a worker with the key takes both runs over and finishes them; one warning each
    async with build_worker(keyed, [agent], task_queue=task_queue):
        done = await asyncio.wait_for(waiting, 60)
        await asyncio.wait_for(following, 60)
    assert done.status == "completed" and done.final_output == SECRET_ANSWER
    assert streamed[-1] == "run_end" and "tool_call" in streamed
    assert len(warned(run_id)) == 1 and len(warned(stream_id)) == 1
