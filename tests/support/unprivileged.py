"""Run Python code as a process that file permissions apply to (root ignores them: it runs as ``nobody``).

``nobody`` may not be able to read the checkout or its virtualenv (a clone in a ``mktemp -d`` folder is mode 0700),
so the child runs the base interpreter on a copy, in a folder anyone may read, of what it imports: this package and
the third-party modules it needs (found by importing them in a probe process), with the installed distributions'
metadata (a module may read its own version at import). Made once per test process.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534

_PROBE = """
import json, pathlib, sys, sysconfig
import agents_loopguard, agents_loopguard.store, agents_loopguard.store.sql
roots = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
found = set()
for module in list(sys.modules.values()):
    path = getattr(module, "__file__", None) or ""
    for root in roots:
        if path.startswith(root + "/"):
            found.add(root + "/" + path[len(root) + 1 :].split("/")[0])
for root in roots:  # the installed distributions' metadata: some modules read their own version at import
    found.update(str(p) for p in pathlib.Path(root).glob("*.dist-info"))
print(json.dumps(sorted(found)))
"""


def shared_folder() -> Path:
    """A fresh folder that an unprivileged process can enter (pytest's tmp_path is private to its owner)."""
    folder = Path(tempfile.mkdtemp(prefix="lg-perm-", dir="/tmp"))
    folder.chmod(0o755)
    return folder


@functools.lru_cache(maxsize=1)
def _runtime() -> Path:
    """A folder anyone may read holding copies of this package and of the third-party modules it imports."""
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    folder = shared_folder()
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    ignore = shutil.ignore_patterns("__pycache__")
    for source in [Path(p) for p in json.loads(probe.stdout)] + [ROOT / "agents_loopguard"]:
        if source.is_dir():
            shutil.copytree(source, folder / source.name, ignore=ignore)
        else:
            shutil.copy2(source, folder / source.name)
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


def _interpreter() -> str:
    """The base interpreter (a virtualenv's ``python`` may sit in a folder ``nobody`` cannot enter)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def run_unprivileged(code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new Python process without root's powers over files; its output is captured."""
    if os.geteuid() != 0:  # file permissions already apply to this process
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        return subprocess.run(
            [sys.executable, "-c", code], cwd="/tmp", env=env, capture_output=True, text=True, timeout=timeout
        )
    command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", _interpreter(), "-s", "-c", code]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(_runtime()),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return subprocess.run(command, cwd="/tmp", env=env, capture_output=True, text=True, timeout=timeout)
