"""A tool's guard declaration, the same for every adapter: its kind, how a write names its operation, how the
application verifies a result, its retries and its own limit; and how the model's raw arguments become a dict.

>>> declare_tool("lookup", verify=lambda args, out: {"revision": 1, "done": False, "effect": "none"}).kind
'read'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..values.arguments import ArgumentsRefused, arguments_problem, load_arguments
from ..values.calls import KINDS, Kind, canonical_args
from ..values.probes import Probe
from .retry import NO_RETRY, RetryPolicy

__all__ = [
    "UNDECLARED",
    "ToolSpec",
    "Unnamed",
    "Verify",
    "check_declarations",
    "check_unguarded",
    "declare_tool",
    "parse_arguments",
    "resolve",
]

Verify = Callable[[dict[str, Any], Any], Any]
"""``verify(args, output) -> evidence``, sync or async: the application's trusted check of a tool result."""


@dataclass(frozen=True)
class ToolSpec:
    """What the guard needs to know about one tool: its kind, how a write names its operation, how to verify."""

    kind: Kind = "read"
    operation_id: Callable[[dict[str, Any]], Any] | None = None
    """Derives the stable business operation id of a write from its arguments."""
    verify: Verify | None = None
    """The application's trusted check ``verify(args, output) -> evidence`` (sync or async)."""
    declared: bool = True
    """False for a tool the run guards as a read because nobody declared it."""
    retry: RetryPolicy = NO_RETRY
    """Retries of a transient failure verified to have had no effect (none by default)."""
    max_executions: int | None = None
    """Executions of this tool allowed for the whole task (``None``: only the task's budget bounds it)."""
    volatile_args: tuple[str, ...] = ()
    """Top-level arguments that are no part of the action (a timestamp, a request id): left out of the call's
    identity, so calls that differ only in them are the same call to the repeat rules (and, for a write, the same
    payload). Never an argument that changes what the call does (a customer id, an amount, a page's cursor)."""
    probe: Probe | None = None
    """For a write: ``probe(operation_id, args)`` asks the receiving system, read-only, whether it holds the write
    (:mod:`~agents_loopguard.values.probes`); the guard calls it when the write's answer was lost."""
    progress_key: str | None = None
    """Whose revision ``verify`` reports (``None``: the tool's own): tools whose verifies count the same thing
    declare the same key; each key's revision is compared only with its own last one
    (:mod:`~agents_loopguard.engine.progress`)."""

    def operation_of(self, args: Mapping[str, Any]) -> str | Unnamed | None:
        """The business operation a write with these arguments performs (``None`` for a tool that is not a
        write), or :class:`Unnamed` with why ``operation_id(args)`` could not name it: the one derivation used to
        reserve the write and to show it in a pause. ``operation_id`` gets the arguments in their canonical form
        (:func:`~agents_loopguard.values.calls.canonical_args`), so the same call names the same operation.

        >>> spec = declare_tool("refund", kind="write", operation_id=lambda a: f"refund-{a['order']}-{a['amount']}",
        ...                     verify=lambda a, out: {"revision": 1, "done": True, "effect": "committed"})
        >>> spec.operation_of({"order": 42, "amount": 80.0}), spec.operation_of({"amount": 8e1, "order": 42})
        ('refund-42-80', 'refund-42-80')
        >>> spec.operation_of({}).why
        "KeyError: 'order'"
        """
        if self.kind != "write" or self.operation_id is None:
            return None
        try:
            canonical = canonical_args(args)
        except ValueError as exc:  # not JSON data: the call itself is refused as invalid (invalid_call)
            return Unnamed(f"the arguments are not JSON data ({type(exc).__name__})")
        try:
            derived = self.operation_id(canonical)
        except Exception as exc:  # the model's arguments lack what names the operation
            return Unnamed(f"{type(exc).__name__}: {exc}")
        if isinstance(derived, str) and derived:
            return derived
        return Unnamed(f"it returned {derived!r}")


@dataclass(frozen=True)
class Unnamed:
    """A write whose ``operation_id(args)`` could not name its operation, and why (it is refused as
    ``missing_operation_id``)."""

    why: str


