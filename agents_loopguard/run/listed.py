"""Tools a server lists at run time (MCP): what the guard makes of each, the same rule for every framework.

An MCP tool is declared by name like any tool (``RunOptions.tools``, :func:`~agents_loopguard.run.declare_tool`).
One that is not declared is judged by its annotations, which are *hints* (MCP spec 2025-11-25): a client must not
trust them from a server it does not trust, so only a server the user marks trusted (``RunOptions.mcp_trusted``)
may relax a default:

* declared -> its declaration, whatever the annotations say;
* named in ``RunOptions.unguarded`` (the user's explicit opt-out, with why) -> an unverified read, each run of it
  recorded in the task's trace (an ``unguarded`` entry);
* annotated ``readOnlyHint: true`` by a trusted server -> an unverified read;
* anything else (no annotations, ``readOnlyHint`` false or absent, an untrusted server) -> a possible write: it
  never runs, and the refusal names the declaration to add.

Tools a server adds or changes between two listings are judged the same way, from their latest annotations.

>>> judge_listed("search", {"readOnlyHint": True}, server="docs", options=RunOptions(mcp_trusted=["docs"])).kind
'read'
>>> print(judge_listed("pay", {"readOnlyHint": False}, server="payments", options=RunOptions()).why)
... # doctest: +ELLIPSIS
MCP tool 'pay' (server 'payments') is not declared and is not annotated readOnlyHint: true by a trusted server: ...
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .declarations import ToolSpec
from .options import RunOptions

__all__ = ["Hints", "NotDeclared", "hints_of", "judge_listed", "listing_refusal", "undeclared_refusal"]

_FIELDS = {
    "read_only": ("readOnlyHint", "read_only_hint"),
    "destructive": ("destructiveHint", "destructive_hint"),
    "idempotent": ("idempotentHint", "idempotent_hint"),
    "open_world": ("openWorldHint", "open_world_hint"),
}
"""Each hint: its name on the wire, and its attribute on mcp 2's ``ToolAnnotations`` (mcp 1 used the wire name)."""


@dataclass(frozen=True)
class Hints:
    """A tool's MCP annotations with the spec's defaults for what a server left out (or sent as a non-boolean)."""

    read_only: bool = False
    destructive: bool = True
    idempotent: bool = False
    open_world: bool = True


def hints_of(annotations: Any) -> Hints:
    """The hints of ``annotations`` (an ``mcp`` ``ToolAnnotations`` of either major, a mapping, or ``None``); a value
    that is not a boolean counts as absent (the default), so a hostile server cannot pass ``"yes"`` for true.

    >>> hints_of({"readOnlyHint": True, "destructiveHint": "no"})
    Hints(read_only=True, destructive=True, idempotent=False, open_world=True)
    >>> hints_of(None).read_only
    False
    """
    defaults = Hints()
    found: dict[str, bool] = {}
    for field, names in _FIELDS.items():
        values = (
            annotations.get(n) if isinstance(annotations, Mapping) else getattr(annotations, n, None) for n in names
        )
        value = next((v for v in values if v is not None), None)
        found[field] = value if isinstance(value, bool) else getattr(defaults, field)
    return Hints(**found)


@dataclass(frozen=True)
class NotDeclared:
    """An undeclared tool the guard will not run, and the message that says which declaration to add."""

    tool: str
    why: str


UNVERIFIED_READ = ToolSpec(kind="read", declared=False)
"""What a tool the guard may run undeclared is guarded as: a read nobody verifies (counted, bounded by the rules)."""


def undeclared_refusal(tool: str, server: str | None) -> str:
    """The one-line refusal of an undeclared tool that may change the world, naming the declaration to add.

    >>> undeclared_refusal("refund", None).split(": ")[0]
    "MCP tool 'refund' is not declared and is not annotated readOnlyHint"
    """
    origin = f" (server {server!r})" if server else ""
    return (
        f"MCP tool {tool!r}{origin} is not declared and is not annotated readOnlyHint: true by a trusted server: "
        f"it may change the world, so it does not run. Declare it: tools={{{tool!r}: declare_tool({tool!r}, "
        f"kind='write', operation_id=lambda a: ..., verify=...)}} (or declare_tool({tool!r}) if it only reads), "
        f'or opt out explicitly with unguarded={{{tool!r}: "why"}}'
    )


def listing_refusal(refused: Sequence[NotDeclared], server: str | None) -> str:
    """The refusal of a listing with undeclared tools that may change the world: one line naming them all.

    >>> listing_refusal([NotDeclared("pay", ""), NotDeclared("refund", "")], "payments").split(": they")[0]
    "MCP tools 'pay', 'refund' (server 'payments') are not declared and are not annotated readOnlyHint: true by a \
trusted server"
    """
    if len(refused) == 1:
        return refused[0].why
    names = ", ".join(repr(r.tool) for r in refused)
    first = refused[0].tool
    origin = f" (server {server!r})" if server else ""
    return (
        f"MCP tools {names}{origin} are not declared and are not annotated readOnlyHint: true by a trusted server: "
        f"they may change the world, so they do not run. Declare each: tools={{{first!r}: "
        f"declare_tool({first!r}, kind='write', operation_id=lambda a: ..., verify=...), ...}} (declare_tool(name) "
        f'for one that only reads), or opt out explicitly with unguarded={{{first!r}: "why", ...}}'
    )


def judge_listed(tool: str, annotations: Any, *, server: str | None, options: RunOptions) -> ToolSpec | NotDeclared:
    """What the guard makes of ``tool`` as ``server`` lists it, with these ``annotations`` (see the module).

    >>> from agents_loopguard.run import declare_tool
    >>> options = RunOptions(tools={"pay": declare_tool("pay", kind="write", operation_id=lambda a: a["id"],
    ...                                        verify=lambda a, out: None)}, unguarded={"ping": "a health check"})
    >>> judge_listed("pay", {"readOnlyHint": True}, server="s", options=options).kind
    'write'
    >>> judge_listed("ping", None, server="s", options=options).declared
    False
    >>> isinstance(judge_listed("lookup", {"readOnlyHint": True}, server="s", options=options), NotDeclared)
    True
    """
    declared = options.tools.get(tool)
    if declared is not None:
        return declared
    if tool in options.unguarded:
        return UNVERIFIED_READ
    if server is not None and server in options.mcp_trusted and hints_of(annotations).read_only:
        return UNVERIFIED_READ
    return NotDeclared(tool, undeclared_refusal(tool, server))
