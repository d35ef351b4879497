"""An operator asks the receiver: the write's own ``probe(operation_id, args)`` run for an operation whose result is
unknown (``loopguard reconcile OP --probe``, ``POST /api/v1/operations/{op}/probe``, the console's button), its answer
recorded as a reconciliation by the probe (who ``probe:<tool>``, its evidence and the operator who asked, the time),
through the same ledger transition an operator's own answer takes.

The process that runs it must find the probe: the operator names a *registry*, ``package.module:attribute``, given
with ``--probes`` (or ``LOOPGUARD_PROBES``, also read by ``loopguard serve``). The attribute is a mapping of tool
names to their declarations (:func:`~agents_loopguard.run.declare_tool`) or to probe callables, or a list of the
application's guarded tools (``guarded_tool``, ``GuardedTool``...): importing it must not start the application.

>>> from agents_loopguard import Budget, MemoryStore, create_runner
>>> from agents_loopguard.values.probes import committed
>>> store = MemoryStore()
>>> def lost(call): raise TimeoutError("no response")
>>> pay = {"tool": "pay", "kind": "write", "operation_id": "inv-7", "args": {"amount": 5}}
>>> _ = create_runner(budget=Budget(3, 3), store=store, task_id="t-7", execute=lost, verify=lambda c, r: None)([pay])
>>> probes = {"pay": lambda op, args: committed({"receipt": "r-9"}, evidence=f"{op} paid as r-9")}
>>> done = probe_operation(store, "inv-7", probes, who="ana")
>>> done["state"], done["task_reopened"], done["transition"]["who"]
('committed', True, 'probe:pay')
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..engine.probing import PROBE_WHO
from ..store.base import OperationRecord, OperationState, Store
from ..values.errors import InputError, NotFoundError, StateError
from ..values.probes import Probe, ProbeAnswer, parse_probe_answer
from .operator import reconcile_operation

__all__ = ["PROBES_ENV", "load_probes", "probe_operation", "probes_of"]

PROBES_ENV = "LOOPGUARD_PROBES"
"""Environment variable naming the registry of probes (``package.module:attribute``) for operators' probes."""
_DECLARATIONS = ("spec", "loopguard_declaration", "loopguard")
"""Where the adapters' guarded tools keep their declaration (``GuardedTool``, the Agents SDK's, Google ADK's)."""


def probes_of(registry: Any) -> dict[str, Probe]:
    """The probes a registry holds, by tool name: a mapping of names to declarations or callables, or guarded tools.

    >>> from agents_loopguard.run import declare_tool
    >>> refund = declare_tool("refund", kind="write", operation_id=lambda a: "r", verify=lambda a, o: None,
    ...                       probe=lambda op, args: "unknown")
    >>> sorted(probes_of({"refund": refund, "search": declare_tool("search")}))
    ['refund']
    """
    found: dict[str, Probe] = {}
    entries: Iterable[tuple[Any, Any]]
    if isinstance(registry, Mapping):
        entries = registry.items()
    elif isinstance(registry, Iterable) and not isinstance(registry, (str, bytes)):
        entries = ((getattr(tool, "name", None), tool) for tool in registry)
    else:
        raise InputError(f"a registry of probes maps tool names to declarations, got {type(registry).__name__}")
    for name, entry in entries:
        probe = _probe_of(entry)
        if isinstance(name, str) and probe is not None:
            found[name] = probe
    return found


def _probe_of(entry: Any) -> Probe | None:
    declared = getattr(entry, "probe", None)
    if callable(declared):
        return declared  # type: ignore[no-any-return]
    for attribute in _DECLARATIONS:
        probe = getattr(getattr(entry, attribute, None), "probe", None)
        if callable(probe):
            return probe  # type: ignore[no-any-return]
    return entry if callable(entry) and not isinstance(entry, type) else None