def declare_tool(
    name: str,
    *,
    kind: Kind = "read",
    operation_id: Callable[[dict[str, Any]], Any] | None = None,
    verify: Verify | None = None,
    retry: RetryPolicy = NO_RETRY,
    max_executions: int | None = None,
    volatile_args: tuple[str, ...] | list[str] = (),
    probe: Probe | None = None,
    progress_key: str | None = None,
) -> ToolSpec:
    """Check a tool's guard declaration and return its :class:`ToolSpec` (the same rules for every adapter).

    ``volatile_args`` names the arguments that are no part of the action (:attr:`ToolSpec.volatile_args`);
    ``progress_key`` whose revision ``verify`` reports (:attr:`ToolSpec.progress_key`; default the tool's own):

    >>> declare_tool("search", volatile_args=("requested_at",)).volatile_args
    ('requested_at',)

    ``probe`` (writes only) asks the receiver about a write whose answer was lost (:attr:`ToolSpec.probe`).

    >>> declare_tool("refund", kind="write", verify=lambda a, out: None)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: write tool 'refund' needs operation_id=callable(args) -> str: ...
    """
    if kind not in KINDS:
        raise ValueError(f"tool {name!r}: kind {kind!r} is not one of {', '.join(sorted(KINDS))}")
    if kind == "write":
        if operation_id is None:
            raise ValueError(
                f"write tool {name!r} needs operation_id=callable(args) -> str: a stable business id derived from "
                "the arguments (e.g. lambda a: f\"confirm-order-{a['order']}-v{a['version']}\"), never the call id"
            )
        if verify is None:
            raise ValueError(
                f"write tool {name!r} needs verify=callable(args, output) -> evidence: the application's check "
                "that says whether the write committed"
            )
    elif operation_id is not None:
        raise ValueError(f"tool {name!r}: operation_id only applies to kind='write'")
    if probe is not None and (kind != "write" or not callable(probe)):
        raise ValueError(
            f"tool {name!r}: probe=callable(operation_id, args) -> committed(result) | NOT_COMMITTED | UNKNOWN "
            "asks the receiver about a write; it applies to kind='write' only"
        )
    if max_executions is not None and (
        isinstance(max_executions, bool) or not isinstance(max_executions, int) or max_executions < 0
    ):
        raise ValueError(f"tool {name!r}: max_executions must be an int >= 0 or None, got {max_executions!r}")
    if isinstance(volatile_args, str) or not all(isinstance(a, str) and a for a in volatile_args):
        raise ValueError(f"tool {name!r}: volatile_args must be a tuple of argument names, got {volatile_args!r}")
    if progress_key is not None and (not isinstance(progress_key, str) or not progress_key):
        raise ValueError(f"tool {name!r}: progress_key must be a non-empty string or None, got {progress_key!r}")
    return ToolSpec(
        kind=kind,
        operation_id=operation_id,
        verify=verify,
        retry=retry,
        max_executions=max_executions,
        volatile_args=tuple(volatile_args),
        probe=probe,
        progress_key=progress_key,
    )


UNDECLARED = ToolSpec(declared=False)
"""What a tool nobody declared is guarded as: a read without ``verify`` (its calls count, identical calls are cut,
nothing it returns is progress)."""


def check_declarations(tools: Any) -> Mapping[str, ToolSpec]:
    """``RunOptions.tools`` checked: a mapping of tool names to :func:`declare_tool` declarations.

    >>> check_declarations({"lookup": {"kind": "read"}})
    Traceback (most recent call last):
    ...
    TypeError: tools={'lookup': ...} must be a declaration: declare_tool('lookup', kind=..., ...), got dict
    """
    if not isinstance(tools, Mapping):
        raise TypeError(f"tools= maps tool names to declare_tool(name, ...), got {type(tools).__name__}")
    for name, spec in tools.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"tools= keys are tool names (non-empty strings), got {name!r}")
        if not isinstance(spec, ToolSpec):
            raise TypeError(
                f"tools={{{name!r}: ...}} must be a declaration: declare_tool({name!r}, kind=..., ...), "
                f"got {type(spec).__name__}"
            )
    return tools


