"""``loopguard ARGS`` run by ``cli.main`` in the test's own process: the same ``main`` the console script and
``python -m agents_loopguard`` call, with its exit code and its standard streams (isolated by typer's ``CliRunner``),
without a new interpreter importing the package again for each command (about a second of CPU each). Tests run the
command as a real process where the process is the point: the installed script, a kill, the shell's bytes, another
working directory."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence

from typer.testing import CliRunner

from agents_loopguard import cli

__all__ = ["in_process"]


def in_process(args: Sequence[str], env: Mapping[str, str | None] | None = None) -> subprocess.CompletedProcess[str]:
    """``loopguard ARGS`` as a finished process would report it: exit code, stdout, stderr. ``env``: variables set
    for the command (``None`` unsets one), as a subprocess's environment would.

    >>> in_process(["--version"]).stdout.startswith("loopguard ")
    True
    """
    with CliRunner().isolation(env=dict(env) if env else None) as (out, err, _):
        try:
            cli.main(list(args))
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else 1
        else:
            code = 0
        sys.stdout.flush()
        sys.stderr.flush()
        stdout, stderr = out.getvalue().decode(), err.getvalue().decode()
    return subprocess.CompletedProcess(["loopguard", *args], code, stdout, stderr)
