"""Keys a run's record holds as a client sent them never leave through our outputs.

A run started by any Temporal client (`temporal workflow start`, a user's own
workflow, another language) records its input as it was sent: history holds
it, and nothing of ours can mask it there. What we write and serve from it
does mask the keys the process knows: the JSONL mirror the worker writes, and
the codec server's decoded payloads (the Temporal UI's view of an encrypted
run). Real dev server, scripted model, real `openai` client, real HTTP.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.request
import uuid
from pathlib import Path

import pytest
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.client import Client

from agentor_temporal import Agentor, FileStore
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from helpers import INSTRUCTIONS, spawn, stop_process, wait_until, weather_tool
from otlp import OtlpReceiver


def _key() -> str:
    return f"sk-recorded-{uuid.uuid4().hex}"


async def test_a_key_in_a_plain_clients_input_is_masked_in_the_mirror(
    client: Client, task_queue: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A key the worker knows, sent in a run's input by a plain Temporal client, is `***`
    in every line of the JSONL mirror, and the masked copy still matches the run."""
    key = _key()
    store = tmp_path / "runs"
    script = [CallTool("get_weather", {"city": "London"}), Reply("It is sunny.")]
    with ScriptedModelServer(script) as model:
        agent = Agentor(
            name="Weather Agent",
            instructions=INSTRUCTIONS,
            tools=[weather_tool()],
            base_url=model.base_url,
            api_key=key,
            temporal=client,
            task_queue=task_queue,
            store=FileStore(store),
        )
        run_id = f"plain-{uuid.uuid4().hex[:8]}"
        await client.start_workflow(
            "AgentRun",
            {"agent": "Weather Agent", "input": f"my key is {key}, what is the weather?"},
            id=run_id,
            task_queue=task_queue,
        )
        result = await agent.aresume(run_id)
        assert result.status == "completed", result.error
        again = await agent.aresume(run_id)  # a finished run's mirror is checked again
    assert again.final_output == "It is sunny."
    text = (store / f"{run_id}.jsonl").read_text()
    assert key not in text
    lines = [json.loads(line) for line in text.splitlines()]
    said = {"role": "user", "content": "my key is ***, what is the weather?"}
    assert said in lines[0]["messages"]
    assert [e["type"] for e in lines][-1] == "run_end"
    # one file: the masked copy was taken for the run's, never set aside as foreign
    assert [p.name for p in store.iterdir()] == [f"{run_id}.jsonl"]
    assert "did not match the run" not in caplog.text


