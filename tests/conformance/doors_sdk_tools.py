"""The Agents SDK's other tool kinds: its own local tools (a shell, a local shell, a custom tool, a patch editor, a
computer), whose bodies are executors of the application, and the hosted tools, whose bodies run at the provider.

Each local tool runs three commands, then the model answers; its executor counts itself in the env.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agents import (
    Agent,
    ApplyPatchTool,
    AsyncComputer,
    ComputerTool,
    CustomTool,
    LocalShellTool,
    ShellTool,
    WebSearchTool,
)
from agents.testing import assistant_message
from openai.types.responses import (
    ResponseApplyPatchToolCall,
    ResponseComputerToolCall,
    ResponseCustomToolCall,
    ResponseFunctionShellToolCall,
)
from openai.types.responses.response_apply_patch_tool_call import OperationCreateFile
from openai.types.responses.response_computer_tool_call import ActionClick
from openai.types.responses.response_function_shell_tool_call import Action as ShellAction
from openai.types.responses.response_output_item import LocalShellCall, LocalShellCallAction

from tests.conformance.doors_sdk import FINAL, guarded, models, refused, shop, turns
from tests.conformance.kit import Door, Env, Observed

__all__ = ["DOORS"]


def then_answer(call: Callable[[int], Any], calls: int = 3) -> list[Any]:
    """``calls`` turns of one call each (different arguments), then the answer."""
    return [*([call(i)] for i in range(1, calls + 1)), [assistant_message(FINAL)]]


def run_agent(env: Env, tools: list[Any], script: list[Any], **options: Any) -> Observed:
    (model,) = models(env, script)
    return guarded(env, Agent(name="clerk", model=model, tools=tools), **options)


def shell(env: Env) -> Observed:
    def execute(request: Any) -> str:
        env.body("shell")
        return f"ran {request.data.action.commands}"

    def call(i: int) -> Any:
        action = ShellAction(commands=[f"echo {i}"])
        return ResponseFunctionShellToolCall(
            type="shell_call", id=f"s{i}", call_id=f"s{i}", status="completed", action=action
        )

    return run_agent(env, [ShellTool(executor=execute)], then_answer(call))


def local_shell(env: Env) -> Observed:
    async def execute(request: Any) -> str:
        env.body("local_shell")
        return f"ran {request.data.action.command}"

    def call(i: int) -> Any:
        action = LocalShellCallAction(type="exec", command=["echo", str(i)], env={})
        return LocalShellCall(type="local_shell_call", id=f"l{i}", call_id=f"l{i}", status="completed", action=action)

    return run_agent(env, [LocalShellTool(executor=execute)], then_answer(call))


def custom(env: Env) -> Observed:
    def invoke(ctx: Any, text: str) -> str:
        env.body("patcher")
        return f"applied {text}"

    def call(i: int) -> Any:
        return ResponseCustomToolCall(type="custom_tool_call", call_id=f"c{i}", name="patcher", input=f"patch {i}")

    tool = CustomTool(name="patcher", description="Apply a patch (free text).", on_invoke_tool=invoke)
    return run_agent(env, [tool], then_answer(call))


@dataclass
class Editor:
    """A patch editor (the SDK's ``ApplyPatchEditor``): every operation counts itself."""

    env: Env

    def create_file(self, operation: Any) -> str:
        self.env.body("apply_patch")
        return f"created {operation.path}"

    def update_file(self, operation: Any) -> str:
        self.env.body("apply_patch")
        return f"updated {operation.path}"

    def delete_file(self, operation: Any) -> str:
        self.env.body("apply_patch")
        return f"deleted {operation.path}"


def apply_patch(env: Env) -> Observed:
    def call(i: int) -> Any:
        operation = OperationCreateFile(type="create_file", path=f"notes/{i}.md", diff=f"+line {i}\n")
        return ResponseApplyPatchToolCall(
            type="apply_patch_call", id=f"p{i}", call_id=f"p{i}", status="completed", operation=operation
        )

    return run_agent(env, [ApplyPatchTool(editor=Editor(env))], then_answer(call))


class Screen(AsyncComputer):
    """A computer whose every click counts itself (a screenshot follows each action)."""

    def __init__(self, env: Env) -> None:
        self.env = env

    @property
    def environment(self) -> Any:
        return "browser"

    @property
    def dimensions(self) -> tuple[int, int]:
        return (800, 600)

    async def screenshot(self) -> str:
        return "iVBORw0KGgo="

    async def click(self, x: int, y: int, button: str) -> None:
        self.env.body("computer_use_preview")  # the SDK's runtime name of a computer tool

    async def double_click(self, x: int, y: int) -> None: ...
    async def scroll(self, x: int, y: int, scroll_x: int, scroll_y: int) -> None: ...
    async def type(self, text: str) -> None: ...
    async def wait(self) -> None: ...
    async def move(self, x: int, y: int) -> None: ...
    async def keypress(self, keys: list[str]) -> None: ...
    async def drag(self, path: list[tuple[int, int]]) -> None: ...


def computer(env: Env) -> Observed:
    def call(i: int) -> Any:
        return ResponseComputerToolCall(
            type="computer_call",
            id=f"k{i}",
            call_id=f"k{i}",
            status="completed",
            pending_safety_checks=[],
            action=ActionClick(type="click", x=10 * i, y=10, button="left"),
        )

    # two clicks: the hook does not see the action, so every click has the same fingerprint (max_same_call)
    return run_agent(env, [ComputerTool(computer=Screen(env))], then_answer(call, 2))


def hosted(env: Env) -> Observed:
    """The shop's tools and a hosted web search, nothing opted out."""
    return run_agent(env, [*shop(env), WebSearchTool()], turns())


def hosted_opted_out(env: Env) -> Observed:
    """The same with ``unguarded={"web_search": ...}``: the run goes on, the opt-out is in the task's trace."""
    seen = run_agent(env, [*shop(env), WebSearchTool()], turns(), unguarded={"web_search": "read-only search"})
    recorded = [e for e in env.store.trace(env.task_id) if e.kind == "unguarded"]
    assert [(e.tool, e.result_class) for e in recorded] == [("web_search", "outside")], recorded
    return seen


def hosted_at_run_time(env: Env) -> Observed:
    """A hosted tool that appears only at run time (``get_all_tools``): refused before the request offering it."""

    class Searching(Agent[Any]):
        async def get_all_tools(self, run_context: Any) -> list[Any]:
            return [*await super().get_all_tools(run_context), WebSearchTool()]

    (model,) = models(env, turns())
    return guarded(env, Searching(name="clerk", model=model, tools=list(shop(env))))


@dataclass
class Gadget:
    """A tool of a type the adapter does not know."""

    name: str = "gadget"


def unknown_type(env: Env) -> Observed:
    return run_agent(env, [*shop(env), Gadget()], turns())


def door(name: str, doc: str, build: Callable[[Env], Observed], **more: Any) -> Door:
    """A row of this file: by default the user gets the final answer (``final=None``: not checked)."""
    return Door("sdk", name, doc, build, **{"final": FINAL, **more})


UNGUARDED = "unguarded={'web_search': \"why\"}"

DOORS = [
    door("shell-tool", "a `ShellTool` with a local executor", shell),
    door("local-shell-tool", "a `LocalShellTool`", local_shell),
    door("custom-tool", "a `CustomTool` (free-text input)", custom),
    door("apply-patch-tool", "an `ApplyPatchTool` and its editor", apply_patch),
    door("computer-tool", "a `ComputerTool`", computer),
    door(
        "hosted-tool",
        "a hosted tool (`WebSearchTool()`, file search, code interpreter...)",
        refused(hosted),
        mark="refused",
        refusal=UNGUARDED,
    ),
    door(
        "hosted-tool-opted-out",
        "a hosted tool opted out with `unguarded={...}`",
        hosted_opted_out,
        mark="outside",
    ),
    door(
        "hosted-tool-at-run-time",
        "a hosted tool that appears only at run time",
        refused(hosted_at_run_time),
        mark="refused",
        refusal=UNGUARDED,
    ),
    door(
        "unknown-tool-type",
        "a tool of a type the adapter does not know",
        refused(unknown_type),
        mark="refused",
        refusal="unguarded={'gadget'",
    ),
]