def check_unguarded(unguarded: Any, declared: Mapping[str, ToolSpec] | None = None) -> Mapping[str, str]:
    """``RunOptions.unguarded`` checked: tool names, each with why it may run unguarded, none of them ``declared``
    (a declared tool is guarded: the two say opposite things).

    >>> check_unguarded({"web_search": ""})
    Traceback (most recent call last):
    ...
    TypeError: unguarded={'web_search': ...} needs why the tool may run outside the guard (a non-empty string)
    >>> check_unguarded({"lookup": "read-only"}, {"lookup": declare_tool("lookup")})
    Traceback (most recent call last):
    ...
    ValueError: tool 'lookup' is both declared (tools=) and opted out (unguarded=): a declared tool is guarded; keep one
    """
    if not isinstance(unguarded, Mapping):
        raise TypeError(
            f"unguarded= maps tool names to why they may run outside the guard, got {type(unguarded).__name__}"
        )
    for name, why in unguarded.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"unguarded= keys are tool names (non-empty strings), got {name!r}")
        if not isinstance(why, str) or not why.strip():
            raise TypeError(
                f"unguarded={{{name!r}: ...}} needs why the tool may run outside the guard (a non-empty string)"
            )
        if declared is not None and name in declared:
            raise ValueError(
                f"tool {name!r} is both declared (tools=) and opted out (unguarded=): a declared tool is guarded; "
                "keep one"
            )
    return unguarded


def resolve(name: str, own: ToolSpec | None, named: Mapping[str, ToolSpec]) -> ToolSpec:
    """The one rule for a tool declared by its wrapper (``own``: ``guarded_tool``, ``GuardedTool``...) and by name
    (``named``: ``RunOptions.tools``): a wrapper that declares nothing takes the declaration by name; a declaration
    by name alone stands; both must be the same declaration, or the run is refused (a ``ValueError`` naming the
    fix); neither: the tool is an undeclared read.

    >>> refund = declare_tool("refund", kind="write", operation_id=lambda a: f"refund-{a['order']}",
    ...                       verify=lambda a, out: {"revision": 1, "done": True, "effect": "committed"})
    >>> resolve("refund", None, {"refund": refund}) is refund, resolve("lookup", None, {}) is UNDECLARED
    (True, True)
    >>> resolve("refund", declare_tool("refund"), {"refund": refund})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: tool 'refund' is declared twice, ...
    """
    by_name = named.get(name)
    if own is None or not own.declared:
        return by_name if by_name is not None else (own or UNDECLARED)
    if by_name is None or by_name == own:
        return own
    raise ValueError(
        f"tool {name!r} is declared twice, by its wrapper (kind={own.kind!r}) and in tools= (kind={by_name.kind!r}), "
        f"and the two differ: keep one (a wrapper without declaration keywords defers to tools=), or pass the same "
        f"declare_tool({name!r}, ...) object to both"
    )


def parse_arguments(tool: str, raw: str | Mapping[str, Any] | None) -> dict[str, Any] | str:
    """The model's JSON arguments as a dict, or why they are not a JSON object (empty input is ``{}``).

    >>> parse_arguments("lookup", '{"order": 42}'), parse_arguments("lookup", "[42]")
    ({'order': 42}, "the arguments for 'lookup' are a JSON list, not a JSON object")
    """
    if isinstance(raw, Mapping):
        problem = arguments_problem(raw)
        return dict(raw) if problem is None else f"the arguments for {tool!r} are refused: {problem}"
    if raw is None or not raw.strip():
        return {}
    try:
        parsed = load_arguments(raw)
    except ArgumentsRefused as exc:
        return f"the arguments for {tool!r} are refused: {exc}"
    except ValueError as exc:
        return f"the arguments for {tool!r} are not JSON (not valid JSON: {exc})"
    if not isinstance(parsed, dict):
        return f"the arguments for {tool!r} are a JSON {type(parsed).__name__}, not a JSON object"
    return parsed
