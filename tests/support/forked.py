"""Python worker processes forked from a preloaded parent: real OS processes that skip the imports.

A worker of ours (a DBOS executor, a Restate handler, a helper racing on a store) spends about 2 s of CPU importing
the Agents SDK, DBOS, openai and SQLAlchemy before its first line runs, and the suite starts hundreds of them on
two cores. ``ForkedPopen`` is ``subprocess.Popen`` for ``python -m module``, ``python script.py`` and
``python -c code``: the child is forked from a *zygote*, a process of this test process that imported those
libraries once (and nothing of ours, and started no thread), instead of a new interpreter importing them again.

What the test gets is still a real OS process of its own: its own pid, memory, descriptors and connections, its
own ``__main__`` run from the start with the given argv, environment and working directory, killed by a real
SIGKILL, its exit status waited for by the test like any child's (the test process becomes a *child subreaper*,
and the zygote double-forks, so the worker is reparented to the test process before its pid is handed over).
What a fork cannot give, it does not pretend to: interpreter options (``-X``, ``-W``), the variables ``python`` reads
as it starts (``STARTUP``), a shell, a new session or other ids get a ``ValueError``; environment variables that a
preloaded library read as it was imported are the zygote's.

>>> import subprocess, sys
>>> p = ForkedPopen([sys.executable, "-c", "import sys; print(sys.argv[1:])", "a"], stdout=subprocess.PIPE, text=True)
>>> p.communicate(timeout=60)[0]
"['a']\\n"
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import importlib
import io
import json
import os
import runpy
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

PRELOAD = (
    "agents",
    "openai",
    "httpx",
    "pydantic",
    "sqlalchemy",
    "sqlmodel",
    "psycopg",
    "dbos",
    "restate",
    "hypercorn.asyncio",
    "mcp",
    "agents.testing",
    "google.adk.runners",
    "google.genai",
    "langchain.agents",
    "langchain_openai",
    "temporalio.client",
    "temporalio.worker",
    "temporalio.contrib.openai_agents",
)
"""What the zygote imports once, those installed (Temporal's integration is in the oldest-SDK venv only): the
libraries our workers import and that cost the CPU. Nothing of ``agents_loopguard`` or ``tests``: each worker
imports ours itself."""

STARTUP = (
    "PYTHONDEVMODE",
    "PYTHONFAULTHANDLER",
    "PYTHONHASHSEED",
    "PYTHONHOME",
    "PYTHONIOENCODING",
    "PYTHONNOUSERSITE",
    "PYTHONOPTIMIZE",
    "PYTHONSAFEPATH",
    "PYTHONTRACEMALLOC",
    "PYTHONUTF8",
    "PYTHONWARNINGS",
)
"""Environment variables that ``python`` reads as it starts: a forked worker has the zygote's (a request that sets
another value is refused). ``PYTHONUNBUFFERED`` and ``PYTHONDONTWRITEBYTECODE`` are the worker's own."""

PR_SET_CHILD_SUBREAPER = 36


class ForkedPopen(subprocess.Popen):  # type: ignore[type-arg]
    """``subprocess.Popen`` whose Python child is forked from the zygote (see the module's docstring)."""

    def _execute_child(  # type: ignore[override]
        self,
        args: Any,
        executable: Any,
        preexec_fn: Any,
        close_fds: Any,
        pass_fds: Any,
        cwd: Any,
        env: Any,
        startupinfo: Any,
        creationflags: Any,
        shell: Any,
        p2cread: int,
        p2cwrite: int,
        c2pread: int,
        c2pwrite: int,
        errread: int,
        errwrite: int,
        restore_signals: Any,
        gid: Any,
        gids: Any,
        uid: Any,
        umask: Any,
        start_new_session: Any,
        *process_group: Any,
    ) -> None:
        plain = not (shell or preexec_fn or pass_fds or start_new_session or gid or gids or uid) and umask == -1
        if not plain or process_group not in ((), (None,), (-1,)):
            raise ValueError("ForkedPopen runs a plain Python command: no shell, preexec_fn, pass_fds, session, ids")
        request = {
            "run": _what_to_run([os.fspath(a) for a in args]),
            "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
            "env": dict(env) if env is not None else dict(os.environ),
        }
        zygote = _zygote()
        if changed := [name for name in STARTUP if request["env"].get(name) != zygote.env.get(name)]:
            raise ValueError(f"ForkedPopen cannot give {changed}: read when python starts; use subprocess.Popen")
        fds = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1, errwrite if errwrite != -1 else 2]
        try:
            self.pid = zygote.spawn(request, fds)
            self._child_created = True
        finally:
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)  # type: ignore[attr-defined]