async def test_the_codec_servers_decoded_payloads_mask_known_keys(
    client: Client, task_queue: str
) -> None:
    """An encrypted run's input holding a key the codec server's process knows is decoded
    for the UI with the key `***`; the rest of the payload as it is."""
    from google.protobuf import json_format

    from agentor_temporal.activities._redact import remember
    from agentor_temporal.codec import new_key, parse_keys
    from agentor_temporal.codec_server import CodecServer
    from agentor_temporal.connection import with_encryption

    key = _key()
    keys = parse_keys(f"k1:{new_key()}", source="test")
    run_id = f"codec-{uuid.uuid4().hex[:8]}"
    # no worker: the started event's input is what the UI decodes first
    await with_encryption(client, keys).start_workflow(
        "AgentRun",
        {"agent": "Weather Agent", "input": f"my key is {key}"},
        id=run_id,
        task_queue=task_queue,
    )
    history = await client.get_workflow_handle(run_id).fetch_history()
    await client.get_workflow_handle(run_id).terminate("test over")
    [sent] = history.events[0].workflow_execution_started_event_attributes.input.payloads
    assert key.encode() not in sent.data  # encrypted in history
    body = json.dumps({"payloads": [json_format.MessageToDict(sent)]}).encode()
    remember(key)  # the codec server's process knows it (its OPENAI_API_KEY, say)
    with CodecServer(keys, port=0) as server:
        request = urllib.request.Request(
            f"{server.url}/decode", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            decoded = json.loads(answer.read())
    [shown] = decoded["payloads"]
    data = json.loads(base64.b64decode(shown["data"]))
    assert data == {"agent": "Weather Agent", "input": "my key is ***"}
    assert base64.b64decode(shown["metadata"]["encoding"]) == b"json/plain"


async def test_a_worker_exports_no_known_key_in_its_spans(
    client: Client, temporal_address: str, task_queue: str
) -> None:
    """With content capture on, a key the worker knows, sent in a run's input by a plain
    Temporal client, is `***` in every span it exports (the request's messages)."""
    key = _key()
    run_id = f"traced-{uuid.uuid4().hex[:8]}"
    script = [CallTool("get_weather", {"city": "Oslo"}), Reply("Cold.")]
    worker = None
    with OtlpReceiver() as otlp, ScriptedModelServer(script) as model:
        env = {
            "TEMPORAL_ADDRESS": temporal_address,
            "MODEL_BASE_URL": model.base_url,
            "AGENT_TASK_QUEUE": task_queue,
            "OPENAI_API_KEY": key,
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
        }
        try:
            worker = spawn(["worker"], env)
            handle = await client.start_workflow(
                "AgentRun",
                {"agent": "Weather Agent", "input": f"my key is {key}"},
                id=run_id,
                task_queue=task_queue,
            )
            assert (await handle.result())["status"] == "completed"
            wait_until(
                lambda: len([s for s in otlp.spans if s.name == "chat gpt-4o-mini"]) == 2,
                "both model calls' spans",
            )
        finally:
            stop_process(worker)
    chats = [s for s in otlp.spans if s.name == "chat gpt-4o-mini"]
    assert all("my key is ***" in s.attributes["gen_ai.input.messages"] for s in chats)
    assert not [s.name for s in otlp.spans if key in repr(s)]


async def test_a_users_worker_masks_its_clients_api_key(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """In a user's own Temporal app (`AgentorPlugin` on their worker), the API key their
    client connected with is a secret of the process: a tool's error quoting it is `***`
    in history, the JSONL and the logs."""
    from temporalio.worker import Worker

    from agentor_temporal import AgentorPlugin, function_tool

    api_key = f"tcak-user-{uuid.uuid4().hex}"
    # the dev server ignores the key; the client sends it with every call
    users = await Client.connect(temporal_address, api_key=api_key, tls=False)

    @function_tool
    def get_weather(city: str) -> str:
        """Get the weather.

        Args:
            city: The city.
        """
        raise RuntimeError(f"our namespace refused api key {api_key}")

    store = FileStore(tmp_path)
    run_id = f"plugin-{uuid.uuid4().hex[:8]}"
    script = [CallTool("get_weather", {"city": "Oslo"}), Reply("Cold.")]
    with ScriptedModelServer(script) as model:
        agent = Agentor(
            name="Weather Agent",
            tools=[get_weather],
            base_url=model.base_url,
            api_key="sk-test-model-key-0123456789",
            embedded_worker=False,
        )
        plugin = AgentorPlugin(agents=[agent], store=store)
        async with Worker(users, task_queue=task_queue, plugins=[plugin]):
            handle = await users.start_workflow(
                "AgentRun",
                {"agent": "Weather Agent", "input": "Oslo?"},
                id=run_id,
                task_queue=task_queue,
            )
            assert (await handle.result())["status"] == "completed"
    history = await client.get_workflow_handle(run_id).fetch_history()
    texts = [str(event) for event in history.events]
    texts.append((tmp_path / f"{run_id}.jsonl").read_text())
    assert "our namespace refused api key ***" in texts[-1]
    assert not [text for text in texts if api_key in text]


PRINTING_AGENT = '''
import os, sys
from agentor_temporal import Agentor, function_tool

@function_tool
def get_weather(city: str) -> str:
    """Get the weather.

    Args:
        city: The city.
    """
    key = os.environ["OPENAI_API_KEY"]
    print(f"debug: calling the weather API with {key}")
    sys.stdout.write("in pieces: " + key[:9])
    sys.stdout.write(key[9:] + "\\n")
    print(f"warning: {key} expires soon", file=sys.stderr)
    return "sunny"

agent = Agentor(
    name="Weather Agent",
    tools=[get_weather],
    base_url=os.environ["MODEL_BASE_URL"],
    task_queue=os.environ["AGENT_TASK_QUEUE"],
)
'''


def test_a_tools_print_in_a_commands_process_never_shows_the_key(
    temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """A tool that prints a key its process knows (on stdout in pieces, on stderr), run by
    a command's embedded worker: every line the process writes shows `***`."""
    from helpers import run_agent_module

    key = _key()
    script = [CallTool("get_weather", {"city": "Oslo"}), Reply("Cold.")]
    with ScriptedModelServer(script) as model:
        ran = run_agent_module(
            PRINTING_AGENT, "printing_agent", key, model, temporal_address, task_queue, tmp_path
        )
    assert ran.returncode == 0, ran.stderr
    assert "debug: calling the weather API with ***" in ran.stdout
    assert "in pieces: ***" in ran.stdout and "warning: *** expires soon" in ran.stderr
    assert key not in ran.stdout + ran.stderr


async def test_the_timelines_approval_labels_mask_keys_its_process_knows(
    client: Client, task_queue: str
) -> None:
    """`show --timeline` labels a call waiting for a person with its arguments: a key the
    reading process knows, recorded as it was by a worker that did not know it, is `***`
    there as in the tool call's own bar."""
    from agentor_temporal._timeline import read_timeline
    from agentor_temporal.activities._redact import remember

    from helpers import transfer_tool

    key = f"tl-{uuid.uuid4().hex}"  # no shape a key is known by: recorded as it was
    script = [CallTool("transfer", {"amount": 5000, "to": key}, id="call_pay"), Reply("ok")]
    with ScriptedModelServer(script) as model:
        agent = Agentor(
            name="Weather Agent",
            instructions=INSTRUCTIONS,
            tools=[transfer_tool()],
            base_url=model.base_url,
            api_key="sk-test-another-key-0123456789",
            temporal=client,
            task_queue=task_queue,
        )
        paused = await agent.arun("Pay.")
    try:
        assert paused.status == "awaiting_approval", paused.error
        remember(key)  # the reader knows it
        timeline = await read_timeline(client, paused.run_id)
    finally:
        await client.get_workflow_handle(paused.run_id).terminate(reason="test over")
    assert timeline is not None
    labels = [bar.label for bar in timeline.bars if bar.kind == "approval"]
    assert labels == ["transfer(amount=5000, to='***'): waiting"], labels


def _wrapped_base64_hides(text: str, secret: str) -> bool:
    """Whether no base64 run in `text`, its lines joined (JSON's `\\n` too), decodes to bytes
    holding `secret` from any of its 4 character offsets."""
    joined = text.replace("\\n", "").replace("\n", "")
    for run in re.findall(r"[A-Za-z0-9+/]{8,}", joined):
        for start in range(4):
            part = run[start:]
            if secret.encode() in base64.b64decode(part[: len(part) // 4 * 4]):
                return False
    return True


async def test_a_key_inside_line_wrapped_base64_never_shows(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A tool returning a credentials file as `base64.encodebytes` writes it (cut into lines
    of 76 characters, as mail and `openssl base64` do): wherever a line break falls in the
    key's characters, no base64 in what is recorded or sent decodes to the key."""
    from agentor_temporal import function_tool

    key = _key()
    # a line break across the key's base64 at each place a 76-character line puts one
    files = [("x" * pad + json.dumps({"token": key})).encode() for pad in range(0, 60, 7)]
    wrapped = [base64.encodebytes(f).decode() for f in files]
    assert all(not _wrapped_base64_hides(w, key) for w in wrapped)

    @function_tool
    def read_credentials(name: str) -> str:
        """Read a credentials file, base64.

        Args:
            name: The file.
        """
        return json.dumps({"files": wrapped})

    script = [CallTool("read_credentials", {"name": "creds"}), Reply("ok")]
    with ScriptedModelServer(script) as model:
        agent = Agentor(
            name="Weather Agent",
            instructions=INSTRUCTIONS,
            tools=[read_credentials],
            base_url=model.base_url,
            api_key=key,
            temporal=client,
            task_queue=task_queue,
            store=FileStore(tmp_path / "runs"),
        )
        result = await agent.arun("Read creds.")
        sent = json.dumps(model.requests[-1]["messages"])
    assert result.status == "completed", result.error
    [answer] = [e for e in result.events if e.type == "tool_result"]
    assert answer.result is not None and answer.result.count("***") >= len(files), answer.result
    history = await client.get_workflow_handle(result.run_id).fetch_history()
    texts = {
        "result": answer.result,
        "model": sent,
        "store": (tmp_path / "runs" / f"{result.run_id}.jsonl").read_text(),
        # the payloads' JSON text, as the UI decodes it
        "history": "\n".join(
            p.data.decode("utf-8", "replace") for event in history.events for p in _payloads(event)
        ),
    }
    assert [name for name, text in texts.items() if not _wrapped_base64_hides(text, key)] == []


def _payloads(event: Message) -> list[Payload]:
    """Every payload an event of history holds (inputs, results)."""
    found: list[Payload] = []
    for _, value in event.ListFields():
        items = value if hasattr(value, "extend") else [value]  # a repeated field
        for item in items:
            if isinstance(item, Payload):
                found.append(item)
            elif isinstance(item, Message):
                found += _payloads(item)
    return found


#: How a tool may return a key with characters a URL escapes (an Azure storage key's `/`
#: and `==`), and so no known form but its own encoding matched; every byte percent-encoded
#: in hex of mixed case (an encoder escaping all it writes), or the key upper-cased (a
#: gateway's error shouting what it was sent).
ENCODINGS = ["percent-twice", "percent-plus-twice", "hex", "HEX", "percent-every-byte", "upper"]


def _encoded(key: str, how: str) -> tuple[str, str]:
    """What the tool returns holding `key` encoded `how`, and the key in that encoding."""
    from urllib.parse import quote, quote_plus

    if how == "percent-twice":  # a URL put in another's query (a redirect's `?next=`)
        inner = "https://acct.blob.example/c?sig=" + quote(key, safe="")
        return "https://login.example/cb?next=" + quote(inner, safe=""), quote(
            quote(key, safe=""), safe=""
        )
    if how == "percent-plus-twice":
        return "https://login.example/cb?next=" + quote_plus("sig=" + quote_plus(key)), quote_plus(
            quote_plus(key)
        )
    if how == "percent-every-byte":
        every = "".join(
            f"%{byte:02X}" if i % 2 else f"%{byte:02x}" for i, byte in enumerate(key.encode())
        )
        return "https://login.example/cb?sig=" + every, every
    if how == "upper":
        return f"INVALID KEY {key.upper()} FOR THIS ACCOUNT", key.upper()
    # a dump of the bytes that hold it (a hash's input, a packet's)
    data = ("token=" + key + ";").encode().hex()
    data = data.upper() if how == "HEX" else data
    return data, key.encode().hex().upper() if how == "HEX" else key.encode().hex()


@pytest.mark.parametrize("how", ENCODINGS)
async def test_a_key_percent_encoded_twice_or_hex_never_shows(
    client: Client, task_queue: str, tmp_path: Path, how: str
) -> None:
    """A key percent-encoded twice, or hex-encoded, as a tool returns it: `***` in the
    result, the model's request, the JSONL mirror and history."""
    from agentor_temporal import function_tool

    key = f"{uuid.uuid4().hex}/K1SZFPTOtr+KBHBeksoGMGw=="
    text, encoded = _encoded(key, how)
    assert encoded in text

    @function_tool
    def sign_in_link(user: str) -> str:
        """A sign-in link.

        Args:
            user: Who signs in.
        """
        return json.dumps({"link": text})

    script = [CallTool("sign_in_link", {"user": "ann"}), Reply("ok")]
    with ScriptedModelServer(script) as model:
        agent = Agentor(
            name="Weather Agent",
            instructions=INSTRUCTIONS,
            tools=[sign_in_link],
            base_url=model.base_url,
            api_key=key,
            temporal=client,
            task_queue=task_queue,
            store=FileStore(tmp_path / "runs"),
        )
        result = await agent.arun("Link?")
        sent = json.dumps(model.requests[-1]["messages"])
    assert result.status == "completed", result.error
    [answer] = [e for e in result.events if e.type == "tool_result"]
    assert answer.result is not None and "***" in answer.result, answer.result
    history = await client.get_workflow_handle(result.run_id).fetch_history()
    texts = {
        "result": answer.result,
        "model": sent,
        "store": (tmp_path / "runs" / f"{result.run_id}.jsonl").read_text(),
        "history": "\n".join(
            p.data.decode("utf-8", "replace") for event in history.events for p in _payloads(event)
        ),
    }
    assert [name for name, text in texts.items() if encoded in text] == []


@pytest.mark.parametrize("shape", ["prompt", "messages"])
async def test_a_key_in_a_plain_clients_input_never_reaches_the_model(
    client: Client, task_queue: str, tmp_path: Path, shape: str
) -> None:
    """A key the worker knows, sent in a run's input by a plain Temporal client (a prompt, or
    chat messages with text parts), is `***` in every request the model is sent."""
    key = _key()
    said = f"my key is {key}, what is the weather?"
    sent: object = said
    if shape == "messages":
        sent = [
            {"role": "user", "content": "hello"},
            {"role": "user", "content": [{"type": "text", "text": said}]},
        ]
    script = [CallTool("get_weather", {"city": "London"}), Reply("It is sunny.")]
    with ScriptedModelServer(script) as model:
        agent = Agentor(
            name="Weather Agent",
            instructions=INSTRUCTIONS,
            tools=[weather_tool()],
            base_url=model.base_url,
            api_key=key,
            temporal=client,
            task_queue=task_queue,
            store=FileStore(tmp_path / "runs"),
        )
        run_id = f"plain-model-{uuid.uuid4().hex[:8]}"
        await client.start_workflow(
            "AgentRun", {"agent": "Weather Agent", "input": sent}, id=run_id, task_queue=task_queue
        )
        result = await agent.aresume(run_id)
        requests = model.requests
    assert result.status == "completed", result.error
    assert len(requests) == 2
    for request in requests:
        text = json.dumps(request)
        assert key not in text and "my key is ***, what is the weather?" in text, text
