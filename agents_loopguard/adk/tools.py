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

from ..run import ToolSpec, Verify, declare_tool
from ..run.retry import NO_RETRY, RetryPolicy
from ..values.calls import Kind

__all__ = ["GuardedFunctionTool", "guarded_tool", "tool_spec"]

UNDECLARED = ToolSpec(declared=False)
"""What a tool nobody declared is guarded as: a read without a verify (it proves no progress)."""


class GuardedFunctionTool(FunctionTool):
    """ADK's ``FunctionTool`` with its guard declaration (:attr:`loopguard`)."""

    def __init__(
        self,
        func: Callable[..., Any],
        spec: ToolSpec,
        *,
        require_confirmation: bool | Callable[..., bool] = False,
    ) -> None:
        super().__init__(func, require_confirmation=require_confirmation)
        self.loopguard = spec


def guarded_tool(
    func: Callable[..., Any],
    *,
    kind: Kind = "read",
    operation_id: Callable[[dict[str, Any]], Any] | None = None,
    verify: Verify | None = None,
    retry: RetryPolicy = NO_RETRY,
    max_executions: int | None = None,
    require_confirmation: bool | Callable[..., bool] = False,
    volatile_args: tuple[str, ...] = (),
) -> GuardedFunctionTool:
    """``FunctionTool(func, require_confirmation=...)`` with its guard declaration (the same rules as every
    adapter's, :func:`~agents_loopguard.run.declare_tool`): a write needs ``operation_id`` and ``verify``.

    >>> def refund(order: int) -> str:
    ...     '''Refund an order.'''
    ...     return "refunded"
    >>> guarded_tool(refund, kind="write")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: write tool 'refund' needs operation_id=callable(args) -> str: ...
    """
    name = getattr(func, "__name__", "tool")
    spec = declare_tool(
        name,
        kind=kind,
        operation_id=operation_id,
        verify=verify,
        retry=retry,
        max_executions=max_executions,
        volatile_args=volatile_args,
    )
    return GuardedFunctionTool(func, spec, require_confirmation=require_confirmation)


def tool_spec(tool: BaseTool) -> ToolSpec:
    """The guard declaration of an ADK tool (a tool nobody declared is guarded as an unverified read)."""
    spec = getattr(tool, "loopguard", None)
    return spec if isinstance(spec, ToolSpec) else UNDECLARED
