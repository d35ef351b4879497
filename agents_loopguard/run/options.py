"""Everything a guarded run can be told, in one object (as the Agents SDK's ``RunConfig``): :class:`RunOptions`.

Every entry point takes it as ``options=`` and, for convenience, its fields as keyword arguments (typed by
:class:`RunFields`); the keywords win. One object can be reused across runs and adapters.

>>> from agents_loopguard import Budget
>>> base = RunOptions(budget=Budget(model_turns=6, tool_executions=4), on_refusal="continue")
>>> RunOptions.merge(base, {"task_id": "ticket-7"}).task_id
'ticket-7'
>>> RunOptions.merge(None, {"max_turns": 3})
Traceback (most recent call last):
...
TypeError: unknown option 'max_turns' (the options are the fields of RunOptions)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar

from ..store.base import Store
from ..values.budget import Budget, Policy
from ..values.pricing import InputEstimator, Price
from ..values.pricing import estimate_input_tokens as _estimate_input_tokens
from .declarations import ToolSpec
from .durable import DurableSteps

if TYPE_CHECKING:
    from ..engine.core import Guard

__all__ = ["OnPause", "OnRefusal", "OutputVerifier", "Release", "RunFields", "RunFieldsBase", "RunOptions"]

OnRefusal = Literal["end", "continue", "raise"]
"""What a refused call does to the run: ``end`` it with the outcome (default), tell the model and ``continue``, or
end it and ``raise`` :class:`~agents_loopguard.GuardStopped` from the entry point."""
Release = Literal["none", "auto"]
"""What replaces a forced ``tool_choice`` once no work remains."""
OutputVerifier = Callable[[Any], Any]
"""``verify_output(final_output) -> bool | evidence`` (sync, or async in an async run): the application's check of a
final answer."""
OnPause = Callable[[Any, "Guard"], Any]
"""``on_pause(result, guard) -> pause_id | None`` (sync or async), called on an approval interruption before the
outcome is stored: persist the framework's run state with the task there; the returned id becomes
``Outcome.pause_id``."""

Options = TypeVar("Options", bound="RunOptions")


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """The options of a guarded run: the task it runs under and how the run treats refusals, final answers, prices
    and pauses. The same object serves every adapter (the raw loop's :class:`~agents_loopguard.function_calling.
    LoopOptions` adds its request options).

    >>> from agents_loopguard import Budget, MemoryStore
    >>> options = RunOptions(budget=Budget(model_turns=4, tool_executions=2), store=MemoryStore(), task_id="t-1")
    >>> options.task_id, options.on_refusal
    ('t-1', 'end')
    """

    # --- the task ---
    budget: Budget | None = None
    """The task's limits (or pass ``guard=``). There is no unlimited default. A task id already in the store keeps
    its own budget: limits change only by a recorded extension (``loopguard recover``)."""
    task_id: str | None = None
    """The task to run: a second run of the same id continues its counters (default: a new task)."""
    store: Store | None = None
    """Where the task's counters, ledger and outcome live (default: the persistent store ``loopguard`` reads,
    :func:`~agents_loopguard.store.defaults.default_store`)."""
    policy: Policy | None = None
    """Thresholds of the progress rules (default: :class:`~agents_loopguard.Policy`'s)."""
    secrets: Sequence[str] = ()
    """Values that never reach the store or the logs verbatim (redacted wherever they appear)."""
    guard: Guard | None = None
    """An existing :class:`~agents_loopguard.Guard` instead of ``budget``/``store``/``task_id``/``policy``/
    ``secrets`` (the two ways do not mix)."""
    # --- the run ---
    on_refusal: OnRefusal = "end"
    """A refused call ends the run (``"end"``), is reported to the model (``"continue"``: the budget still holds
    and the same call stays refused), or ends it and raises :class:`~agents_loopguard.GuardStopped`
    (``"raise"``)."""
    release_tool_choice: Release = "none"
    """What replaces a forcing ``tool_choice`` once no work remains (R12): ``"none"`` (the model answers) or
    ``"auto"``."""
    verify_output: OutputVerifier | None = None
    """``verify_output(final_output) -> bool | evidence``: lets a final answer complete the task. Without it only a
    tool's ``verify`` saying ``done`` completes it; any other final answer is ``partial/unverified_final``."""
    # --- money and tokens ---
    prices: Mapping[str, Price] | None = None
    """The price table of the models (:class:`~agents_loopguard.values.pricing.Price` per model name), required
    with ``Budget(cost=...)``: each model attempt reserves its worst case first and settles it with the reported
    usage."""
    estimate_input_tokens: InputEstimator = _estimate_input_tokens
    """``estimate(request) -> int``: a request's input tokens, for the worst case reserved before it is sent
    (default: a generous byte bound; give your own when requests carry images, audio or files)."""
    # --- approvals ---
    on_pause: OnPause | None = None
    """Called on an approval interruption; default: the pause is stored in the task's store, resumable once from
    any process (return ``None`` from your own to store nothing)."""
    who: str | None = None
    """Who continues a paused run through the framework's own door (recorded with the decisions)."""
    # --- durable engines ---
    durable: DurableSteps | None = None
    """Inside a durable engine's workflow: where the engine is (:class:`~agents_loopguard.run.DurableSteps`), so a
    replayed tool execution is answered from the task's record and a re-executed step counts once (R17). The
    durable adapters set it (:mod:`agents_loopguard.durable`)."""
    # --- operations over time ---
    family: str | None = None
    """The family a new task's metrics are summed under (a lowercase name such as ``"refunds"``); None derives it
    from the task id (:mod:`agents_loopguard.values.families`: uuid, numeric and hash-like ids are one family, free
    text is ``other``). Only a new task takes it: a task keeps the family it was created with."""
    # --- tools ---
    tools: Mapping[str, ToolSpec] = field(default_factory=dict)
    """The guard's declarations by tool name (:func:`~agents_loopguard.run.declare_tool`), for tools you do not
    wrap or cannot wrap (MCP tools, tools built by a framework, ``FunctionTool`` objects made elsewhere):
    ``tools={"refund": declare_tool("refund", kind="write", operation_id=..., verify=...)}``. A wrapper
    (``guarded_tool``, ``GuardedTool``...) that declares nothing takes the declaration by name; a tool declared by
    both must be given the same declaration, or the run is refused when it starts. A tool nobody declared is
    guarded as a read without ``verify``, except a tool an MCP server lists (:mod:`agents_loopguard.run.listed`):
    that one runs undeclared only as ``mcp_trusted`` and ``unguarded`` say."""
    mcp_trusted: Collection[str] = ()
    """The MCP servers (by name) whose annotations the guard believes: an undeclared tool such a server annotates
    ``readOnlyHint: true`` runs as a read. Any other undeclared MCP tool is a possible write and never runs
    (:mod:`agents_loopguard.run.listed`)."""
    unguarded: Mapping[str, str] = field(default_factory=dict)
    """The one opt-out of the fail-closed rule, in every adapter: tools the guard does not know that you let run
    anyway, each with why you accept that: ``unguarded={"web_search": "read-only search at the provider"}``.
    Without it such a tool is refused when the run starts (or, listed at run time, when it is called), with the
    fix named. With it:

    * a tool whose body the guard cannot reach (a hosted tool that runs at the model provider, an ADK code
      executor, a tool type the adapter does not know) runs outside the guard, inside the model requests that
      carry it, which are still counted; the opt-out is recorded when a run offers it;
    * a tool whose body the guard reaches but whose effect it does not know (an MCP tool nobody declared and no
      trusted server annotates read-only) runs as a read nobody verifies: each run of it is still reserved and
      counted, and recorded.

    The records are trace entries of kind ``unguarded`` (with the why; ``result_class`` ``outside`` or
    ``undeclared``), never tool executions. A tool both declared (``tools=``) and opted out is refused."""

    @classmethod
    def merge(cls: type[Options], options: RunOptions | None, fields: Mapping[str, Any]) -> Options:
        """``options`` (or the defaults) with ``fields`` replaced; an unknown field is a ``TypeError``. Options of
        a parent class (a :class:`RunOptions` given to an adapter with its own subclass) are carried over."""
        known = {f.name for f in dataclasses.fields(cls)}
        for name in fields:
            if name not in known:
                raise TypeError(f"unknown option {name!r} (the options are the fields of {cls.__name__})")
        if options is None:
            return cls(**fields)
        if not isinstance(options, RunOptions):
            raise TypeError(f"options= must be a {cls.__name__}, got {type(options).__name__}")
        if not isinstance(options, cls):
            inherited = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
            return cls(**{**inherited, **fields})
        return dataclasses.replace(options, **fields)

    def continuing(self: Options, guard: Guard | None, *, task_id: str, budget: Budget, store: Store) -> Options:
        """These options pointed at a stored task (a claimed pause's): its id, budget and store, with the policy
        and secrets of ``guard`` when the run was given one."""
        policy = self.policy or (guard.policy if guard is not None else None)
        secrets = self.secrets or (guard.secrets if guard is not None else ())
        return dataclasses.replace(
            self, guard=None, task_id=task_id, budget=budget, store=store, policy=policy, secrets=secrets
        )


class RunFieldsBase(TypedDict, total=False):
    """The fields of :class:`RunOptions` but ``tools``, as keyword arguments of an entry point whose own ``tools=``
    takes the tools themselves (the raw loop: declarations by name come with ``options=RunOptions(tools=...)``)."""

    budget: Budget | None
    task_id: str | None
    store: Store | None
    policy: Policy | None
    secrets: Sequence[str]
    guard: Guard | None
    on_refusal: OnRefusal
    release_tool_choice: Release
    verify_output: OutputVerifier | None
    prices: Mapping[str, Price] | None
    estimate_input_tokens: InputEstimator
    on_pause: OnPause | None
    who: str | None
    durable: DurableSteps | None
    family: str | None
    mcp_trusted: Collection[str]
    unguarded: Mapping[str, str]


class RunFields(RunFieldsBase, total=False):
    """The fields of :class:`RunOptions` as keyword arguments of an entry point (``**fields: Unpack[RunFields]``)."""

    tools: Mapping[str, ToolSpec]
