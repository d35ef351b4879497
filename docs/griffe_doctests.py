"""Griffe extension for the API reference, so docstrings written for the terminal read well as Markdown:

- doctests (``>>>`` lines and their expected output) become Python console code blocks (Markdown would otherwise
  read ``>>>`` as nested quotes and ``x["a"]`` as a link);
- Sphinx roles (``:func:`~agents_loopguard.sdk.run_guarded` ``) become inline code (``run_guarded``).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:func|class|meth|mod|attr|exc|data|obj):`(~?)([^`]+)`")


def _shown(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    if "<" in target:  # :meth:`Store.activate <agents_loopguard.store.base.Store.activate>`
        return f"`{target.split('<', 1)[0].strip()}`"
    return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"


def plain_roles(text: str) -> str:
    """``:role:`~a.b.c` `` -> ``c``, ``:role:`a.b.c` `` -> ``a.b.c``, ``:role:`title <a.b>` `` -> ``title``."""
    return _ROLE.sub(_shown, text)


def fence_doctests(text: str) -> str:
    """Wrap each run of doctest lines (from a ``>>>`` line to the next blank line) in a ``pycon`` fence."""
    out: list[str] = []
    indent: str | None = None
    for line in text.splitlines():
        stripped = line.lstrip()
        if indent is None and stripped.startswith(">>>"):
            indent = line[: len(line) - len(stripped)]
            out.append(f"{indent}```pycon")
        elif indent is not None and not stripped:
            out.append(f"{indent}```")
            indent = None
        out.append(line)
    if indent is not None:
        out.append(f"{indent}```")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    """Fence the doctests and plain the roles of every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain_roles(fence_doctests(obj.docstring.value))
