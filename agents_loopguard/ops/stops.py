"""Stop hooks: code that runs once when a task's stop mark is set, in the process that set it.

The stop mark is the guard's: every worker refuses the task's next model call and tool execution. What runs the
agent may need telling too (a hosted runtime session to end, a queue to drain, a person to page). A stop hook does
that. :func:`request_stop` sets the mark through the store's atomic
:meth:`~agents_loopguard.store.base.Store.set_stop_mark` and, only when this call set it, calls the hooks of that task
and the global ones, once each. The CLI
(``loopguard stop``), the HTTP API and the console stop through it, and so should Python code that wants the hooks
(``store.request_stop`` sets the mark and calls nothing).

Hooks come from three places:

* :func:`register_stop_hook` in this process, for one task or for all;
* ``LOOPGUARD_STOP_HOOKS``: ``module:function`` names, comma-separated, loaded by whichever process stops a task
  (the ``loopguard`` command, ``loopguard serve``);
* the ``agents_loopguard.stop_hooks`` entry-point group of installed packages.

A hook receives a :class:`StopEvent`. It runs synchronously after the mark is committed: an exception (or a hook
that cannot be loaded) is logged and reported in :attr:`StopResult.hooks`, and never undoes or fails the stop.

>>> from agents_loopguard import Budget, Guard, MemoryStore
>>> store = MemoryStore()
>>> _ = Guard(budget=Budget(3, 3), store=store, task_id="t-1")
>>> seen = []
>>> remove = register_stop_hook(lambda event: seen.append((event.task_id, event.who)), task_id="t-1")
>>> request_stop(store, "t-1", reason="runaway", who="ana").newly_set, seen
(True, [('t-1', 'ana')])
>>> request_stop(store, "t-1", reason="again", who="bob").newly_set, seen    # the mark was there: no hook
(False, [('t-1', 'ana')])
>>> remove()
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from ..store.base import Store, TaskSnapshot
from ..values.canonical import redact

__all__ = [
    "ENTRY_POINT_GROUP",
    "STOP_HOOKS_ENV",
    "HookRun",
    "StopEvent",
    "StopHook",
    "StopResult",
    "configured_stop_hooks",
    "register_stop_hook",
    "request_stop",
]

STOP_HOOKS_ENV = "LOOPGUARD_STOP_HOOKS"
"""Environment variable: comma-separated ``module:function`` stop hooks, loaded by the process that stops a task."""
ENTRY_POINT_GROUP = "agents_loopguard.stop_hooks"
"""Entry-point group whose objects are stop hooks (for an installed package)."""
log = logging.getLogger("agents_loopguard.ops.stops")


@dataclass(frozen=True)
class StopEvent:
    """What a stop hook is told: which task, why, by whom, when, and the task as the mark left it."""

    task_id: str
    reason: str
    who: str | None
    at: float
    task: TaskSnapshot


StopHook = Callable[[StopEvent], Any]
"""``hook(event)``; its return value is ignored, its exception logged."""


@dataclass(frozen=True)
class HookRun:
    """One hook's run: its name, and the error it raised (None when it returned)."""

    hook: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the hook returned without raising."""
        return self.error is None


@dataclass(frozen=True)
class StopResult:
    """What :func:`request_stop` did."""

    task: TaskSnapshot
    newly_set: bool
    """True when this call set the mark (and so ran the hooks); False when the task already had one."""
    hooks: tuple[HookRun, ...] = ()


_registered: list[tuple[str | None, StopHook]] = []
_lock = threading.Lock()


def register_stop_hook(hook: StopHook, *, task_id: str | None = None) -> Callable[[], None]:
    """Call ``hook`` when a stop mark is set by this process: for ``task_id`` only, or for every task (None).

    Returns a function that removes the registration.
    """
    if not callable(hook):
        raise TypeError(f"a stop hook must be callable, got {type(hook).__name__}")
    entry = (task_id, hook)
    with _lock:
        _registered.append(entry)

    def remove() -> None:
        with _lock:
            if entry in _registered:
                _registered.remove(entry)

    return remove


def _name(hook: Any) -> str:
    module = getattr(hook, "__module__", None) or type(hook).__module__
    qualname = getattr(hook, "__qualname__", None) or type(hook).__qualname__
    return f"{module}:{qualname}"


def _load(spec: str) -> StopHook:
    module_name, _, attribute = spec.strip().partition(":")
    if not module_name or not attribute:
        raise ValueError(f"{spec!r} is not module:function")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{spec} is a {type(target).__name__}, not a callable")
    return target  # type: ignore[no-any-return]


def configured_stop_hooks(environ: Mapping[str, str] | None = None) -> list[tuple[str, StopHook | Exception]]:
    """The hooks named by ``LOOPGUARD_STOP_HOOKS`` and the entry-point group, each loaded (or the error that
    prevented it), by name."""
    env = os.environ if environ is None else environ
    found: list[tuple[str, StopHook | Exception]] = []
    for spec in filter(None, (s.strip() for s in env.get(STOP_HOOKS_ENV, "").split(","))):
        try:
            found.append((spec, _load(spec)))
        except Exception as exc:
            found.append((spec, exc))
    for point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            found.append((f"{point.name} ({point.value})", point.load()))
        except Exception as exc:
            found.append((f"{point.name} ({point.value})", exc))
    return found


def _hooks_for(task_id: str) -> list[tuple[str, StopHook | Exception]]:
    with _lock:
        registered = [(_name(h), h) for t, h in _registered if t == task_id] + [
            (_name(h), h) for t, h in _registered if t is None
        ]
    return registered + configured_stop_hooks()


def _run(name: str, hook: StopHook | Exception, event: StopEvent) -> HookRun:
    if isinstance(hook, Exception):
        error = f"cannot load it: {type(hook).__name__}: {redact(str(hook))}"
    else:
        try:
            hook(event)
        except Exception as exc:  # a hook never undoes or fails the stop
            error = f"{type(exc).__name__}: {redact(str(exc))}"
        else:
            return HookRun(name)
    log.error("task %s: stop hook %s failed: %s", event.task_id, name, error, extra={"task_id": event.task_id})
    return HookRun(name, error)


def request_stop(
    store: Store, task_id: str, *, reason: str = "stop_requested", who: str | None = None, now: float | None = None
) -> StopResult:
    """Set the task's stop mark; if this call set it, run the task's stop hooks, once each (see the module).

    ``who`` is recorded with the mark (a ``stop`` transition). Raises what the store raises
    (:class:`~agents_loopguard.NotFoundError` for an unknown task); hook failures are reported, not raised.
    """
    at = time.time() if now is None else now
    mark = store.set_stop_mark(task_id, reason, who=who, now=at)
    if not mark.newly_set:
        return StopResult(mark.task, False)
    event = StopEvent(task_id, mark.task.stop_reason or reason, who, at, mark.task)
    runs = tuple(_run(name, hook, event) for name, hook in _hooks_for(task_id))
    return StopResult(mark.task, True, runs)
