"""ADK function tools that carry their guard declaration: :func:`guarded_tool` is ADK's ``FunctionTool`` with the
tool's kind, a write's operation id, the application's ``verify``, its retries and its own limit.

>>> def lookup(order: int) -> str:
...     '''Look an order up.'''
...     return "shipped"
>>> tool = guarded_tool(lookup, verify=lambda args, out: {"revision": 1, "done": False, "effect": "none"})
>>> tool.name, tool_spec(tool).kind
('lookup', 'read')
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.adk.tools.base_tool import BaseTool
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext

from ..run import UNDECLARED, ToolSpec, Verify, declare_tool
from ..run.retry import NO_RETRY, RetryPolicy
from ..values.calls import Kind
from ..values.probes import Probe
from .calls import active, run_call
from .wire import misfit

__all__ = ["GuardedFunctionTool", "guarded_tool", "tool_spec"]


class GuardedFunctionTool(FunctionTool):
    """ADK's ``FunctionTool`` with its guard declaration (:attr:`loopguard`), reserved at its body: under the
    plugin, ``run_async`` proposes and reserves the call with the arguments the body gets (after every callback
    and ADK's confirmation gate), runs it, verifies and settles it. Outside a guarded run it is ADK's own tool."""

    def __init__(
        self,
        func: Callable[..., Any],
        spec: ToolSpec,
        *,
        require_confirmation: bool | Callable[..., bool] = False,
    ) -> None:
        super().__init__(func, require_confirmation=require_confirmation)
        self.loopguard = spec
        self._misfit = misfit(self)

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        body = super().run_async
        state = active(tool_context)
        if state is None:
            return await body(args=args, tool_context=tool_context)
        spec = state.run.declaration(self.name, self.loopguard)
        return await run_call(
            state, self.name, spec, args, tool_context, self._misfit, lambda: body(args=args, tool_context=tool_context)
        )


def guarded_tool(
    func: Callable[..., Any],
    *,
    kind: Kind | None = None,
    operation_id: Callable[[dict[str, Any]], Any] | None = None,
    verify: Verify | None = None,
    retry: RetryPolicy = NO_RETRY,
    max_executions: int | None = None,
    require_confirmation: bool | Callable[..., bool] = False,
    volatile_args: tuple[str, ...] = (),
    probe: Probe | None = None,
    progress_key: str | None = None,
) -> GuardedFunctionTool:
    """``FunctionTool(func, require_confirmation=...)`` with its guard declaration (the same rules as every
    adapter's, :func:`~agents_loopguard.run.declare_tool`): a write needs ``operation_id`` and ``verify``, and may
    have a ``probe`` that asks the receiver about it when its answer was lost. Without
    any declaration keyword the tool declares nothing: a declaration by name (``RunOptions.tools``) applies, else
    it is guarded as a read without ``verify``.

    >>> def refund(order: int) -> str:
    ...     '''Refund an order.'''
    ...     return "refunded"
    >>> guarded_tool(refund, kind="write")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: write tool 'refund' needs operation_id=callable(args) -> str: ...
    """
    name = getattr(func, "__name__", "tool")
    given = kind is not None or operation_id is not None or verify is not None or max_executions is not None
    given = given or bool(volatile_args) or probe is not None or progress_key is not None
    spec = UNDECLARED
    if given or retry is not NO_RETRY:
        spec = declare_tool(
            name,
            kind=kind or "read",
            operation_id=operation_id,
            verify=verify,
            retry=retry,
            max_executions=max_executions,
            volatile_args=volatile_args,
            probe=probe,
            progress_key=progress_key,
        )
    return GuardedFunctionTool(func, spec, require_confirmation=require_confirmation)


def tool_spec(tool: BaseTool) -> ToolSpec:
    """The guard declaration of an ADK tool (a tool nobody declared is guarded as an unverified read)."""
    spec = getattr(tool, "loopguard", None)
    return spec if isinstance(spec, ToolSpec) else UNDECLARED
