"""Running the app under uvicorn on the facade's runtime loop.

uvicorn's own `run()` makes a loop of its own; here `Server.serve()` runs on
the `Runtime` loop instead, where the Temporal clients and embedded workers
the routes use already live (no hop between loops per event streamed).
Signals reach only the main thread, so the main thread waits for the server
and turns SIGINT / SIGTERM / SIGHUP into uvicorn's graceful exit; with embedded
workers, it then drains them, and a second signal abandons their calls (as in a
script: `_sigterm`). The socket is bound first, so "address in use" is a clear
error before anything starts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import socket
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn

from agentor_temporal._ending import end_by
from agentor_temporal._runtime import Runtime
from agentor_temporal._sigterm import note_line
from agentor_temporal.serve._stopping import stop_streams, stopping

#: Seconds open streams get to end on shutdown before they are cut (clients reconnect).
GRACEFUL_SHUTDOWN = 3


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port.

    Raises:
        OSError: naming the address, e.g. when it is in use.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from None


class StopSignals:
    """The server's handler of SIGINT, SIGTERM and SIGHUP.

    The first stops the server (`halt`) and, while the embedded workers run calls
    (`serving`), says they finish; the same one again abandons them (the next worker runs
    them again) and ends the process by it, as in a script. Before, the drain was left to
    the process's end, silent: a second signal was only noted there, and a third abandoned
    the calls. Another one meanwhile (SIGTERM after Ctrl+C: a supervisor escalating) is
    noted too, as the line said only the same one abandons them; it cut the calls off.

    Each signal is recorded before its line is written: one coming while the line is
    written runs the handler again, nested, and must find the first noted. A client
    escalating on reading the line (a second SIGTERM) was taken for a first, noted again,
    and never obeyed: the process waited out the calls.
    """

    def __init__(
        self, serving: Callable[[], bool], halt: Callable[[int, FrameType | None], None]
    ) -> None:
        self._serving = serving
        self._halt = halt
        #: the signals that stopped the server
        self.stopped_by: list[signal.Signals] = []
        #: those said (the first, if the embedded workers ran then, and any other after it)
        self.noted: list[signal.Signals] = []

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        received = signal.Signals(signum)
        if received in self.noted:
            end_by(received)
            return  # only off the main thread, where the handler could not be reset
        noting = bool(self.noted or not self.stopped_by) and self._serving()
        self.stopped_by.append(received)
        if noting:
            self.noted.append(received)
            note_line(received, ", then stopping")
        self._halt(signum, frame)


def run(app: Any, host: str, port: int, **options: Any) -> None:
    """Serve `app` on host:port until SIGINT/SIGTERM/SIGHUP; returns after a graceful stop."""
    sock = listen(host, port)
    config = uvicorn.Config(
        app, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN, lifespan="on", **options
    )
    server = uvicorn.Server(config)
    shown = host if ":" not in host else f"[{host}]"
    print(
        f"Serving at http://{shown}:{sock.getsockname()[1]} (page /, agent card "
        "/.well-known/agent-card.json)",
        flush=True,
    )

    async def main() -> None:
        stopping().clear()  # a server served before in this process stopped
        try:
            await server.serve(sockets=[sock])
        except SystemExit as exc:  # uvicorn exits on a failed startup; not the loop's to end
            raise RuntimeError("the server failed to start (see the log above)") from exc

    runtime = Runtime.get()

    def halt(signum: int, frame: FrameType | None) -> None:
        # open streams end themselves now, telling their clients, not cut off at the
        # graceful timeout (a body cut mid-transfer, a traceback each in the log)
        stop_streams(runtime.loop)
        server.handle_exit(signum, frame)

    stop = StopSignals(runtime.serving, halt)
    future = asyncio.run_coroutine_threadsafe(main(), runtime.loop)
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        # SIGHUP too (the terminal the server runs in closed): killed at once by
        # it, the embedded worker's call in flight was cut off and ran again on
        # the next worker. A signal the caller ignores (`nohup`) stays ignored.
        previous = {
            sig: signal.signal(sig, stop)
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
            if signal.getsignal(sig) is not signal.SIG_IGN
        }
    try:
        while True:
            try:
                future.result(timeout=0.5)
                break
            except concurrent.futures.TimeoutError:
                continue
        if stop.stopped_by:
            # the calls finish here, where a second signal abandons them (not at the
            # process's exit, under handlers that note it first)
            runtime.stop_workers()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
    if not server.started:
        raise RuntimeError("the server stopped before it started (see the log above)")
