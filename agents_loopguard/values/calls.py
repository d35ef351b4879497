"""What the engine reasons about: a proposed call, the permission to execute it, and a decision to end.

>>> Call(tool="save", args={"amount": 5}, kind="write", operation_id="order-42-confirm").kind
'write'
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .canonical import canonical_json
from .outcome import Reason, Status, Usage

__all__ = [
    "FLOW_NAMESPACE",
    "KINDS",
    "UNSET",
    "Call",
    "Kind",
    "Ticket",
    "Verdict",
    "canonical_args",
    "flow_operation_id",
    "outside_namespace",
    "parse_call",
]

Kind = Literal["read", "write", "poll", "page"]
KINDS: frozenset[str] = frozenset({"read", "write", "poll", "page"})
UNSET: Any = object()
"""The value of a :class:`Verdict` that carries none of its own."""
FLOW_NAMESPACE = "flow:"
"""Operation ids that start with this belong to a workflow's activations (R18): ``flow:<flow>:<id>``, where the flow's
``%`` is written ``%25`` and its ``:`` ``%3A`` (so no flow's namespace holds another's; SQL can write it too)."""


@dataclass(frozen=True)
class Call:
    """A proposed tool call, as the guard sees it.

    >>> Call(tool="save", args={"amount": 5}, kind="write", operation_id="order-42-confirm").kind
    'write'
    """

    tool: str
    args: Mapping[str, Any]
    kind: Kind = "read"
    """read, write (needs an operation id), poll (asks about an async job), page (reads one page of a listing)."""
    operation_id: str | None = None
    """For writes: the stable business action ("confirm order 42 at version 3"), never the model's call id."""
    call_id: str | None = None
    """The model's call id, for the trace only."""
    max_executions: int | None = None
    """The tool's own limit of executions for the whole task (``None``: only the task's budget bounds it)."""
    volatile: tuple[str, ...] = ()
    """Top-level arguments the tool declares as no part of the action (a timestamp, a request id): left out of the
    call's identity, so near-duplicates are the same call; kept in the trace and passed to the tool. Never a field
    that changes the meaning (a customer id, an amount). Comes from the tool's declaration, never from the model."""
    progress_key: str | None = None
    """Whose revision the call's ``verify`` reports (``None``: the tool's own, or the task's with
    :attr:`~agents_loopguard.values.budget.Policy.task_revision`): each key's revision is compared only with its own
    last one (see :mod:`~agents_loopguard.engine.progress`). Comes from the tool's declaration."""
    named_by_args: bool = False
    """True when :attr:`operation_id` was derived from the canonical arguments by the tool's declared
    ``operation_id(args)``: the guard then refuses a second id for the same arguments in one task (R20)."""

    def identity(self) -> Mapping[str, Any]:
        """The arguments that name the action: :attr:`args` without the :attr:`volatile` ones.

        >>> Call("search", {"q": "refunds", "requested_at": "10:02"}, volatile=("requested_at",)).identity()
        {'q': 'refunds'}
        """
        if not self.volatile:
            return self.args
        return {key: value for key, value in self.args.items() if key not in self.volatile}


def parse_call(proposal: Any) -> Call | str:
    """Turn a proposal (a :class:`Call` or a mapping with tool, kind, args, operation_id) into a :class:`Call`.

    Returns a short explanation instead when the proposal is not a valid call.

    >>> parse_call({"tool": "search", "kind": "read", "args": {"q": "x"}}).args
    {'q': 'x'}
    >>> parse_call({"tool": "search", "kind": "delete", "args": {}})
    "kind 'delete' is not one of page, poll, read, write"
    """
    fields: tuple[Any, ...]
    if type(proposal) is not dict and isinstance(proposal, Call):
        fields = (proposal.tool, proposal.args, proposal.kind, proposal.operation_id, proposal.call_id)
        limit: Any = proposal.max_executions
        volatile: Any = proposal.volatile
        key: Any = proposal.progress_key
        named: bool = proposal.named_by_args
    elif isinstance(proposal, Mapping):
        op = proposal.get("operation_id", proposal.get("operationId"))
        fields = (proposal.get("tool"), proposal.get("args"), proposal.get("kind"), op, proposal.get("call_id"))
        limit = proposal.get("max_executions")
        volatile = proposal.get("volatile", ())
        key = proposal.get("progress_key")
        named = False  # an id given with the proposal is the caller's own, not derived by a declaration
    else:
        return f"proposal {type(proposal).__name__} is not a mapping"
    tool, args, kind, op, call_id = fields
    if not isinstance(tool, str) or not tool:
        return f"tool {tool!r} is not a non-empty string"
    if not isinstance(args, Mapping):
        return f"args {type(args).__name__} is not an object"
    if not isinstance(kind, str) or kind not in KINDS:
        return f"kind {kind!r} is not one of {', '.join(sorted(KINDS))}"
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        return f"max_executions {limit!r} is not an int >= 0"
    if volatile and (not isinstance(volatile, (list, tuple)) or not all(isinstance(v, str) for v in volatile)):
        return f"volatile {type(volatile).__name__} is not a list of argument names"
    if key is not None and (not isinstance(key, str) or not key):
        return f"progress_key {type(key).__name__} is not a non-empty string"
    return Call(
        tool,
        args,
        kind,  # type: ignore[arg-type]  # checked against KINDS above
        op if isinstance(op, str) else None,  # a non-string id is a missing id, as in the prototype
        call_id if isinstance(call_id, str) else None,
        limit,
        tuple(volatile) if volatile else (),
        key,
        named,
    )


