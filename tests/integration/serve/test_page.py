"""The page at `/`, driven in headless Chromium through a server restart.

Start a run from the page, approve its pending call with the page's button,
SIGKILL the server while the approved tool runs and start it again: the
page's `EventSource` reconnects by itself and the rendered DOM shows every
event of the run exactly once, in order. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import httpx
import pytest

from browser import Page, find_chromium
from helpers import ROOT
from serve_http import TOKEN, Server

ARTIFACTS = ROOT / "test-artifacts"
APPROVED_TYPES = [
    "run_start",
    "generation",
    "tool_call",
    "approval_request",
    "approval_decision",
    "tool_result",
    "generation",
    "message",
    "run_end",
]

pytestmark = pytest.mark.skipif(
    find_chromium() is None, reason="Chromium is not installed (Debian: apt-get install chromium)"
)


def rows(page: Page) -> list[tuple[int, str]]:
    """(position, type) of every event row the page shows."""
    value = page.evaluate(
        "JSON.stringify([...document.querySelectorAll('#events li')]"
        ".map(li => [Number(li.dataset.position), li.querySelector('.type').textContent]))"
    )
    return [(int(p), str(t)) for p, t in json.loads(value or "[]")]


def text_of(page: Page, selector: str) -> str:
    script = f"(document.querySelector({json.dumps(selector)}) || {{}}).textContent || ''"
    return str(page.evaluate(script))


def wait(page: Page, script: str, what: str, timeout: float = 30) -> None:
    """Until a JavaScript expression is true in the page (asked again across a reload)."""
    deadline = time.monotonic() + timeout
    while not page.settled(script):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"the page never showed {what} within {timeout}s; events: {rows(page)}, "
                f"conn: {text_of(page, '#conn')!r}, error: {text_of(page, '#error')!r}"
            )
        time.sleep(0.05)


def test_page_runs_approves_and_survives_a_server_restart(
    server: Server, http: httpx.Client, gates: Path, tmp_path: Path
) -> None:
    """Start, approve with the button, restart the server mid-run: every event shown once."""
    payee = "P" + uuid.uuid4().hex[:8]
    with Page(tmp_path / "profile") as page:
        page.open(f"{server.url}/?token={TOKEN}")  # the token becomes a cookie
        wait(page, "document.getElementById('start') !== null", "the start form")
        page.evaluate(
            f"document.getElementById('prompt').value = {json.dumps('Pay ' + payee)};"
            "document.getElementById('agent').value = 'Treasurer';"
            "document.getElementById('start').click(); true"
        )
        wait(page, "document.querySelector('.approval button.approve') !== null", "Approve")
        run_id = text_of(page, "#run-id")
        assert page.evaluate("location.hash.slice(1)") == run_id
        assert f'transfer(amount=1, to="{payee}") needs your approval' in text_of(page, ".approval")
        assert text_of(page, "#status") == "awaiting approval"
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(ARTIFACTS / "serve-page-approval.png")

        (gates / payee).touch()  # the approved transfer waits: the run is live across the restart
        page.evaluate("document.querySelector('.approval button.approve').click(); true")
        wait(page, "!!document.querySelector('#events li.type-approval_decision')", "the decision")
        assert page.evaluate("document.querySelector('.approval') === null")

        server.kill()
        wait(page, "document.getElementById('conn').textContent !== 'live'", "the lost stream")
        server.start()
        wait(page, "document.getElementById('conn').textContent === 'live'", "reconnection")
        (gates / payee).unlink()
        wait(page, "!!document.querySelector('#events li.type-run_end')", "the run's end")

        shown = rows(page)
        recorded = http.get(f"/runs/{run_id}").json()
        assert [t for _, t in shown] == APPROVED_TYPES == [e["type"] for e in recorded["events"]]
        assert [p for p, _ in shown] == list(range(1, len(APPROVED_TYPES) + 1))
        assert page.evaluate("run.duplicates") == 0  # nothing was sent twice, either
        assert text_of(page, "#answer") == f"Answer based on tool: Sent 1 to {payee}."
        assert text_of(page, "#status") == "completed"
        assert text_of(page, "#conn") == "done"
        page.screenshot(ARTIFACTS / "serve-page.png")

        # a reload rebuilds the run from its first event, once each
        page.evaluate("window.beforeReload = true; location.reload(); true")
        wait(
            page,
            "!window.beforeReload && !!document.querySelector('#events li.type-run_end')",
            "the reloaded run",
        )
        assert [p for p, _ in rows(page)] == list(range(1, len(APPROVED_TYPES) + 1))
        assert text_of(page, "#answer") == f"Answer based on tool: Sent 1 to {payee}."
