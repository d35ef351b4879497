"""The suite's forked workers (tests/support/forked.py) behave as ``python`` started anew would, where our tests
look: argv, environment, working directory, import path, streams, exit status, a real SIGKILL, the test process as
their parent; and the zygote does not outlive its test process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import forked

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, os, sys
print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0], "x": os.environ.get("LG_X"),
                  "name": __name__, "pythonpath": [p for p in sys.path if p == os.environ.get("LG_PATH")],
                  "ppid": os.getppid(), "pid": os.getpid(), "stdin": sys.stdin.read()}))
"""


def _both(args: list[str], tmp_path: Path) -> tuple[dict[str, object], dict[str, object]]:
    """The probe's report from a new interpreter and from a forked worker, run alike."""
    env = {**os.environ, "LG_X": "seen", "PYTHONPATH": str(tmp_path), "LG_PATH": str(tmp_path)}
    runs = []
    for start in (subprocess.run, forked.run):
        done = start(args, input="fed", capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout))
    return runs[0], runs[1]


@pytest.mark.parametrize("kind", ["code", "script", "module"])
def test_a_forked_worker_starts_as_python_would(kind: str, tmp_path: Path) -> None:
    (tmp_path / "probe.py").write_text(PROBE, encoding="utf-8")
    args = {
        "code": [sys.executable, "-c", PROBE, "a", "b"],
        "script": [sys.executable, str(tmp_path / "probe.py"), "a", "b"],
        "module": [sys.executable, "-m", "probe", "a", "b"],
    }[kind]
    fresh, fork = _both(args, tmp_path)
    assert fork["pid"] != os.getpid() and fork["ppid"] == os.getpid()  # its own process, this one's child
    for report in (fresh, fork):
        report.pop("pid"), report.pop("ppid")
    assert fork == fresh


def test_a_large_environment_arrives_whole() -> None:
    env = {**os.environ, "LG_BIG": "x" * 300_000}
    code = "import os; print(len(os.environ['LG_BIG']))"
    assert forked.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout == "300000\n"


def test_exit_statuses_and_a_real_sigkill() -> None:
    assert forked.run([sys.executable, "-c", "raise SystemExit(3)"]).returncode == 3
    assert forked.run([sys.executable, "-c", "import sys; sys.exit('why')"], capture_output=True).returncode == 1
    failed = forked.run([sys.executable, "-c", "1/0"], capture_output=True, text=True)
    assert failed.returncode == 1 and "ZeroDivisionError" in failed.stderr
    killed_itself = forked.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert killed_itself.returncode == -signal.SIGKILL
    sleeper = forked.ForkedPopen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert sleeper.stdout is not None and sleeper.stdout.readline() == "up\n"
    sleeper.kill()
    assert sleeper.wait(timeout=10) == -signal.SIGKILL


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_output_before_a_sigkill_is_kept_as_pythonunbuffered_says(unbuffered: str) -> None:
    code = "import os, signal; print('said'); os.kill(os.getpid(), signal.SIGKILL)"
    env = {**os.environ, "PYTHONUNBUFFERED": unbuffered}
    said = [
        start([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60).stdout
        for start in (subprocess.run, forked.run)
    ]
    assert said == ["said\n" if unbuffered else ""] * 2


def test_an_atexit_handler_and_a_non_daemon_thread_end_as_they_would() -> None:
    code = (
        "import atexit, threading, time\n"
        "atexit.register(lambda: print('atexit', flush=True))\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('thread', flush=True))).start()\n"
    )
    done = forked.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "thread\natexit\n")


def test_another_interpreter_an_option_or_a_startup_variable_is_refused() -> None:
    with pytest.raises(ValueError, match="interpreter option"):
        forked.ForkedPopen([sys.executable, "-X", "dev", "-c", "pass"])
    with pytest.raises(ValueError, match="runs"):
        forked.ForkedPopen(["/bin/true"])
    with pytest.raises(ValueError, match="PYTHONWARNINGS"):  # read as python starts: a fork cannot give it
        forked.ForkedPopen([sys.executable, "-c", "pass"], env={**os.environ, "PYTHONWARNINGS": "error"})


def test_the_zygote_does_not_outlive_its_test_process(tmp_path: Path) -> None:
    code = (
        "import sys; from tests.support import forked\n"
        "forked.run([sys.executable, '-c', 'pass'])\n"
        "print(forked._started[0].process.pid, flush=True)\n"
        "import time; time.sleep(60)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    owner = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    zygote = int(owner.stdout.readline())
    owner.kill()  # no atexit: the zygote has to notice by itself
    owner.wait()
    give_up = time.monotonic() + 30
    while _running(zygote) and time.monotonic() < give_up:
        time.sleep(0.1)
    assert not _running(zygote), "the zygote outlived the process that started it"


def _running(pid: int) -> bool:
    """``pid`` is alive (an exited process this one has not waited for is a zombie: not running)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
