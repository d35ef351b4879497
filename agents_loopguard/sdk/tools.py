"""Guarded function tools: a drop-in for ``@function_tool`` that declares what the guard needs to know.

The SDK builds the tool exactly as ``function_tool`` would (name, description, JSON schema, strictness, approval,
timeout, guardrails: every keyword is passed through). The guard sits in two places of the invocation:

* around ``on_invoke_tool`` (outside the SDK's failure handler): malformed JSON never reaches the SDK's parser but
  the engine, as an ``invalid_call``;
* right before the body, after the SDK validated the arguments against the schema: the execution is reserved there,
  so a refused call, or one the schema rejects, never runs the body and never uses the budget.

A tool finds the run it belongs to through a contextvar set by the entry points (``run_guarded`` and friends), which
asyncio copies into parallel tool calls and into the thread of a sync tool.
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
from dataclasses import dataclass
from typing import Any, cast, overload

from agents import (
    FunctionTool,
    function_tool,
)
from agents.exceptions import UserError
from agents.tool import ToolFunction
from agents.tool_context import ToolContext

from ..engine.core import Kind
from ..run import Executed, GuardedRun, RetryPolicy, ToolSpec, Verify, declare_tool
from ._internal import ACTIVE_RUN, execute

__all__ = ["guard_tool", "guarded_tool", "tool_spec"]
_SPEC = "__loopguard_spec__"
_FUNCTION = "__loopguard_function__"
_INNER = "__loopguard_inner__"
_ORIGINAL = "__loopguard_original__"
_BIND = "__agents_bind_function_tool__"
"""The SDK's hook for an invoker to follow its tool: ``FunctionTool.__post_init__`` (run by ``dataclasses.replace``
and ``copy.copy``) rebinds the invoker to the new tool, so a copy's failure policy is the copy's own."""


@dataclass
class _Invocation:
    """Handed from the ``on_invoke_tool`` wrapper to the body shim of the same call (same task, same context)."""

    run: GuardedRun
    spec: ToolSpec
    tool: str
    args: dict[str, Any]
    call_id: str | None
    entered: bool = False


_INVOCATION: ContextVar[_Invocation | None] = ContextVar("agents_loopguard_invocation", default=None)


async def _run_call(
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
        return await _run_call(
            invocation.run, invocation.spec, invocation.tool, invocation.args, invocation.call_id, body
        )

    setattr(guarded_body, _ORIGINAL, func)
    return guarded_body


def _function_of(tool: FunctionTool) -> Callable[..., Any] | None:
    """The Python function behind a tool made by ``function_tool`` (or by us), if there is one."""
    known = getattr(tool.on_invoke_tool, _FUNCTION, None)
    if known is not None:
        return cast(Callable[..., Any], known)
    if getattr(tool.on_invoke_tool, _SPEC, None) is not None:
        return None  # guarded already, around an opaque invoker
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
            raise UserError(
                f"guarded tool {name!r} was invoked outside a guarded run: run the agent with "
                "agents_loopguard.sdk.run_guarded (or run_guarded_sync / run_guarded_streamed)"
            )
        call_id = getattr(ctx, "tool_call_id", None)
        args = run.parse(spec, name, args_json)
        if isinstance(args, Executed):
            return args.message
        if function is None:
            return await _run_call(run, spec, name, args, call_id, lambda: inner(ctx, args_json))
        invocation = _Invocation(run, spec, name, args, call_id)
        token = _INVOCATION.set(invocation)
        try:
            output = await inner(ctx, args_json)
        except Exception:
            if not invocation.entered:  # the SDK's schema validation raised: the model reads the refusal
                return _schema_rejected(run, spec, name).message
            raise
        finally:
            _INVOCATION.reset(token)
        if not invocation.entered:  # the SDK's schema validation refused the arguments; the body did not run
            return _schema_rejected(run, spec, name).message  # the refusal, not the SDK's generic failure text
        return output

    def bind(tool: FunctionTool) -> Callable[[ToolContext[Any], str], Awaitable[Any]]:
        """This invoker for ``tool`` (called by ``FunctionTool.__post_init__``): the inner invoker rebound to it."""
        rebind = getattr(inner, _BIND, None)
        bound = rebind(tool) if callable(rebind) else inner
        return on_invoke_tool if bound is inner else _guarded_invoker(bound, spec, function=function)

    # Resolved annotations: the SDK reads them on every invocation (get_type_hints), and strings would be eval'ed.
    on_invoke_tool.__annotations__ = {"ctx": ToolContext, "args_json": str, "return": Any}
    setattr(on_invoke_tool, _SPEC, spec)
    setattr(on_invoke_tool, _FUNCTION, function)
    setattr(on_invoke_tool, _INNER, inner)
    setattr(on_invoke_tool, _BIND, bind)
    return on_invoke_tool


def _schema_rejected(run: GuardedRun, spec: ToolSpec, name: str) -> Executed:
    return run.refuse_invalid(name, spec.kind, f"the arguments for {name!r} do not match its JSON schema")


def tool_spec(tool: FunctionTool) -> ToolSpec | None:
    """The guard declaration of a guarded tool, or ``None`` for a plain one.

    >>> from agents import function_tool
    >>> tool_spec(function_tool(lambda: "x", name_override="plain")) is None
    True
    """
    spec = getattr(tool.on_invoke_tool, _SPEC, None)
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
    fields.update(max_executions=max_executions, volatile_args=volatile_args)

    def decorate(the_func: ToolFunction[...]) -> FunctionTool:
        name = function_tool_options.get("name_override") or str(getattr(the_func, "__name__", "tool"))
        return _decorated(the_func, _declared(name, declaration, fields), function_tool_options)

    if func is not None:
        return decorate(func)
    return decorate


def _declared(name: str, declaration: ToolSpec | None, fields: dict[str, Any]) -> ToolSpec:
    """The tool's checked declaration: ``declaration``'s fields, replaced by the keywords given."""
    base = declaration if declaration is not None else ToolSpec()
    given = {key: value for key, value in fields.items() if value is not None}
    merged = {
        "kind": base.kind,
        "operation_id": base.operation_id,
        "verify": base.verify,
        "retry": base.retry,
        "max_executions": base.max_executions,
        "volatile_args": base.volatile_args,
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
    return dataclasses.replace(built, on_invoke_tool=_guarded_invoker(built.on_invoke_tool, spec, function=func))


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
    fields.update(max_executions=max_executions, volatile_args=volatile_args)
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
        inner = getattr(tool.on_invoke_tool, _INNER, tool.on_invoke_tool)
        invoker = _guarded_invoker(inner, spec, function=None)
    return dataclasses.replace(tool, on_invoke_tool=invoker)


def guard_undeclared(tool: FunctionTool) -> FunctionTool:
    """A plain tool found in the agent graph: guarded as a read without evidence (counted, bounded by the rules)."""
    if tool_spec(tool) is not None:
        return tool
    return _guard(tool, ToolSpec(kind="read", declared=False))


def is_guarded(tool: Any) -> bool:
    return isinstance(tool, FunctionTool) and tool_spec(tool) is not None
