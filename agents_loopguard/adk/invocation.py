"""One ADK invocation under the plugin, and the invocations nested in it: what :class:`~agents_loopguard.adk.
LoopGuardPlugin` keeps between ADK's callbacks, and how it advances the guarded run's generators from them.

ADK runs an agent inside another agent's tool in a new ``Runner`` with a new session (``AgentTool``, or a tool body
that starts a run itself), handing it the parent's plugins. That nested invocation is not a task of its own: it
runs on its parent's guarded run (the same task, budget, stop mark and ledger) and never concludes it. The
invocation running in the current context is :data:`ACTIVE` (ADK runs a tool body in a copy of the context its
callbacks ran in, so a run started inside a tool finds the invocation whose tool it is).
"""

from __future__ import annotations

from collections.abc import Generator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from google.adk.agents.callback_context import CallbackContext
from google.adk.tools.tool_context import ToolContext

from ..run import Answer, Check, Execute, Executed, GuardedRun, Sleep, ToolSpec, perform_check_async

__all__ = ["ACTIVE", "Invocation", "advance", "call_key", "end_invocation", "finish", "request_key", "throw"]

Steps = Generator[Any, Answer, Any]


@dataclass(eq=False)
class Invocation:
    """One ADK invocation's share of a guarded run: its requests and calls in flight, what it answered, and its
    parent when it runs nested inside another invocation's tool (on the parent's run)."""

    run: GuardedRun
    session_id: str
    parent: Invocation | None = None
    requests: dict[tuple[str, str], Steps] = field(default_factory=dict)
    calls: dict[str, tuple[ToolSpec, Steps]] = field(default_factory=dict)
    final_text: str | None = None
    error: BaseException | None = None
    """The model request's failure the guard recorded a verdict for: the task's run ends with it."""
    waiting: list[dict[str, Any]] = field(default_factory=list)
    halted: str | None = None
    """ADK's own stop of the task's run (``max_llm_calls``): nothing more is sent or run."""
    ended: bool = False

    @property
    def root(self) -> Invocation:
        """The invocation whose run this is (the outermost)."""
        return self if self.parent is None else self.parent.root

    def nests(self) -> bool:
        """True when a run starting now in this invocation's context runs inside one of its tools (it is running,
        with a call authorized and not settled yet)."""
        return not self.ended and bool(self.calls)

    def stopping(self) -> str | None:
        """Why nothing more may be sent or run in the task's run: ADK's own stop, or a model failure anywhere in it
        (``None`` while it goes on; the guard's own verdicts are the run's)."""
        root = self.root
        if root.halted is not None:
            return root.halted
        if root.error is not None:
            return "the model request failed"
        return None


ACTIVE: ContextVar[Invocation | None] = ContextVar("agents_loopguard_adk_invocation", default=None)
"""The guarded invocation running in this context: a run that starts inside one of its tools nests in it."""


def request_key(context: CallbackContext) -> tuple[str, str]:
    """One model call in flight per agent and branch of an invocation (parallel agents have their own branch)."""
    return context.agent_name, context.branch or ""


def call_key(context: ToolContext) -> str:
    return context.function_call_id or ""


def end_invocation(context: CallbackContext) -> None:
    """The run ended: ADK calls neither the model nor a tool again (a ``LoopAgent`` leaves its loop too)."""
    context.get_invocation_context().end_invocation = True
    context.actions.escalate = True


def finish(steps: Steps, answer: Answer) -> Any:
    """Answer a request's attempt; its result (no retry is sent from a callback: ADK made the call)."""
    try:
        effect = steps.send(answer)
    except StopIteration as stop:
        return stop.value
    steps.close()  # a retry would need a second call from inside ADK's: none is asked for (NO_RETRY)
    raise AssertionError(f"a model request without retries asked for {effect!r}")


def throw(steps: Steps, error: BaseException) -> None:
    try:
        steps.throw(error)
    except BaseException:  # the steps re-raise what was thrown in, after recording it
        return


async def advance(steps: Steps, answer: Answer | None, *, rerun: Any = None) -> Execute | Executed:
    """Run a call's steps up to the next :class:`Execute` ADK performs (the first) or to their end: the
    application's verify and the waits are performed here; a retry's execution runs the tool again (``rerun``)."""
    try:
        effect = next(steps) if answer is None else steps.send(answer)
        while True:
            if isinstance(effect, Execute):
                if rerun is None:
                    return effect
                try:
                    value = await rerun()
                except Exception as exc:
                    effect = steps.send(Answer(error=exc))
                else:
                    effect = steps.send(Answer(value))
                continue
            assert isinstance(effect, (Check, Sleep))
            try:
                result = Answer(await perform_check_async(effect))
            except Exception as exc:
                result = Answer(error=exc)
            effect = steps.send(result)
    except StopIteration as stop:
        executed: Executed = stop.value
        return executed
