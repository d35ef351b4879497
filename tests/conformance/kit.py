"""The conformance kit: a door is a row (:class:`Door`), the invariants are checked here once (:func:`violations`).

A row's builder runs one scenario through one door of one framework, as a user of that framework would write it,
under the task the kit gives it (:class:`Env`), and returns what it observed (:class:`Observed`): the real side
effects, counted where they happen (a tool body counts itself with :meth:`Env.body`, a write's effect at its
receiver, the requests the scripted model or server received), never our own counters. The kit then reads the
task back from the store and checks the invariants of R19 (see README.md in this folder).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agents_loopguard import Budget, Outcome, Reason
from agents_loopguard.store import Store

__all__ = ["FRAMEWORKS", "STORES", "Door", "Env", "Observed", "executions_reserved", "violations"]

FRAMEWORKS: Mapping[str, str] = {
    "sdk": "Agents SDK",
    "raw": "Raw function calling",
    "langchain": "LangChain",
    "adk": "Google ADK",
    "dbos": "DBOS",
    "restate": "Restate",
    "temporal": "Temporal",
    "mcp": "MCP",
}
"""A row's ``framework`` -> the heading of its section in docs/doors.md."""

STORES = ("memory", "sqlite", "postgres")
Mark = Literal["guarded", "refused", "outside"]
Variant = Literal["run", "stop"]

DEFAULT_BUDGET = Budget(model_turns=8, tool_executions=6)


@dataclass(frozen=True)
class Door:
    """One public way a framework runs a tool body or sends a model request: a row of the kit.

    The kit runs ``build(env)`` on every store of ``stores``, twice: once as is (``run``) and once with the stop
    mark set at the row's ``stop_at``-th checkpoint (``stop``; see :meth:`Env.checkpoint`).
    """

    framework: str
    """A key of :data:`FRAMEWORKS` (its section of docs/doors.md)."""
    name: str
    """Unique within the framework; the row is named ``framework:name`` in docs/doors.md and in test ids."""
    doc: str
    """The door in one line, as docs/doors.md shows it (the doc must carry it verbatim, beside the row's id)."""
    build: Callable[[Env], Observed]
    """Runs the scenario through the door under ``env`` and returns what it observed."""
    mark: Mark = "guarded"
    """``guarded``: every invariant holds. ``refused``: the door is refused when the run starts (the builder returns
    the message in :attr:`Observed.refused`, which must contain :attr:`refusal`) and nothing runs. ``outside``: the
    door is outside the guard (the doc says why); the invariants still hold for what the guard does see."""
    refusal: str = ""
    """For a refused door: a part of the refusal's message (the fix it names)."""
    budget: Budget = DEFAULT_BUDGET
    stores: tuple[str, ...] = STORES
    """The stores to run on: all three wherever the door touches the store. A ``refused`` door runs on the first
    only: it is refused when the run starts, before any store holds anything of it."""
    final: Any = None
    """When set: the final answer the user must get in the ``run`` variant (a nested agent never ends its parent's
    run: the parent's answer is the one that comes back)."""
    stop_at: int | None = 1
    """The checkpoint (1-based) at which the ``stop`` variant sets the stop mark; ``None``: no stop variant (say
    why in :attr:`doc` or in the builder's docstring: only doors that end before any checkpoint)."""
    stop_reason: Reason | None = Reason.STOP_REQUESTED
    """The reason the outcome of the ``stop`` variant carries (``None``: not checked)."""
    broken: str | None = None
    """A reproduction of a bug not fixed yet (why): the kit expects this row to fail (strict xfail), so it turns
    red the moment it passes and the mark must go."""

    @property
    def id(self) -> str:
        return f"{self.framework}:{self.name}"


