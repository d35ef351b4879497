"""Guarded function tools: a drop-in for ``@function_tool`` that declares what the guard needs to know.

The SDK builds the tool exactly as ``function_tool`` would (name, description, JSON schema, strictness, approval,
timeout, guardrails: every keyword is passed through). The guard sits in two places of the invocation:

* around ``on_invoke_tool`` (outside the SDK's failure handler): malformed JSON never reaches the SDK's parser but
  the engine, as an ``invalid_call``;
* right before the body, after the SDK validated the arguments against the schema: the execution is reserved there,
  so a refused call, or one the schema rejects, never runs the body and never uses the budget.

A tool finds the run it belongs to through a contextvar set by the entry points (``run_guarded`` and friends), which
asyncio copies into parallel tool calls and into the thread of a sync tool.

The guard recognises itself inside another invoker: a guarded tool is a :class:`GuardedFunctionTool`, whose
declaration is a field, so a copy whose ``on_invoke_tool`` was replaced (``dataclasses.replace(tool,
on_invoke_tool=wrapper)``, the logging idiom) is still known. The run guards the wrapper as the tool's body (one
reservation, with the tool's declaration, taken before the wrapper runs: a wrapper that never calls the guarded
invoker is itself the body), and the guarded invoker it calls runs under that reservation. Called again under the
same reservation (a retry wrapper), it is a new attempt, reserved on its own: a read is counted again, a write whose
first attempt is still unsettled is refused ``unknown_commit``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import json
import weakref
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, cast, overload

from agents import (
    FunctionTool,
    function_tool,
)
from agents.exceptions import UserError
from agents.tool import ToolFunction
from agents.tool_context import ToolContext

from ..engine.core import Kind
from ..run import UNDECLARED, Executed, GuardedRun, RetryPolicy, ToolSpec, Verify, declare_tool
from ..values.probes import Probe
from ._internal import ACTIVE_RUN, execute, outside_a_run

__all__ = ["GuardedFunctionTool", "guard_tool", "guarded_tool", "tool_spec"]
_SPEC = "__loopguard_spec__"
_FUNCTION = "__loopguard_function__"
_INNER = "__loopguard_inner__"
_ORIGINAL = "__loopguard_original__"
_BIND = "__agents_bind_function_tool__"
"""The SDK's hook for an invoker to follow its tool: ``FunctionTool.__post_init__`` (run by ``dataclasses.replace``
and ``copy.copy``) rebinds the invoker to the new tool, so a copy's failure policy is the copy's own."""


_OURS: weakref.WeakSet[Callable[..., Any]] = weakref.WeakSet()
"""The invokers this module made (a wrapper made with ``functools.wraps`` copies their attributes, not this)."""


@dataclass
class GuardedFunctionTool(FunctionTool):
    """A ``FunctionTool`` with the guard in its invoker (what :func:`guarded_tool` and :func:`guard_tool` return).
    Its declaration is a field, so it survives ``dataclasses.replace`` and ``copy.copy`` of the tool, also when the
    copy's invoker was replaced by one that wraps the guarded invoker."""

    loopguard_declaration: ToolSpec | None = field(default=None, kw_only=True, repr=False)


@dataclass
class _Invocation:
    """Handed from the ``on_invoke_tool`` wrapper to the body shim of the same call (same task, same context)."""

    run: GuardedRun
    spec: ToolSpec
    tool: str
    args: dict[str, Any]
    call_id: str | None
    entered: bool = False
    frame: _Frame | None = None
    """The reservation of the invoker that wraps this call, which the call runs under (see :class:`_Frame`)."""


_INVOCATION: ContextVar[_Invocation | None] = ContextVar("agents_loopguard_invocation", default=None)