@dataclass(frozen=True)
class Verdict:
    """The guard's decision to end: a status and a reason. :meth:`Guard.end` makes it the terminal outcome."""

    status: Status
    reason: Reason
    detail: str = ""
    operation_id: str | None = None
    value: Any = field(default=UNSET, repr=False)
    """The outcome's value when it is not the last verified result (``completed``: the result that proved done)."""

    @property
    def has_value(self) -> bool:
        """True when the verdict carries its own value (see :attr:`value`)."""
        return self.value is not UNSET


@dataclass(frozen=True)
class Ticket:
    """Permission to execute one call (or, for a committed write, its stored result to return instead)."""

    call: Call
    proposal: Any
    fingerprint: str
    revision: int
    """The task's validated revision when the call was authorized."""
    replay: bool = False
    """True for a committed write: do not execute; return :attr:`result`."""
    result: Any = None
    used: Usage = field(default_factory=Usage)


def canonical_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments as their canonical JSON (RFC 8785) reads back: what a declared ``operation_id(args)`` gets, so
    arguments that are the same call name the same operation (key order, ``80`` / ``80.0`` / ``8e1``). Raises
    :class:`~agents_loopguard.values.canonical.CanonicalError` for values JSON cannot carry.

    >>> canonical_args({"amount": 80.0, "order": "A-17"}), canonical_args({"order": "A-17", "amount": 8e1})
    ({'amount': 80, 'order': 'A-17'}, {'amount': 80, 'order': 'A-17'})
    """
    parsed: dict[str, Any] = json.loads(canonical_json(args))
    return parsed


def flow_operation_id(flow: str, operation_id: str) -> str:
    """The ledger id of a write made by an activation of ``flow``: in the flow's namespace, never a task's id (R18).

    >>> flow_operation_id("orders-sync", "refund-order-42")
    'flow:orders-sync:refund-order-42'
    >>> flow_operation_id("a:b", "c")  # the flow is quoted, so no flow's namespace holds another's
    'flow:a%3Ab:c'
    """
    return f"{FLOW_NAMESPACE}{flow.replace('%', '%25').replace(':', '%3A')}:{operation_id}"


def outside_namespace(call: Call, flow: str | None) -> Verdict | None:
    """The refusal of a write outside the task's namespace (``None``: it may be written), R18's rule for the ledger.

    An activation of ``flow`` writes only in that flow's namespace; any other task (``flow=None``) writes only
    outside every flow's namespace, so neither can replay, block or forge the other's operations.

    >>> outside_namespace(Call("refund", {}, kind="write", operation_id="refund-order-42"), None) is None
    True
    >>> outside_namespace(Call("refund", {}, kind="write", operation_id="flow:orders-sync:refund-42"), None).detail
    "operation 'flow:orders-sync:refund-42' is in a workflow's namespace: only that flow's activations write it"
    """
    op = call.operation_id
    if call.kind != "write" or not op:
        return None
    own = flow_operation_id(flow, "") if flow is not None else None
    if own is None and op.startswith(FLOW_NAMESPACE):
        detail = f"operation {op!r} is in a workflow's namespace: only that flow's activations write it"
    elif own is not None and not op.startswith(own):
        detail = (
            f"an activation of flow {flow!r} writes only in its namespace: operation {op!r} is not {own}<id> "
            "(TriggerGuard.operation_id gives it)"
        )
    else:
        return None
    return Verdict(Status.STOPPED, Reason.OPERATION_CONFLICT, detail, op)
