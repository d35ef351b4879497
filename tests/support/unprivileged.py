"""Run Python code as a process that file permissions apply to (root ignores them: it runs as ``nobody``)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534


def shared_folder() -> Path:
    """A fresh folder that an unprivileged process can enter (pytest's tmp_path is private to its owner)."""
    folder = Path(tempfile.mkdtemp(prefix="lg-perm-", dir="/tmp"))
    folder.chmod(0o755)
    return folder


def run_unprivileged(code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new Python process without root's powers over files; its output is captured."""
    command = [sys.executable, "-c", code]
    if os.geteuid() == 0:
        command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *command]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, cwd="/tmp", env=env, capture_output=True, text=True, timeout=timeout)
