"""Every kind of tool the Agents SDK runs, and where the guard reaches its body.

* ``FunctionTool``: the guard is in its invoker (:mod:`.tools`), right before the body.
* The SDK's own local tools, whose body is an executor of yours: ``ShellTool`` (local), ``LocalShellTool``,
  ``CustomTool``, ``ApplyPatchTool``. The guarded copy of the agent wraps the executor (the shell executor, the
  custom tool's invoker, each operation of the patch editor), so each execution is reserved right before your code
  runs, with its real arguments, and a committed write declared by name (``RunOptions.tools``) answers from the
  ledger without running again.
* ``ComputerTool``: reserved by the run hooks at ``on_tool_start``, right before the SDK runs the action (the hook
  does not see the action: every action has the same fingerprint, so ``Policy.max_same_call`` bounds them per
  revision), counted as a read; a write declaration is refused (the hook cannot answer one from the ledger).
* Hosted tools (web search, file search, code interpreter, image generation, hosted MCP, tool search,
  programmatic tool calling, a shell in a hosted container) run at the model provider, inside a model request:
  no guard can reserve their body. A tool of a type this module does not know is in the same place. Both are
  refused when the run starts (:meth:`~agents_loopguard.run.guarded.GuardedRun.admit`), with the fix named,
  unless the application opts them out with ``RunOptions.unguarded`` (recorded in the task's trace).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from agents import (
    ApplyPatchTool,
    CodeInterpreterTool,
    ComputerTool,
    CustomTool,
    FileSearchTool,
    FunctionTool,
    HostedMCPTool,
    ImageGenerationTool,
    LocalShellTool,
    ShellTool,
    ToolSearchTool,
    WebSearchTool,
)
from agents.editor import ApplyPatchResult
from agents.exceptions import UserError
from agents.tool import ProgrammaticToolCallingTool

from ..run import GuardedRun
from ._internal import ACTIVE_RUN, maybe_await, outside_a_run
from .tools import run_call, tool_spec

__all__ = ["admit_tools", "guard_local", "is_guarded_local"]

HOSTED: tuple[type, ...] = (
    FileSearchTool,
    WebSearchTool,
    CodeInterpreterTool,
    ImageGenerationTool,
    HostedMCPTool,
    ToolSearchTool,
    ProgrammaticToolCallingTool,
)
"""Tools that run at the model provider (their body is out of every guard's reach)."""
_MARK = "__loopguard_local__"
_HOSTED_FIX = "do that work in a function tool of your own, which the guard reserves at its body"


def _name(tool: Any) -> str:
    return str(getattr(tool, "name", None) or type(tool).__name__)


def _hosted_shell(tool: Any) -> bool:
    environment: Any = getattr(tool, "environment", None) or {}
    return isinstance(tool, ShellTool) and environment.get("type") != "local"


def admit_tools(run: GuardedRun, tools: Iterable[Any]) -> None:
    """Check every tool a run can offer (when it starts, and before each request for tools that appear at run
    time): a function tool's declarations agree; a computer tool is not declared a write; a hosted tool or a tool
    of an unknown type is refused unless ``RunOptions.unguarded`` names it.

    >>> from agents import WebSearchTool
    >>> from agents_loopguard import Budget, MemoryStore, RunOptions
    >>> options = RunOptions(budget=Budget(1, 1), store=MemoryStore(), unguarded={"web_search": "read-only"})
    >>> run = GuardedRun.start(options)
    >>> admit_tools(run, [WebSearchTool()])
    >>> run.outside
    {'web_search'}
    """
    for tool in tools:
        name = _name(tool)
        if isinstance(tool, FunctionTool):
            run.declaration(name, tool_spec(tool))
        elif isinstance(tool, HOSTED) or _hosted_shell(tool):
            run.admit(name, f"a hosted tool ({type(tool).__name__}) that runs at the model provider", _HOSTED_FIX)
        elif isinstance(tool, ComputerTool):
            if run.declaration(name).kind == "write":
                raise UserError(
                    f"tool {name!r} is a computer tool, reserved when the SDK starts its action: the guard cannot "
                    "answer a committed write from the ledger there; declare it as a read (or drop the declaration)"
                )
        elif not isinstance(tool, (ShellTool, LocalShellTool, CustomTool, ApplyPatchTool)):
            fix = "wrap that work in a function tool, which the guard reserves at its body"
            run.admit(name, f"a tool of a type the adapter does not know ({type(tool).__name__})", fix)


def _active(name: str) -> GuardedRun:
    run = ACTIVE_RUN.get()
    if run is None:
        raise outside_a_run(f"the guarded tool {name!r}")
    return run


def _guarded(
    name: str, body: Callable[..., Any], args_of: Callable[..., dict[str, Any]], call_id_of: Callable[..., Any]
) -> Callable[..., Awaitable[Any]]:
    """``body`` (an executor of the application) reserved right before it runs, with the arguments ``args_of``
    reads from its own arguments: a refused call returns what the model reads instead."""

    async def guarded(*args: Any) -> Any:
        run = _active(name)
        call_id = call_id_of(*args)
        return await run_call(
            run, run.declaration(name), name, args_of(*args), call_id, lambda: maybe_await(body(*args))
        )

    setattr(guarded, _MARK, True)
    return guarded


class _GuardedEditor:
    """An apply_patch editor whose every operation (create, update, delete a file) is reserved before it runs."""

    def __init__(self, name: str, editor: Any) -> None:
        self._name, self._editor = name, editor
        setattr(self, _MARK, True)

    async def _apply(self, kind: str, operation: Any) -> Any:
        body = getattr(self._editor, kind)
        args = {"operation": kind, "path": getattr(operation, "path", None), "diff": getattr(operation, "diff", None)}
        run = _active(self._name)
        output = await run_call(
            run, run.declaration(self._name), self._name, args, None, lambda: maybe_await(body(operation))
        )
        refused = isinstance(output, str) and output.startswith(("refused:", "not executed:"))
        return ApplyPatchResult(status="failed", output=output) if refused else output

    def create_file(self, operation: Any) -> Awaitable[Any]:
        return self._apply("create_file", operation)

    def update_file(self, operation: Any) -> Awaitable[Any]:
        return self._apply("update_file", operation)

    def delete_file(self, operation: Any) -> Awaitable[Any]:
        return self._apply("delete_file", operation)


def _shell_args(request: Any) -> dict[str, Any]:
    return {"commands": list(request.data.action.commands)}


def _local_shell_args(request: Any) -> dict[str, Any]:
    action = request.data.action
    return {"command": list(action.command), "working_directory": getattr(action, "working_directory", None)}


def guard_local(tool: Any) -> Any:
    """The guarded copy of one of the SDK's local tools (its executor reserved at the body); any other as is.

    >>> from agents import ShellTool
    >>> shell = ShellTool(executor=lambda request: "ok")
    >>> is_guarded_local(guard_local(shell)), is_guarded_local(shell)
    (True, False)
    """
    if is_guarded_local(tool):
        return tool
    if isinstance(tool, ShellTool) and tool.executor is not None and not _hosted_shell(tool):
        executor = _guarded(tool.name, tool.executor, _shell_args, lambda request: request.data.call_id)
        return dataclasses.replace(tool, executor=executor)
    if isinstance(tool, LocalShellTool):
        executor = _guarded(tool.name, tool.executor, _local_shell_args, lambda request: request.data.call_id)
        return dataclasses.replace(tool, executor=executor)
    if isinstance(tool, CustomTool):
        invoke = _guarded(
            tool.name, tool.on_invoke_tool, lambda _ctx, text: {"input": text}, lambda ctx, _text: ctx.tool_call_id
        )
        return dataclasses.replace(tool, on_invoke_tool=invoke)
    if isinstance(tool, ApplyPatchTool):
        return dataclasses.replace(tool, editor=_GuardedEditor(tool.name, tool.editor))
    return tool


def is_guarded_local(tool: Any) -> bool:
    """True for a local tool whose executor the guard wraps (the run hooks then reserve nothing for it)."""
    body = getattr(tool, "executor", None) or getattr(tool, "editor", None)
    if isinstance(tool, CustomTool):
        body = tool.on_invoke_tool
    return bool(getattr(body, _MARK, False))
