"""A fork server for the Python processes the tests start, so each need not import anew.

The suite starts ~300 Python processes on two cores, and each spent ~1.3 s of
CPU importing temporalio, openai, pydantic and httpx before doing anything: a
fifth of the suite's CPU. A fork server (one per test process and start-up
environment) imports those once, then forks a child per start, which takes
the start's argv, environment, working directory and standard streams (passed
over a Unix socket) and runs the script, `-m` module or `-c` code as
`python` would, as `__main__`; the server reaps it and sends its exit status
back. `ForkedPopen` is a `subprocess.Popen` whose child is such a fork: pid,
signals, pipes, `poll`, `wait` and `communicate` work as for any child.

A start is forked only when the fork can give it exactly what an exec would:
the test's own interpreter with no interpreter flags, no `preexec_fn`,
`pass_fds`, user or group changes, no terminal on its streams, the same
start-up environment (what Python and the preloaded libraries read as they
start: `PYTHON*` but PYTHONPATH, locale, `TZ`, `OPENAI_LOG` ...), and no
`sitecustomize` or preloaded library's name in a PYTHONPATH folder of its
own. Anything else is exec'd as usual, and so is every start while
`AGENTOR_TEST_FORK=0`. Only our own modules are not preloaded: they read
settings from the environment as they are imported.

Run as a script, this module is the server: `python forkserver.py SOCKET`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import inspect
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from typing import Any

#: What the server imports once (every test process imports them).
PRELOAD = ("temporalio.client", "temporalio.worker", "openai", "pydantic", "httpx")
#: Top-level names a PYTHONPATH folder must not hold (else the child would import its own).
_SHADOWED = ("sitecustomize", "usercustomize", "temporalio", "openai", "pydantic", "httpx")
#: Environment read as the interpreter or a preloaded library starts, besides PYTHON* and LC_*.
_READ_AT_START = frozenset(
    {
        "LANG",
        "LANGUAGE",
        "TZ",
        "OPENAI_LOG",
        "OPENAI_API_TYPE",
        "OPENAI_API_VERSION",
        "AZURE_OPENAI_ENDPOINT",
    }
)
_HEADER = 16


def _startup_key(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(
        sorted(
            (name, value)
            for name, value in env.items()
            if name != "PYTHONPATH"
            and (name.startswith(("PYTHON", "LC_")) or name in _READ_AT_START)
        )
    )


# -- the test process's side ---------------------------------------------------------


class _Server:
    """One fork server process, for one start-up environment."""

    def __init__(self, env: dict[str, str]) -> None:
        self.folder = tempfile.mkdtemp(prefix="forkserver-")
        self.address = os.path.join(self.folder, "socket")
        server_env = {name: value for name, value in env.items() if name != "PYTHONPATH"}
        self.log = open(os.path.join(self.folder, "log"), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), self.address],
            env=server_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.log,
        )
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline()  # after its imports
        if not ready.startswith(b"ready "):
            raise RuntimeError(f"the fork server did not start (see {self.folder}/log)")
        self.base_path: list[str] = json.loads(ready[len(b"ready ") :])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        with contextlib.suppress(Exception):
            self.proc.wait(10)
        self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)


_servers: dict[tuple[tuple[str, str], ...], _Server] = {}
_servers_lock = threading.Lock()


def _server(env: dict[str, str]) -> _Server:
    key = _startup_key(env)
    with _servers_lock:
        server = _servers.get(key)
        if server is None or not server.alive():
            server = _servers[key] = _Server(env)
        return server


def close_all() -> None:
    """Stop every fork server of this process (its children go on as they are)."""
    with _servers_lock:
        for server in _servers.values():
            server.close()
        _servers.clear()


def _target(args: Any) -> tuple[str, str, list[str]] | None:
    """(kind, what, rest) for `python SCRIPT ...`, `-m MODULE ...` or `-c CODE ...`, else None."""
    if not isinstance(args, (list, tuple)) or len(args) < 2:
        return None
    args = [os.fspath(a) for a in args]
    if not all(isinstance(a, str) for a in args) or args[0] != sys.executable:
        return None
    first = args[1]
    if first in ("-m", "-c"):
        if len(args) < 3:
            return None
        return ("module" if first == "-m" else "code", args[2], args[3:])
    if first.startswith("-"):
        return None
    return ("script", first, args[2:])


def _pythonpath_ok(env: dict[str, str]) -> bool:
    given = env.get("PYTHONPATH", "")
    for folder in given.split(os.pathsep) if given else []:
        if not folder:
            return False  # an empty entry means the working directory: left to exec
        with contextlib.suppress(OSError):
            names = os.listdir(folder)
            for name in names:
                if name.split(".")[0] in _SHADOWED:
                    return False
    return True


def _fd_for(child_end: int, default: int) -> int:
    return child_end if child_end != -1 else default


class ForkedPopen(subprocess.Popen):  # type: ignore[type-arg]
    """A `subprocess.Popen` whose child the fork server forks when it can (else exec)."""

    _status: socket.socket | None = None
    _pending = b""

    def _execute_child(self, *given: Any) -> None:  # type: ignore[override]
        names = list(inspect.signature(subprocess.Popen._execute_child).parameters)[1:]
        call = dict(zip(names, given, strict=True))
        target = _target(call["args"])
        env = dict(os.environ if call["env"] is None else call["env"])
        cwd = os.fspath(call["cwd"]) if call["cwd"] is not None else os.getcwd()
        ends = (
            _fd_for(call["p2cread"], 0),
            _fd_for(call["c2pwrite"], 1),
            _fd_for(call["errwrite"], 2),
        )
        plain = (
            target is not None
            and os.environ.get("AGENTOR_TEST_FORK", "1") != "0"
            and call["executable"] is None
            and call["preexec_fn"] is None
            and call["close_fds"]
            and not call["pass_fds"]
            and not call["shell"]
            and call["restore_signals"]
            and all(call[name] is None for name in ("gid", "gids", "uid"))
            and call["umask"] == call["process_group"] == -1
            and os.path.isdir(cwd)
            and (target[0] != "script" or os.path.isfile(os.path.join(cwd, target[1])))
            and not any(_tty(fd) for fd in ends)
            and _pythonpath_ok(env)
        )
        if not plain:
            super()._execute_child(*given)  # type: ignore[misc]
            return
        assert target is not None
        kind, what, rest = target
        request = {
            "kind": kind,
            "what": what,
            "rest": rest,
            "env": env,
            "cwd": cwd,
            "session": bool(call["start_new_session"]),
        }
        pid, status = _forked(_server(env), request, ends)
        if pid is None:  # the server could not fork it: exec'd as usual
            super()._execute_child(*given)  # type: ignore[misc]
            return
        self._close_child_ends(call)
        self.pid = pid
        self._child_created = True
        self._status = status

    def _close_child_ends(self, call: dict[str, Any]) -> None:
        """What `_execute_child` closes in the parent once the child has its ends."""
        devnull = getattr(self, "_devnull", None)
        for child, ours in (
            (call["p2cread"], call["p2cwrite"]),
            (call["c2pwrite"], call["c2pread"]),
            (call["errwrite"], call["errread"]),
        ):
            if child != -1 and ours != -1 and child != devnull:
                os.close(child)
        if devnull is not None:
            os.close(devnull)
            del self._devnull
        self._closed_child_pipe_fds = True

    def _read_status(self, timeout: float | None) -> None:
        """Take the exit status if the server sent it within `timeout` (None: wait)."""
        if self._status is None or self.returncode is not None:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._status], [], [], left)
            if not ready:
                return
            chunk = self._status.recv(64)
            if not chunk:  # the server is gone: the child's status went with it
                self._status.close()
                self._status = None
                self.returncode = _gone_status(self.pid)
                return
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        self.returncode = int(line.split()[1])
        self._status.close()
        self._status = None

    def _internal_poll(self, _deadstate: Any = None, **_: Any) -> int | None:  # type: ignore[override]
        if self._status is None:
            return super()._internal_poll(_deadstate=_deadstate)  # type: ignore[misc, no-any-return]
        if not self._waitpid_lock.acquire(False):
            return None
        try:
            self._read_status(0.0)
        finally:
            self._waitpid_lock.release()
        return self.returncode

    def _wait(self, timeout: float | None) -> int:  # type: ignore[override]
        if self._status is None and self.returncode is None:
            return super()._wait(timeout)  # type: ignore[misc, no-any-return]
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]
            with self._waitpid_lock:
                self._read_status(0.05 if left is None else min(left, 0.05))
        return self.returncode


def _forked(
    server: _Server, request: dict[str, Any], ends: tuple[int, int, int]
) -> tuple[int | None, socket.socket | None]:
    """The forked child's pid and the socket its exit status comes on (None: not forked)."""
    status = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        status.connect(server.address)
        body = json.dumps({**request, "base_path": server.base_path}).encode()
        socket.send_fds(status, [str(len(body)).encode().ljust(_HEADER)], list(ends))
        status.sendall(body)
        reply = _line(status, 30.0)
    except OSError:
        reply = b""
    if not reply.startswith(b"pid "):
        status.close()
        return None, None
    return int(reply.split()[1]), status