def run(
    args: list[str], *, input: Any = None, timeout: float | None = None, check: bool = False, **popen: Any
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` with a forked child (``capture_output=``, ``text=``, ``env=``, ``cwd=`` as there).

    >>> run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True).stdout
    '42\\n'
    """
    if popen.pop("capture_output", False):
        popen["stdout"] = popen["stderr"] = subprocess.PIPE
    if input is not None:
        popen["stdin"] = subprocess.PIPE
    with ForkedPopen(args, **popen) as process:
        try:
            out, err = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    done = subprocess.CompletedProcess(args, process.returncode, out, err)
    if check:
        done.check_returncode()
    return done


def _what_to_run(args: list[str]) -> list[str]:
    """``[kind, target, *argv]`` for ``python -m mod ...``, ``python -c code ...`` or ``python script ...``.

    >>> _what_to_run([sys.executable, "-m", "tests.workers.store_worker", "x"])
    ['module', 'tests.workers.store_worker', 'x']
    """
    if len(args) < 2 or args[0] != sys.executable:
        raise ValueError(f"ForkedPopen runs {sys.executable} only, not {args[:1]}")
    if args[1] in ("-m", "-c"):
        if len(args) < 3:
            raise ValueError(f"{args[1]} needs its argument")
        return ["module" if args[1] == "-m" else "code", *args[2:]]
    if args[1].startswith("-"):
        raise ValueError(f"ForkedPopen cannot give the interpreter option {args[1]!r}: use subprocess.Popen")
    return ["script", *args[1:]]


class _Zygote:
    """The preloaded parent of this test process's forked workers, started on first use."""

    def __init__(self) -> None:
        _become_subreaper()
        self.folder = tempfile.mkdtemp(prefix="lg-zygote-")
        self.address = os.path.join(self.folder, "socket")
        self.env = dict(os.environ)
        env = {**self.env, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.forked", self.address], cwd=ROOT, env=env, stdout=subprocess.PIPE
        )
        atexit.register(self.close)
        assert self.process.stdout is not None
        ready = self.process.stdout.readline()
        if ready.strip() != b"ready":
            raise RuntimeError(f"the zygote did not start (it exited {self.process.wait()})")
        self.lock = threading.Lock()

    def spawn(self, request: dict[str, Any], fds: list[int]) -> int:
        """Fork a worker; its pid, once it is this process's child."""
        with self.lock, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(self.address)
            socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], fds)
            answer = conn.makefile("rb").read().decode()
        lines = answer.split()
        if len(lines) != 2 or lines[1] != "reparented":
            raise RuntimeError(f"the zygote did not fork the worker: {answer!r}")
        return int(lines[0])

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


_started: list[_Zygote] = []
_start_lock = threading.Lock()


def _zygote() -> _Zygote:
    with _start_lock:
        if not _started or _started[0].process.poll() is not None:
            _started[:] = [_Zygote()]
        return _started[0]


def close() -> None:
    """Stop this process's zygote (the suite's end: conftest.py)."""
    with _start_lock:
        for zygote in _started:
            zygote.close()
        _started.clear()


def _become_subreaper() -> None:
    """Orphans of this process's descendants (the forked workers) become its children, so it can wait for them."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed: ForkedPopen needs Linux")


# --- the zygote's side -----------------------------------------------------------------------------------------


def _preload() -> list[str]:
    """Import ``PRELOAD``; the interpreter's own path entries (without the zygote's first one and PYTHONPATH)."""
    own = {"", str(ROOT), *os.environ.get("PYTHONPATH", "").split(os.pathsep)}
    base = [p for p in sys.path[1:] if p not in own]
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
    threads = os.listdir("/proc/self/task")
    if threading.active_count() != 1 or len(threads) != 1:
        raise RuntimeError(f"a preloaded library started a thread ({threads}): forking it would be unsafe")
    return base


def _serve(address: str) -> None:
    """Accept spawn requests forever; each forks a worker and says its pid once it was reparented."""
    parent = os.getppid()
    base_path = _preload()
    gc.freeze()  # what the zygote imported is never collected: a worker's collections leave its pages shared
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    print("ready", flush=True)
    listener.settimeout(2)
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:  # the test process is gone (even killed): so is its zygote
                return
            continue
        conn.settimeout(None)
        message, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
        while not message.endswith(b"\n"):  # a long request (a large environment) may come in several reads
            more = conn.recv(1 << 16)
            if not more:
                break
            message += more
        middle = os.fork()
        if middle == 0:
            middle_pid = os.getpid()  # the middle process forks the worker and exits at once: the worker is an orphan
            worker = os.fork()
            if worker == 0:
                listener.close()
                while os.getppid() == middle_pid:  # run once reparented: its parent is the test process, as it says
                    time.sleep(0.0005)
                os._exit(_run_worker(json.loads(message), fds, conn, base_path))
            conn.sendall(f"{worker}\n".encode())
            os._exit(0)
        os.waitpid(middle, 0)  # once the middle process is reaped, the worker is the test process's child
        for fd in fds:
            os.close(fd)
        conn.sendall(b"reparented\n")
        conn.close()


def _run_worker(request: dict[str, Any], fds: list[int], conn: socket.socket, base_path: list[str]) -> int:
    """In the forked worker: its ``__main__`` run as ``python`` would, then its exit as ``python``'s would (what
    the ``threading`` and ``atexit`` modules hold run, the streams are flushed), without tearing down every module
    the zygote imported (that would copy the zygote's pages for nothing). The exit status."""
    try:
        _become_worker(request, fds, conn, base_path)
        code = 0
    except SystemExit as end:
        code = _exit_status(end)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # joins the non-daemon threads, as the interpreter does
        atexit._run_exitfuncs()
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = code or 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except ValueError:  # closed by the worker itself, as json.tool does
            pass
        except OSError:  # a reader gone: python says so and exits 120
            code = code or 120
    return code


def _exit_status(end: SystemExit) -> int:
    """What ``python`` exits with for ``SystemExit(end.code)``."""
    if end.code is None or isinstance(end.code, int):
        return end.code or 0
    print(end.code, file=sys.stderr)
    return 1


def _become_worker(request: dict[str, Any], fds: list[int], conn: socket.socket, base_path: list[str]) -> None:
    """In the forked worker: its descriptors, environment, directory, path and argv, then its ``__main__``."""
    conn.close()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    kind, target, *argv = request["run"]
    python_path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    first = {"module": os.getcwd(), "code": "", "script": os.path.dirname(os.path.abspath(target))}[kind]
    sys.path[:] = [first, *python_path, *[p for p in base_path if p not in python_path]]
    # the worker's standard streams, as python opens them (they live as long as the process)
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    sys.stdin = _stream(0, "r", sys.__stdin__)
    sys.stdout = _stream(1, "w", sys.__stdout__, line=os.isatty(1), unbuffered=unbuffered)
    sys.stderr = _stream(2, "w", sys.__stderr__, line=True, unbuffered=unbuffered)
    if kind == "module":
        sys.argv = [target, *argv]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    elif kind == "code":
        sys.argv = ["-c", *argv]
        exec(compile(target, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    else:
        sys.argv = [target, *argv]
        runpy.run_path(target, run_name="__main__")


def _stream(fd: int, mode: str, like: Any, *, line: bool = False, unbuffered: bool = False) -> Any:
    """A text stream on ``fd`` with the encoding and error handler of the interpreter's own ``like``; written
    through at once when ``unbuffered`` (``PYTHONUNBUFFERED``, ``python -u``)."""
    encoding, errors = (like.encoding, like.errors) if like is not None else ("utf-8", "strict")
    raw = io.FileIO(fd, mode, closefd=False)
    binary: Any = raw if unbuffered else (io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw))
    return io.TextIOWrapper(binary, encoding=encoding, errors=errors, line_buffering=line, write_through=unbuffered)


if __name__ == "__main__":
    _serve(sys.argv[1])