@dataclass
class _Frame:
    """An opaque invoker running under its reservation: the guarded invoker it calls for the same tool call and
    declaration runs under it once (one reservation for the wrapper and the guarded tool inside it)."""

    run: GuardedRun
    call_id: str | None
    spec: ToolSpec
    adopted: bool = False
    error: Exception | None = None
    """The guarded body's exception, when it failed inside the wrapper: the failure is the reserved execution's."""
    answered: bool = False
    output: Any = None
    """What the wrapper returned after that failure (the SDK's failure text): what the model reads."""

    def adopts(self, run: GuardedRun, call_id: str | None, spec: ToolSpec) -> bool:
        """True, once, for the guarded invocation of the same call this frame reserved."""
        if self.adopted or self.run is not run or self.call_id != call_id or self.spec != spec:
            return False
        self.adopted = True
        return True


_FRAME: ContextVar[_Frame | None] = ContextVar("agents_loopguard_frame", default=None)


async def run_call(
    run: GuardedRun, spec: ToolSpec, tool: str, args: dict[str, Any], call_id: str | None, body: Any
) -> Any:
    """Propose, then execute under the guarded run: the output, the stored output of a committed write, or what the
    model reads instead. The body's own exception is re-raised, so the tool's failure policy decides the text."""
    call = run.propose(spec, tool, args, call_id)
    if isinstance(call, Executed):
        return call.message
    executed = await execute(run, spec, call, body)
    if executed.error is not None:
        raise executed.error
    return executed.output if executed.message is None else executed.message