def run(
    args: Any,
    *,
    input: Any = None,
    capture_output: bool = False,
    timeout: float | None = None,
    check: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run`, its process forked by the fork server when it can."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with ForkedPopen(args, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
        except BaseException:
            process.kill()
            raise
        code = process.poll()
        assert code is not None
    if check and code:
        raise subprocess.CalledProcessError(code, args, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(args, code, stdout, stderr)


def _tty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def _gone_status(pid: int) -> int:
    """A status for a child whose server died: wait for it to end, then say it was killed."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.05)
    return -9


def _line(sock: socket.socket, timeout: float) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(64)
        if not chunk:
            break
        data += chunk
    sock.settimeout(None)
    return data


# -- the server's side ----------------------------------------------------------------


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    header, fds, _, _ = socket.recv_fds(conn, _HEADER, 3)
    try:
        while len(header) < _HEADER:
            more = conn.recv(_HEADER - len(header))
            if not more:
                raise EOFError
            header += more
        size = int(header.strip())
        body = b""
        while len(body) < size:
            more = conn.recv(size - len(body))
            if not more:
                raise EOFError
            body += more
        if len(fds) != 3:
            raise ValueError(f"{len(fds)} streams, not 3")
        return json.loads(body), list(fds)
    except Exception:  # a start the client gave up on: nothing to fork
        for fd in fds:
            os.close(fd)
        return None


def _serve(address: str) -> tuple[dict[str, Any], list[int]]:
    """Serve starts until the test process ends; returns only in a forked child."""
    for name in PRELOAD:
        importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    sys.stdout.write("ready " + json.dumps(sys.path) + "\n")
    sys.stdout.flush()
    parent = os.getppid()
    children: dict[int, socket.socket] = {}
    while True:
        ready, _, _ = select.select([listener], [], [], 0.02 if children else 0.5)
        if ready:
            conn, _ = listener.accept()
            received = _receive(conn)
            if received is None:
                conn.close()
            elif threading.active_count() != 1:
                conn.close()  # forking a threaded process is not safe: the client sees EOF
            else:
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    for other in children.values():
                        other.close()
                    conn.close()
                    return received
                for fd in received[1]:
                    os.close(fd)
                with contextlib.suppress(OSError):
                    conn.sendall(f"pid {pid}\n".encode())
                children[pid] = conn
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
                conn.close()
        if os.getppid() != parent:
            sys.exit(0)  # the test process is gone


def _become(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: take the start's streams, environment and folder, run its target."""
    for number, fd in enumerate(fds):
        os.dup2(fd, number)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    if request["session"]:
        os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    own = [
        os.path.abspath(folder)
        for folder in request["env"].get("PYTHONPATH", "").split(os.pathsep)
        if folder
    ]
    kind, what, rest = request["kind"], request["what"], request["rest"]
    first = {
        "script": os.path.dirname(os.path.realpath(what)),
        "module": os.getcwd(),
        "code": "",
    }[kind]
    path: list[str] = []
    for folder in [*own, *request["base_path"][1:]]:
        if folder not in path:
            path.append(folder)
    sys.path[:] = [first, *path]
    importlib.invalidate_caches()
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    if kind == "module":
        import runpy

        sys.argv = ["-m", *rest]
        runpy._run_module_as_main(what, alter_argv=True)  # type: ignore[attr-defined]
        return
    if kind == "code":
        sys.argv = ["-c", *rest]
        code = compile(what, "<string>", "exec")
    else:
        sys.argv = [what, *rest]
        main.__file__ = os.path.abspath(what)
        main.__loader__ = importlib.machinery.SourceFileLoader("__main__", main.__file__)
        with open(what, "rb") as source:
            code = compile(source.read(), main.__file__, "exec")
    main.__dict__["__builtins__"] = __builtins__
    exec(code, main.__dict__)


if __name__ == "__main__":
    _request, _fds = _serve(sys.argv[1])
    # the server's own module stays alive (its functions' globals) once the child's is __main__
    sys.modules["_forkserver"] = sys.modules["__main__"]
    _become(_request, _fds)