@dataclass
class Observed:
    """What a row observed; :meth:`Env.observe` fills the counters from the env."""

    outcome: Outcome | None = None
    """The outcome the entry point returned (the last one, when the row runs the task several times)."""
    bodies: Counter[str] = field(default_factory=Counter)
    """Tool name -> tool bodies that really ran."""
    writes: Counter[str] = field(default_factory=Counter)
    """Operation id -> write effects at the receiver (bodies of writes that really ran)."""
    requests: int | None = None
    """Model requests the scripted model or server received (``None``: the door sends no model request)."""
    final: Any = None
    """The final answer the user got."""
    refused: str | None = None
    """The message of a door refused when the run starts."""
    tasks: tuple[str, ...] = ()
    """Tasks other than the env's that the row created on purpose (anything else in the store is a violation)."""


@dataclass
class Env:
    """What a row's builder gets: the task to run under and the counters of real side effects."""

    store: Store
    store_kind: str
    """``memory``, ``sqlite`` or ``postgres``."""
    store_url: str | None
    """The store's URL, for rows that open it from other processes (``None`` for memory)."""
    task_id: str
    budget: Budget
    variant: Variant
    tmp_path: Path
    stop_at: int | None = 1
    bodies: Counter[str] = field(default_factory=Counter)
    writes: Counter[str] = field(default_factory=Counter)
    checkpoints: int = 0
    marked: tuple[int, int] | None = None
    """(bodies, requests) when the stop variant set the mark."""
    _requests: list[Callable[[], int]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def options(self, **more: Any) -> dict[str, Any]:
        """The run options every entry point takes: the env's task, budget and store (and ``more``)."""
        return {"budget": self.budget, "store": self.store, "task_id": self.task_id, **more}

    def count_requests(self, counter: Callable[[], int]) -> None:
        """Tell the env how to count the requests a model (a scripted model, a scripted server) received so far,
        before the run starts; a row with several models or servers tells it for each."""
        self._requests.append(counter)

    def requests(self) -> int:
        """The requests every model of the row received so far."""
        return sum(counter() for counter in self._requests)

    def body(self, tool: str, operation_id: str | None = None) -> None:
        """Every tool body of a row calls this first: the body ran (and, for a write, its effect reached the
        receiver under ``operation_id``). A body is a checkpoint."""
        with self._lock:
            self.bodies[tool] += 1
            if operation_id is not None:
                self.writes[operation_id] += 1
        self.checkpoint()

    def committed(self, operation_id: str) -> bool:
        """The receiver's answer about ``operation_id`` (for a write's ``verify``)."""
        with self._lock:
            return self.writes[operation_id] > 0

    def checkpoint(self) -> None:
        """A point where the ``stop`` variant may set the stop mark (every body is one; a row's scripted model may
        call it while it answers): the mark is set at the ``stop_at``-th, as an operator would set it."""
        with self._lock:
            self.checkpoints += 1
            due = self.variant == "stop" and self.checkpoints == self.stop_at
            bodies = sum(self.bodies.values())
        if due:  # counted before the mark: whatever is sent or run from here on is after it
            marked = (bodies, self.requests())
            self.store.request_stop(self.task_id, "conformance kit")
            self.marked = marked

    def observe(self, outcome: Outcome | None, *, requests: int | None = None, final: Any = None) -> Observed:
        """What the row observed: ``outcome``, the env's counters, ``requests`` (default: the env's counter when
        one was given) and the ``final`` answer (default: the outcome's final output)."""
        if requests is None and self._requests:
            requests = self.requests()
        if final is None and outcome is not None:
            final = outcome.final_output
        return Observed(outcome, Counter(self.bodies), Counter(self.writes), requests, final)


def executions_reserved(store: Store, task_id: str) -> Counter[str]:
    """Tool name -> executions the task reserved for it, read from the stored trace (every reserved execution ends
    in one tool entry; a refusal and a committed write's stored result reserve none)."""
    reserved: Counter[str] = Counter()
    for entry in store.trace(task_id):
        refused = entry.result_class.startswith("refused:")
        if entry.kind == "tool" and entry.tool and not refused and entry.result_class != "cached":
            reserved[entry.tool] += 1
    return reserved


def violations(door: Door, env: Env, seen: Observed) -> list[str]:
    """Every invariant the row broke (empty: the door conforms)."""
    if door.mark == "refused":
        return _refused(door, seen)
    task = env.store.task(env.task_id)
    problems: list[str] = []
    if task is None:
        return [f"the task {env.task_id!r} is not in the store: the door ran under another task or none"]
    problems += _bodies(env, seen, task.used.tools)
    problems += [f"I2: write {op!r} ran {n} times" for op, n in sorted(seen.writes.items()) if n > 1]
    if seen.requests is not None and seen.requests != task.used.models:
        problems.append(f"I3: the model received {seen.requests} requests, the task counted {task.used.models}")
    problems += _same_task(door, env, seen, task.used)
    if env.variant == "stop":
        problems += _stopped(door, env, seen)
    return problems


def _refused(door: Door, seen: Observed) -> list[str]:
    problems = []
    if not seen.refused or door.refusal not in seen.refused:
        problems.append(f"refused door: the message {seen.refused!r} does not name {door.refusal!r}")
    if sum(seen.bodies.values()) or seen.requests:
        problems.append(f"refused door: {dict(seen.bodies)} bodies and {seen.requests} requests ran")
    return problems


def _bodies(env: Env, seen: Observed, used_tools: int) -> list[str]:
    reserved = executions_reserved(env.store, env.task_id)
    problems = [  # one reservation per body: fewer is a body run unreserved, more an execution counted twice
        f"I1: {tool} ran {n} bodies under {reserved[tool]} reserved executions"
        for tool, n in sorted(seen.bodies.items())
        if n != reserved[tool]
    ]
    if sum(seen.bodies.values()) > used_tools:
        problems.append(f"I1: {sum(seen.bodies.values())} bodies ran, the task counted {used_tools} executions")
    return problems


def _same_task(door: Door, env: Env, seen: Observed, used: Any) -> list[str]:
    problems = []
    others = sorted({t.task_id for t in env.store.tasks()} - {env.task_id, *seen.tasks})
    if others:
        problems.append(f"I4: the door created other tasks {others} (a nested run must share its parent's)")
    budget = env.budget
    if used.models > budget.model_turns or used.tools > budget.tool_executions:
        problems.append(f"I4: the task used {used} beyond its budget {budget}")
    if seen.outcome is not None and seen.outcome.task_id != env.task_id:
        problems.append(f"I4: the outcome is task {seen.outcome.task_id!r}'s, not {env.task_id!r}'s")
    if env.variant == "run" and door.final is not None and seen.final != door.final:
        problems.append(f"I4: the user got {seen.final!r}, not the parent's answer {door.final!r}")
    return problems


def _stopped(door: Door, env: Env, seen: Observed) -> list[str]:
    if env.marked is None:
        return [f"I5: the run never reached checkpoint {door.stop_at} (the stop variant set no mark)"]
    bodies, requests = env.marked
    problems = []
    after = sum(seen.bodies.values()) - bodies
    if after:
        problems.append(f"I5: {after} bodies ran after the stop mark was set")
    if seen.requests is not None and seen.requests - requests:
        problems.append(f"I5: {seen.requests - requests} model requests were sent after the stop mark was set")
    if door.stop_reason is not None and (seen.outcome is None or seen.outcome.reason is not door.stop_reason):
        got = None if seen.outcome is None else f"{seen.outcome.status}/{seen.outcome.reason}"
        problems.append(f"I5: the stopped run ended {got}, not {door.stop_reason}")
    return problems


def rows(modules: Iterable[Any]) -> list[Door]:
    """Every :class:`Door` of the ``DOORS`` lists of ``modules``; a row id twice is an error."""
    found: dict[str, Door] = {}
    for module in modules:
        for door in module.DOORS:
            if door.framework not in FRAMEWORKS:
                raise ValueError(f"{door.id}: framework must be one of {sorted(FRAMEWORKS)}")
            if door.id in found:
                raise ValueError(f"two rows are named {door.id}")
            found[door.id] = door
    return list(found.values())
