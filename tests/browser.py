"""A real headless Chromium for the UI tests: one-shot dumps, and a driven page.

`dump_dom` and `screenshot` are Chromium's own command-line modes with a
virtual-time budget, which suit a finished run: its page settles, and the
budget runs out once nothing is pending. The page of a *running* workflow
keeps a long poll open, so virtual time never runs out and those modes hang
(seen with Chromium 150 and UI 2.54); `Page` instead drives Chromium over the
DevTools protocol on a pipe (`--remote-debugging-pipe`: no websocket library
needed) and waits for what a test expects with a deadline.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]
WINDOW = (1400, 1000)


def find_chromium() -> str | None:
    """Path of a Chromium (Debian's `chromium` package), or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _chromium() -> str:
    found = find_chromium()
    if found is None:
        raise AssertionError("chromium is not installed")
    return found


def dump_dom(url: str, profile: Path, *, budget_ms: int = 15000, timeout: float = 90) -> str:
    """The DOM of `url` after its scripts ran (`chromium --dump-dom`)."""
    out = subprocess.run(
        [
            _chromium(),
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--virtual-time-budget={budget_ms}",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if out.returncode != 0 or not out.stdout:
        raise AssertionError(f"chromium --dump-dom failed ({out.returncode}): {out.stderr[-2000:]}")
    return out.stdout


def screenshot(
    url: str, path: Path, profile: Path, *, budget_ms: int = 15000, timeout: float = 90
) -> None:
    """A PNG of `url` (`chromium --screenshot`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(
        [
            _chromium(),
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--virtual-time-budget={budget_ms}",
            f"--window-size={WINDOW[0]},{WINDOW[1]}",
            "--hide-scrollbars",
            f"--screenshot={path}",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if out.returncode != 0 or not path.exists():
        raise AssertionError(
            f"chromium --screenshot failed ({out.returncode}): {out.stderr[-2000:]}"
        )


# Chromium reads DevTools commands on fd 3 and writes answers on fd 4. A tiny
# Python trampoline puts the pipe ends there (no preexec_fn, which is unsafe in
# a test process full of threads) and execs Chromium.
_TRAMPOLINE = (
    "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); "
    "os.execv(sys.argv[3], sys.argv[3:])"
)


#: What DevTools answers an evaluation that races the page being replaced.
NAVIGATING = (
    "Inspected target navigated or closed",
    "Execution context was destroyed",
    "Cannot find context with specified id",
)


class Page:
    """One Chromium tab driven over the DevTools protocol (use as a context manager)."""

    def __init__(self, profile: Path) -> None:
        commands_r, commands_w = os.pipe()
        answers_r, answers_w = os.pipe()
        # above 4, so putting one end on 3 or 4 cannot overwrite the other
        child_r = fcntl.fcntl(commands_r, fcntl.F_DUPFD, 10)
        child_w = fcntl.fcntl(answers_w, fcntl.F_DUPFD, 10)
        for fd in (commands_r, answers_w):
            os.close(fd)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _TRAMPOLINE,
                str(child_r),
                str(child_w),
                _chromium(),
                *FLAGS,
                f"--user-data-dir={profile}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            pass_fds=(child_r, child_w),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(child_r)
        os.close(child_w)
        self._write, self._read = commands_w, answers_r
        self._buffer = b""
        self._ids = 0
        target = self.call("Target.createTarget", {"url": "about:blank"})
        attached = self.call(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
        )
        self._session = attached["sessionId"]
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": WINDOW[0], "height": WINDOW[1], "deviceScaleFactor": 1, "mobile": False},
            session=True,
        )

    def __enter__(self) -> Page:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def call(
        self, method: str, params: dict[str, Any] | None = None, *, session: bool = False
    ) -> dict[str, Any]:
        """Send one DevTools command and return its result."""
        self._ids += 1
        message: dict[str, Any] = {"id": self._ids, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + 30
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                answer = json.loads(raw)
                if answer.get("id") == self._ids:
                    if "error" in answer:
                        raise AssertionError(f"{method} failed: {answer['error']}")
                    return dict(answer["result"])
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"chromium did not answer {method} within 30s")
            ready, _, _ = select.select([self._read], [], [], left)
            if ready:
                chunk = os.read(self._read, 1 << 20)
                if not chunk:
                    raise AssertionError("chromium closed its DevTools pipe")
                self._buffer += chunk

    def open(self, url: str) -> None:
        """Navigate the tab to `url`."""
        self.call("Page.navigate", {"url": url}, session=True)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = self.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=True
        )
        return result.get("result", {}).get("value")

    def settled(self, expression: str) -> Any:
        """`evaluate`, or None while the page is being replaced (a reload, a redirect).

        For loops that ask again: DevTools refuses an evaluation that races a
        navigation, and the answer is only "not yet".
        """
        try:
            return self.evaluate(expression)
        except AssertionError as exc:
            if any(words in str(exc) for words in NAVIGATING):
                return None
            raise

    def html(self) -> str:
        """The current DOM, serialized (empty while the page is being replaced)."""
        value = self.settled("document.documentElement ? document.documentElement.outerHTML : ''")
        return str(value or "")

    # a page renders in 2-5 s on a quiet machine; past 30 s once at load ~20
    def wait_for(self, predicate: Callable[[str], bool], what: str, timeout: float = 60) -> str:
        """The DOM once `predicate(dom)` holds; fails naming `what` after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            html = self.html()
            if predicate(html):
                return html
            if time.monotonic() > deadline:
                raise AssertionError(f"the page never showed {what} within {timeout}s")
            time.sleep(0.1)

    def wait_for_text(self, *needles: str, timeout: float = 60) -> str:
        """The DOM once it contains every needle."""
        return self.wait_for(
            lambda html: all(n in html for n in needles), f"all of {list(needles)}", timeout
        )

    def screenshot(self, path: Path) -> None:
        """Save a PNG of the tab."""
        path.parent.mkdir(parents=True, exist_ok=True)
        shot = self.call("Page.captureScreenshot", {"format": "png"}, session=True)
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        """Close Chromium (killed if it does not go within 10 s)."""
        try:
            self.call("Browser.close")
        except (AssertionError, OSError):
            pass
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        for fd in (self._write, self._read):
            try:
                os.close(fd)
            except OSError:
                pass