def load_probes(path: str | None = None) -> dict[str, Probe]:
    """The registry ``package.module:attribute`` (``path``, else ``LOOPGUARD_PROBES``) imported and read with
    :func:`probes_of`; an ``InputError`` that says what to fix when it cannot be.

    >>> load_probes("app.tools")
    Traceback (most recent call last):
    ...
    agents_loopguard.values.errors.InputError: name the registry of probes as package.module:attribute, got 'app.tools'
    """
    named = path or os.environ.get(PROBES_ENV) or ""
    module_name, _, attribute = named.partition(":")
    if not module_name or not attribute:
        if not named:
            raise InputError(
                f"no registry of probes: name one as package.module:attribute (--probes, or {PROBES_ENV}), whose "
                "attribute maps tool names to their declarations or lists the guarded tools"
            )
        raise InputError(f"name the registry of probes as package.module:attribute, got {named!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(f"the registry of probes {named!r} cannot be imported: {exc}") from None
    registry = getattr(module, attribute, None)
    if registry is None:
        raise InputError(f"module {module_name!r} has no attribute {attribute!r} (the registry of probes)")
    return probes_of(registry)


def probe_operation(store: Store, operation_id: str, probes: Mapping[str, Probe], *, who: str) -> dict[str, Any]:
    """Run the probe of an ``unknown`` operation's tool and record its answer (see the module): ``committed`` with
    the receiver's result and ``not_committed`` through :func:`~agents_loopguard.ops.operator.reconcile_operation`
    (the same transition; the task reopens when nothing of it is unknown any more); ``unknown``, a probe that raises
    or answers garbage record nothing. Returns what ``reconcile_operation`` returns, with ``probe`` (the answer and
    its evidence, or why there is none).
    """
    if not who:
        raise InputError("a probe run by an operator is recorded with who asked for it")
    record = store.lookup_operation(operation_id)
    if record is None:
        raise NotFoundError(f"unknown operation {operation_id!r}: check the id (it is the business operation id)")
    if record.state is not OperationState.UNKNOWN:
        raise StateError(f"operation {operation_id!r} is already {record.state}: there is nothing to ask the receiver")
    probe = probes.get(record.tool)
    if probe is None:
        known = ", ".join(sorted(probes)) or "none"
        raise InputError(
            f"no probe for tool {record.tool!r} in the registry of probes (it has: {known}): declare "
            f"probe= on the tool, and name the module that holds it (--probes or {PROBES_ENV})"
        )
    answer = _ask(probe, operation_id, _reserved_args(store, record))
    if isinstance(answer, str) or answer.state == "unknown":
        why = answer if isinstance(answer, str) else answer.evidence or "the receiver cannot say"
        done = reconcile_operation(store, operation_id, OperationState.UNKNOWN, who=who)
        done["probe"] = {"answer": None if isinstance(answer, str) else "unknown", "evidence": why}
        done["message"] = f"the probe of {record.tool}: {why}; {done['message']}"
        return done
    evidence = answer.evidence or f"the receiver answered {answer.state}"
    result = {"status": "ok", "output": answer.result} if answer.result is not None else None
    done = reconcile_operation(
        store,
        operation_id,
        answer.state,
        who=f"{PROBE_WHO}{record.tool}",
        why=f"{evidence} (asked by {who})",
        result=result,
    )
    done["probe"] = {"answer": answer.state, "evidence": evidence}
    return done


def _reserved_args(store: Store, record: OperationRecord) -> dict[str, Any]:
    """The write's arguments as the task's trace keeps them (redacted): what the probe is asked with."""
    for entry in reversed(store.trace(record.task_id)):
        if entry.kind == "tool" and entry.operation_id == record.operation_id and isinstance(entry.args, dict):
            return dict(entry.args)
    return {}


def _ask(probe: Probe, operation_id: str, args: dict[str, Any]) -> ProbeAnswer | str:
    """The probe's answer, or why there is none (it raised, or answered garbage)."""
    try:
        value = probe(operation_id, args)
        if inspect.isawaitable(value):
            value = asyncio.run(_awaited(value))
    except Exception as exc:  # the probe's failure leaves the operation unknown
        return f"the probe raised {type(exc).__name__}: {exc}"
    return parse_probe_answer(value)


async def _awaited(value: Any) -> Any:
    return await value
