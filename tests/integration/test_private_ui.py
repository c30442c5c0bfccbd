"""An encrypted run in the Temporal UI, in headless Chromium: ciphertext, until the codec server.

`agentor-temporal dev` with encryption keys set starts the dev server with
its UI's codec endpoint pointing at a codec server it starts beside it. With
that server up, the browser decodes the run's page (the prompt in the run's
summary, the tool call's summary); with it stopped, the same page shows the
payloads' ciphertext and nothing of the run.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload

from agentor_temporal.codec_server import stop_codec_server
from agentor_temporal.connection import connect, stop_dev_server
from agentor_temporal.testing import ScriptedModelServer
from agentor_temporal.worker import build_worker

from browser import Page, find_chromium
from helpers import free_port, port_open, scripted_agent, wait_until
from integration.test_cli import cli
from integration.test_ui import ARTIFACTS, _rendered
from private import SECRET_ANSWER, SECRET_PROMPT, SECRETS, TOOL_SUMMARY, key_file, make_keys

needs_chromium = pytest.mark.skipif(
    find_chromium() is None, reason="Chromium is not installed, so the UI cannot be rendered"
)


def _ciphertexts(payloads: list[Payload]) -> list[str]:
    """How the UI prints payloads it cannot decode: their data, base64 (a prefix of it)."""
    return [base64.b64encode(p.data).decode()[:24] for p in payloads if p.data]


@needs_chromium
async def test_ui_decodes_an_encrypted_run_only_through_the_codec_server(
    tmp_path: Path, model: ScriptedModelServer
) -> None:
    """With the codec server the page shows the prompt and tool summary; without it, ciphertext."""
    keys = key_file(tmp_path / "keys.txt", make_keys("A")["A"])
    port, ui_port, codec_port = free_port(), free_port(), free_port()
    data = tmp_path / "temporal"
    where = ["--port", str(port), "--ui-port", str(ui_port), "--data-dir", str(data)]
    env = {"AGENTOR_ENCRYPTION_KEYS_FILE": str(keys)}
    try:
        started = cli("dev", *where, "--codec-port", str(codec_port), env=env)
        assert started.returncode == 0, started.stderr
        assert f"  codec    http://localhost:{codec_port}" in started.stdout
        status = cli("dev", "status", *where, env=env)
        assert f"  codec    http://localhost:{codec_port}" in status.stdout
        assert data.stat().st_mode & 0o777 == 0o700

        client = await connect(f"127.0.0.1:{port}", encryption_keys=keys)
        task_queue = f"tq-{uuid.uuid4().hex[:10]}"
        agent = scripted_agent(
            model, client, task_queue, embedded_worker=False, encryption_keys=keys
        )
        # a worker stays up while the pages load: the UI asks one for the
        # current details (without one, that page waits out a query timeout)
        async with build_worker(client, [agent], task_queue=task_queue):
            result = await agent.arun(SECRET_PROMPT)
            assert result.final_output == SECRET_ANSWER
            execution = (await client.get_workflow_handle(result.run_id).describe()).run_id
            page = f"http://localhost:{ui_port}/namespaces/default/workflows/{result.run_id}"
            history_page, metadata_page = (
                f"{page}/{execution}/history",
                f"{page}/{execution}/user-metadata",
            )

            prompt_summary = f"Weather Agent: {SECRET_PROMPT}"

            def read_decoded() -> tuple[str, list[str]]:
                # one browser for both pages, each read once it shows what is checked
                with Page(tmp_path / "p1") as tab:
                    tab.open(history_page)
                    decoded = tab.wait_for_text(prompt_summary, TOOL_SUMMARY)
                    tab.open(metadata_page)
                    shown = tab.wait_for(
                        lambda html: (
                            prompt_summary in (r := _rendered(html))
                            and any(x.startswith("Finished: completed after 2 turns") for x in r)
                        ),
                        "the decoded current details",
                    )
                return decoded, _rendered(shown)

            decoded, rendered = await asyncio.to_thread(read_decoded)
            assert prompt_summary in decoded, "the decoded run summary"
            assert TOOL_SUMMARY in decoded, "the decoded tool call summary"
            assert prompt_summary in rendered
            assert any(r.startswith("Finished: completed after 2 turns") for r in rendered)

            assert stop_codec_server(data)
            await asyncio.to_thread(
                wait_until, lambda: not port_open(codec_port), "the codec server to stop", 30
            )
            raw = await client.get_workflow_handle(result.run_id).fetch_history()
            payloads = [
                p
                for e in raw.events
                for p in [
                    *e.activity_task_completed_event_attributes.result.payloads,
                    *e.workflow_execution_completed_event_attributes.result.payloads,
                ]
            ]
            shot = ARTIFACTS / "ui-encrypted.png"

            def read_encrypted() -> str:
                # a fresh profile: nothing the decoding browser kept
                with Page(tmp_path / "p3") as tab:
                    tab.open(history_page)
                    html = tab.wait_for(
                        lambda html: any(c in html for c in _ciphertexts(payloads)),
                        "a payload's ciphertext",
                    )
                    tab.screenshot(shot)
                return html

            encrypted = await asyncio.to_thread(read_encrypted)
        shown = [c for c in _ciphertexts(payloads) if c in encrypted]
        assert shown, "no payload's ciphertext is on the page"
        assert [s for s in SECRETS if s in encrypted] == []
        assert TOOL_SUMMARY not in encrypted
    finally:
        cli("dev", "stop", *where)
        stop_codec_server(data)
        stop_dev_server(data)