def _shim(func: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """An async function with ``func``'s signature, for ``function_tool``: the guard runs on the event loop right
    before the body; a sync body still runs in a worker thread, as the SDK would run it."""
    is_async = inspect.iscoroutinefunction(func)

    @functools.wraps(func)
    async def guarded_body(*args: Any, **kwargs: Any) -> Any:
        invocation = _INVOCATION.get()

        async def body() -> Any:
            if is_async:
                return await func(*args, **kwargs)
            return await asyncio.to_thread(func, *args, **kwargs)

        if invocation is None or invocation.entered:  # called directly, not through the SDK
            return await body()
        invocation.entered = True
        if invocation.frame is not None:  # under the reservation of the invoker that wraps this tool
            try:
                return await body()
            except Exception as exc:
                invocation.frame.error = exc
                raise
        return await run_call(
            invocation.run, invocation.spec, invocation.tool, invocation.args, invocation.call_id, body
        )

    setattr(guarded_body, _ORIGINAL, func)
    return guarded_body


def _function_of(tool: FunctionTool) -> Callable[..., Any] | None:
    """The Python function behind a tool made by ``function_tool`` (or by us), if there is one."""
    if _is_ours(tool.on_invoke_tool):
        known = getattr(tool.on_invoke_tool, _FUNCTION, None)
        return cast(Callable[..., Any], known) if known is not None else None  # None: around an opaque invoker
    try:
        wrapped = tool.__wrapped__
    except AttributeError:
        return None
    original = getattr(wrapped, _ORIGINAL, wrapped)
    return cast(Callable[..., Any], original) if inspect.isroutine(original) else None


def _guarded_invoker(
    inner: Callable[[ToolContext[Any], str], Awaitable[Any]],
    spec: ToolSpec,
    *,
    function: Callable[..., Any] | None,
) -> Callable[[ToolContext[Any], str], Awaitable[Any]]:
    """The ``on_invoke_tool`` of a guarded tool (its first parameter is annotated ``ToolContext`` on purpose: the SDK
    passes a bare ``RunContextWrapper``, without the call id, to a wrapper annotated that way).

    ``function`` set: ``inner`` is the SDK invoker of the body shim, and the guard runs inside the shim.
    ``function`` None (an opaque FunctionTool: agents as tools, MCP, hand-made tools): ``inner`` is the body.

    The SDK's invoker applies the failure policy of the tool it is bound to; this invoker follows the tool too
    (:data:`_BIND`), so the policy is read from the tool being invoked, a copy made after guarding included.
    """

    async def on_invoke_tool(ctx: ToolContext[Any], args_json: str) -> Any:
        run = ACTIVE_RUN.get()
        name = getattr(ctx, "tool_name", None) or "tool"
        if run is None:
            raise outside_a_run(f"guarded tool {name!r}")
        call_id = getattr(ctx, "tool_call_id", None)
        declared = run.declaration(name, spec)  # the wrapper's own, or the run's by name (RunOptions.tools)
        frame = _FRAME.get()
        adopted = frame if frame is not None and frame.adopts(run, call_id, declared) else None
        if adopted is not None and function is None:
            return await _adopted(adopted, inner(ctx, args_json))
        args = run.parse(declared, name, args_json)
        if isinstance(args, Executed):
            return args.message
        if function is None:
            return await _run_framed(run, declared, name, args, call_id, lambda: inner(ctx, args_json))
        invocation = _Invocation(run, declared, name, args, call_id, frame=adopted)
        token = _INVOCATION.set(invocation)
        try:
            output = await inner(ctx, args_json)
        except Exception:
            if not invocation.entered:  # the SDK's schema validation raised: the model reads the refusal
                return _schema_rejected(run, declared, name).message
            raise
        finally:
            _INVOCATION.reset(token)
        if not invocation.entered:  # the SDK's schema validation refused the arguments; the body did not run
            return _schema_rejected(run, declared, name).message  # the refusal, not the SDK's generic failure text
        return output

    def bind(tool: FunctionTool) -> Callable[[ToolContext[Any], str], Awaitable[Any]]:
        """This invoker for ``tool`` (called by ``FunctionTool.__post_init__``): the inner invoker rebound to it.
        Called through a wrapper that copied this invoker's attributes (``functools.wraps``): the wrapper stays."""
        if tool.on_invoke_tool is not on_invoke_tool:
            return tool.on_invoke_tool
        copied = getattr(inner, _SPEC, None) is not None and not _is_ours(inner)  # a wrapper's copy of our hook
        rebind = None if copied else getattr(inner, _BIND, None)
        bound = rebind(tool) if callable(rebind) else inner
        return on_invoke_tool if bound is inner else _guarded_invoker(bound, spec, function=function)

    # Resolved annotations: the SDK reads them on every invocation (get_type_hints), and strings would be eval'ed.
    on_invoke_tool.__annotations__ = {"ctx": ToolContext, "args_json": str, "return": Any}
    setattr(on_invoke_tool, _SPEC, spec)
    setattr(on_invoke_tool, _FUNCTION, function)
    setattr(on_invoke_tool, _INNER, inner)
    setattr(on_invoke_tool, _BIND, bind)
    _OURS.add(on_invoke_tool)
    return on_invoke_tool


async def _run_framed(
    run: GuardedRun,
    spec: ToolSpec,
    tool: str,
    args: dict[str, Any],
    call_id: str | None,
    invoke: Callable[[], Awaitable[Any]],
) -> Any:
    """:func:`run_call` for an opaque invoker (the body): each attempt runs in a frame that the guarded invoker of
    the same call inside it joins. When the guarded body inside failed and the wrapper answered anyway (the SDK's
    failure text), the failure is recorded as the execution's and the model reads that answer."""
    frames: list[_Frame] = []

    async def body() -> Any:
        frame = _Frame(run, call_id, spec)
        frames.append(frame)
        token = _FRAME.set(frame)
        try:
            output = await invoke()
        finally:
            _FRAME.reset(token)
        if frame.error is not None:
            frame.answered, frame.output = True, output
            raise frame.error
        return output

    try:
        return await run_call(run, spec, tool, args, call_id, body)
    except Exception as exc:
        last = frames[-1] if frames else None
        if last is not None and exc is last.error and last.answered:
            return last.output
        raise


async def _adopted(frame: _Frame, invoked: Awaitable[Any]) -> Any:
    """An opaque guarded invoker run under the reservation of the invoker that wraps it."""
    try:
        return await invoked
    except Exception as exc:
        frame.error = exc
        raise


def _is_ours(invoker: Any) -> bool:
    try:
        return invoker in _OURS
    except TypeError:  # not weakly referenceable: not one of ours
        return False


def _schema_rejected(run: GuardedRun, spec: ToolSpec, name: str) -> Executed:
    return run.refuse_invalid(name, spec.kind, f"the arguments for {name!r} do not match its JSON schema")


def tool_spec(tool: FunctionTool) -> ToolSpec | None:
    """The guard declaration of a guarded tool, or ``None`` for a plain one.

    >>> from agents import function_tool
    >>> tool_spec(function_tool(lambda: "x", name_override="plain")) is None
    True
    """
    spec = getattr(tool.on_invoke_tool, _SPEC, None) if _is_ours(tool.on_invoke_tool) else None
    if spec is None and isinstance(tool, GuardedFunctionTool):  # its invoker was replaced (wrapped)
        spec = tool.loopguard_declaration
    return spec if isinstance(spec, ToolSpec) else None


@overload
def guarded_tool(
    func: ToolFunction[...],
    declaration: ToolSpec | None = None,
    /,
    *,
    kind: Kind | None = None,
    operation_id: Callable[[dict[str, Any]], str] | None = None,
    verify: Verify | None = None,
    max_executions: int | None = None,
    retry: RetryPolicy | None = None,
    volatile_args: tuple[str, ...] | None = None,
    probe: Probe | None = None,
    progress_key: str | None = None,
    **function_tool_options: Any,
) -> FunctionTool: ...


@overload
def guarded_tool(
    declaration: ToolSpec | None = None,
    /,
    *,
    kind: Kind | None = None,
    operation_id: Callable[[dict[str, Any]], str] | None = None,
    verify: Verify | None = None,
    max_executions: int | None = None,
    retry: RetryPolicy | None = None,
    volatile_args: tuple[str, ...] | None = None,
    probe: Probe | None = None,
    progress_key: str | None = None,
    **function_tool_options: Any,
) -> Callable[[ToolFunction[...]], FunctionTool]: ...


def guarded_tool(
    func: ToolFunction[...] | ToolSpec | None = None,
    declaration: ToolSpec | None = None,
    /,
    *,
    kind: Kind | None = None,
    operation_id: Callable[[dict[str, Any]], str] | None = None,
    verify: Verify | None = None,
    max_executions: int | None = None,
    retry: RetryPolicy | None = None,
    volatile_args: tuple[str, ...] | None = None,
    probe: Probe | None = None,
    progress_key: str | None = None,
    **function_tool_options: Any,
) -> FunctionTool | Callable[[ToolFunction[...]], FunctionTool]:
    """``@function_tool`` with a guard declaration: the guard's declaration, and every ``function_tool`` keyword
    (``name_override``, ``needs_approval``, ``timeout``, ``failure_error_function``...) passed through as is.

    The declaration is one :class:`~agents_loopguard.run.ToolSpec` (positional, reusable across tools and adapters:
    ``declare_tool(name, ...)`` checks it) or its fields as keywords (they win over the object's):

    Args:
        kind: ``read`` (default), ``write``, ``poll`` (asks about an async job) or ``page`` (one page of a listing).
        operation_id: for writes (required): ``operation_id(args) -> str``, the stable business action the write
            performs ("confirm order 42 at version 3"), derived from the arguments, never the model's call id.
        verify: ``verify(args, output) -> evidence`` (sync or async): the application's trusted check. Evidence is an
            :class:`~agents_loopguard.Evidence` or a mapping with ``revision`` (never goes back), ``done`` and
            ``effect`` (``none``; writes: ``committed`` / ``not_committed`` / ``unknown``). Required for writes.
            Without it a read proves no progress (revision unchanged), so the stall rule bounds it.
        max_executions: executions of this tool allowed for the whole task (``None``: only the task's budget).
        retry: retries of a transient failure verified to have had no effect (none by default).
        volatile_args: arguments that are no part of the action (a timestamp, a request id): left out of the
            call's identity, so near-duplicates are the same call (never an argument that changes the meaning).
        probe: for writes: ``probe(operation_id, args)`` (sync or async), a read-only question to the receiver by
            the operation's stable id, asked when the write's answer was lost: ``committed(result)``,
            ``NOT_COMMITTED`` or ``UNKNOWN`` (:mod:`agents_loopguard.values.probes`).
        progress_key: whose revision ``verify`` reports (default: the tool's own); tools whose verifies count the
            same thing share a key. Each key's revision is compared only with its own last one.
        **function_tool_options: ``function_tool``'s own keywords. ``failure_error_function``: not given, the SDK's
            default message; ``None``, the body's exception is raised and the run ends with the failure the guard
            recorded. It is read from the tool at call time, so ``dataclasses.replace(tool, ...)`` with another
            policy behaves as the copy.

    A refused call never runs the body; a committed write returns its stored result without running it.

    >>> @guarded_tool(kind="write", operation_id=lambda a: f"refund-{a['order']}",
    ...               verify=lambda a, out: {"revision": 1, "done": True, "effect": "committed"},
    ...               max_executions=3, needs_approval=True)
    ... def refund(order: int) -> str:
    ...     '''Refund an order.'''
    ...     return f"refunded {order}"
    >>> refund.name, refund.params_json_schema["required"], refund.needs_approval
    ('refund', ['order'], True)
    >>> tool_spec(refund).kind, tool_spec(refund).max_executions
    ('write', 3)
    """
    if isinstance(func, ToolSpec):  # @guarded_tool(spec, ...): the declaration came first
        func, declaration = None, func
    fields: dict[str, Any] = {"kind": kind, "operation_id": operation_id, "verify": verify, "retry": retry}
    fields.update(max_executions=max_executions, volatile_args=volatile_args, probe=probe, progress_key=progress_key)

    def decorate(the_func: ToolFunction[...]) -> FunctionTool:
        name = function_tool_options.get("name_override") or str(getattr(the_func, "__name__", "tool"))
        return _decorated(the_func, _declared(name, declaration, fields), function_tool_options)

    if func is not None:
        return decorate(func)
    return decorate


def _declared(name: str, declaration: ToolSpec | None, fields: dict[str, Any]) -> ToolSpec:
    """The tool's checked declaration: ``declaration``'s fields, replaced by the keywords given; neither: the tool
    declares nothing (a declaration by name in ``RunOptions.tools`` applies, else it is an undeclared read)."""
    given = {key: value for key, value in fields.items() if value is not None}
    if declaration is None and not given:
        return UNDECLARED
    base = declaration if declaration is not None else ToolSpec()
    merged = {
        "kind": base.kind,
        "operation_id": base.operation_id,
        "verify": base.verify,
        "retry": base.retry,
        "max_executions": base.max_executions,
        "volatile_args": base.volatile_args,
        "probe": base.probe,
        "progress_key": base.progress_key,
        **given,
    }
    return declare_tool(name, **merged)


def _decorated(func: Callable[..., Any], spec: ToolSpec, options: dict[str, Any]) -> FunctionTool:
    """``function_tool(func, **options)`` with the guard in it (around the body shim of a function; around the whole
    invoker of a callable object, which the SDK adapts itself)."""
    if isinstance(func, functools.partial):  # as function_tool: a partial hides its contract
        raise UserError(
            "Unsupported callable object: function_tool does not infer functools.partial contracts. "
            "Use an explicit wrapper function."
        )
    if not inspect.isroutine(func):
        return _guard(function_tool(func, **options), spec)
    if options.get("timeout") is not None and not inspect.iscoroutinefunction(func):
        raise ValueError("FunctionTool timeout_seconds is only supported for async @function_tool handlers.")
    built = function_tool(_shim(func), **options)
    return _with_guard(built, _guarded_invoker(built.on_invoke_tool, spec, function=func), spec)


def _with_guard(
    tool: FunctionTool, invoker: Callable[[ToolContext[Any], str], Awaitable[Any]], spec: ToolSpec
) -> FunctionTool:
    """A copy of ``tool`` with the guarded ``invoker``: a :class:`GuardedFunctionTool` carrying ``spec`` (an
    application's own subclass of ``FunctionTool`` keeps its class, through ``dataclasses.replace``)."""
    if type(tool) not in (FunctionTool, GuardedFunctionTool):
        return dataclasses.replace(tool, on_invoke_tool=invoker)
    fields = {f.name: getattr(tool, f.name) for f in dataclasses.fields(FunctionTool) if f.init}
    return GuardedFunctionTool(**{**fields, "on_invoke_tool": invoker}, loopguard_declaration=spec)


def guard_tool(
    tool: FunctionTool,
    declaration: ToolSpec | None = None,
    /,
    *,
    kind: Kind | None = None,
    operation_id: Callable[[dict[str, Any]], str] | None = None,
    verify: Verify | None = None,
    max_executions: int | None = None,
    retry: RetryPolicy | None = None,
    volatile_args: tuple[str, ...] | None = None,
    probe: Probe | None = None,
    progress_key: str | None = None,
) -> FunctionTool:
    """Guard a ``FunctionTool`` that already exists (made by ``function_tool``, ``agent.as_tool()``, by hand...).

    Returns a copy (``dataclasses.replace``): same name, description, schema, approval, timeout, guardrails and
    failure policy; the original is untouched. Arguments as in :func:`guarded_tool`.

    >>> from agents import function_tool
    >>> @function_tool
    ... def search(query: str) -> str:
    ...     '''Search the catalogue.'''
    ...     return "no hits"
    >>> guarded = guard_tool(search, kind="read", max_executions=5)
    >>> guarded.name, guarded.params_json_schema == search.params_json_schema, tool_spec(search) is None
    ('search', True, True)
    >>> tool_spec(guarded).max_executions
    5
    """
    fields: dict[str, Any] = {"kind": kind, "operation_id": operation_id, "verify": verify}
    fields.update(max_executions=max_executions, volatile_args=volatile_args, probe=probe, progress_key=progress_key)
    return _guard(tool, _declared(tool.name, declaration, {**fields, "retry": retry}))


_REBUILT: weakref.WeakKeyDictionary[Callable[..., Any], dict[str, FunctionTool]] = weakref.WeakKeyDictionary()
"""function -> the function_tool built around its body shim, per tool configuration that shapes the invoker."""


def _rebuilt(function: Callable[..., Any], tool: FunctionTool) -> FunctionTool:
    """``function_tool`` around the body shim of ``function`` (cached: building a schema costs a millisecond)."""
    output_schema = json.dumps(tool.output_json_schema, sort_keys=True) if tool.output_json_schema else ""
    key = f"{tool.name}|{tool.strict_json_schema}|{tool.allowed_callers}|{output_schema}"
    try:
        built = _REBUILT.setdefault(function, {})
    except TypeError:  # not weakly referenceable: build every time
        built = {}
    if key not in built:
        built[key] = function_tool(
            _shim(function),
            name_override=tool.name,
            use_docstring_info=False,
            strict_mode=tool.strict_json_schema,
            allowed_callers=tool.allowed_callers,
            output_json_schema=tool.output_json_schema,
        )
    return built[key]


def _guard(tool: FunctionTool, spec: ToolSpec) -> FunctionTool:
    if not isinstance(tool, FunctionTool):
        raise TypeError(f"guard_tool needs a FunctionTool, got {type(tool).__name__}")
    function = _function_of(tool)
    if function is not None:  # the copy binds the rebuilt invoker to itself: its own failure policy formats errors
        invoker = _guarded_invoker(_rebuilt(function, tool).on_invoke_tool, spec, function=function)
    else:
        ours = _is_ours(tool.on_invoke_tool)
        inner = getattr(tool.on_invoke_tool, _INNER, tool.on_invoke_tool) if ours else tool.on_invoke_tool
        invoker = _guarded_invoker(inner, spec, function=None)
    return _with_guard(tool, invoker, spec)


def guard_undeclared(tool: FunctionTool) -> FunctionTool:
    """A tool found in the agent graph: as it is when its invoker is the guard's; a guarded tool whose invoker was
    replaced (wrapped), guarded with its declaration around the new invoker (which the guarded invoker inside it
    then joins); any other, guarded as a read without evidence (counted, bounded by the rules)."""
    if _is_ours(tool.on_invoke_tool):
        return tool
    return _guard(tool, tool_spec(tool) or UNDECLARED)


def is_guarded(tool: Any) -> bool:
    """True for a function tool whose invoker is the guard's (its body is reserved by the tool itself)."""
    return isinstance(tool, FunctionTool) and _is_ours(tool.on_invoke_tool)
