"""An Agents SDK agent in a Restate handler, guarded: :func:`run_guarded_restate` (restate-sdk 1.2, restate-server
1.7).

Restate journals what a handler does: a ``ctx.run_typed`` block that completed is answered from the journal when the
invocation is retried (after a crash, a lost connection, a retryable error), and the handler's code runs again up to
the point it reached. Restate's own integration (``restate.ext.openai.DurableRunner``) makes each model call such a
block and orders the tool calls; it also replaces ``run_config.model_provider`` with its own, and journals no model
an agent holds as an instance. Which layer wraps which here, from the outside in:

* the handler calls :func:`run_guarded_restate`, which gives every model of the run, the one the application's
  provider resolves by name (default: the SDK's) and every ``Model`` instance on an agent or in ``run_config.model``,
  Restate's journaled call (:class:`JournaledModel`, a ``RestateModelWrapper``): the provider is wrapped, never
  replaced;
* the guard wraps the model *inside* the journaled block
  (:func:`~agents_loopguard.sdk.model.register_step_model`): a call Restate answers from its journal never reaches
  it (nothing reserved), a call Restate executes again (its attempt died after the request left) is that request's
  attempt again, counted once more as it is sent again;
* a guard refusal inside the block is a ``TerminalError`` (recorded, never retried by Restate) that carries the
  guard's verdict, and the run still ends with the guard's :class:`~agents_loopguard.Outcome`, also when a retried
  invocation replays the refusal from the journal;
* function tools are not journaled (unless their body uses ``ctx.run`` itself): a retried invocation runs them
  again, and the guard answers each from the task's record, keyed by the invocation id and the model's tool-call id
  (stable: it comes from the journaled model response). A write whose attempt died inside it is ``unknown`` in the
  ledger: never sent again, the run ends ``needs_reconciliation``. Restate's turnstile (the order of parallel tool
  calls: one body at a time) wraps the guarded tools;
* a tool body that journals steps of its own (``ctx.run``) must take them again when the invocation is retried
  (Restate checks every command against its journal): when the guard does not run the body again (answered from the
  record, or refused after an attempt that died in it), it runs the body *journal-only* (:class:`RestateSteps`):
  each ``ctx.run`` is answered from the journal, and one the journal holds no result for fails (``TerminalError``)
  without running, never a second effect;
* Restate's own control flow (a journal mismatch, a suspension, a lost connection, the attempt's cancellation) goes
  through untouched and is never stored as the task's outcome.

The task defaults to the invocation's id, so a retried invocation continues the same task and budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import restate.vm
from agents import Agent, FunctionTool, Handoff, RunConfig, Runner
from agents.items import ModelResponse
from agents.lifecycle import RunHooks
from agents.models.interface import Model, ModelProvider
from agents.models.multi_provider import MultiProvider
from agents.tool import resolve_function_tool_failure_error_function, set_function_tool_failure_error_function
from restate import RunOptions as RestateRunOptions
from restate import TerminalError
from restate.ext.openai.functions import propagate_cancellation, wrap_agent_tools
from restate.ext.openai.models import State
from restate.ext.openai.runner_wrapper import RestateModelWrapper
from restate.extensions import current_context
from restate.serde import BytesSerde
from restate.server_context import DisconnectedException, restate_context_is_replaying
from restate.vm import Failure, Run
from typing_extensions import Unpack

from ..run import RunFields, RunOptions
from ..run.durable import recorded, replay_of, replayed
from ..sdk import LoopGuard, register_step_model
from ..sdk.run import runner_kwargs
from ..values.calls import Verdict
from ..values.outcome import Outcome

__all__ = ["JournaledModel", "RestateSteps", "Tap", "run_guarded_restate"]

VMException: type[Exception] = restate.vm.VMException  # type: ignore[attr-defined]
"""Restate's state machine refused a command (a journal mismatch): its own control flow, never a run's outcome."""

REFUSAL_CODE = 429
"""The status code of the ``TerminalError`` a guard refusal inside a journaled model call becomes."""
_VERDICT = "agents_loopguard.verdict"
"""The metadata key of that error: the guard's verdict, as the durable record stores it (journaled with the error)."""


def terminal(halt: Exception) -> Exception:
    """The guard's halt inside Restate's journaled block, as the error Restate records and never retries; it
    carries the verdict (a retried invocation replays the error from the journal without asking the guard).

    >>> from agents_loopguard import Reason, Status, Verdict
    >>> class Halt(Exception):
    ...     verdict = Verdict(Status.STOPPED, Reason.MODEL_BUDGET, "model budget exhausted")
    >>> error = terminal(Halt("agents_loopguard stopped the run: stopped/model_budget"))
    >>> error.status_code, refused_verdict(error).reason
    (429, <Reason.MODEL_BUDGET: 'model_budget'>)
    """
    verdict = getattr(halt, "verdict", None)
    facts = json.dumps(recorded(None, None, verdict if isinstance(verdict, Verdict) else None, ended=True))
    return TerminalError(str(halt), REFUSAL_CODE, metadata={_VERDICT: facts})


def refused_verdict(error: TerminalError) -> Verdict | None:
    """The guard's verdict a :func:`terminal` error carries (``None`` for any other ``TerminalError``)."""
    facts = (error.metadata or {}).get(_VERDICT)
    if error.status_code != REFUSAL_CODE or facts is None:
        return None
    return replayed(json.loads(facts))[2]


_NOT_COMMANDS = frozenset({"sys_input", "sys_write_output_success", "sys_write_output_failure", "sys_end"})
"""Calls to Restate's state machine that are not journal commands of the handler's code."""
BLOCKED_CODE = 412
"""The status code of the failure a journal-only body's unjournaled ``ctx.run`` is completed with (not run)."""


class Tap:
    """Restate's state machine of the invocation (``ctx.vm``) as the handler's context uses it during a guarded run,
    seen by the guard: the names of the journal commands the handler issues (``run`` commands by their name, any
    other by its kind), a callback before a tool body's first command, and the journal-only mode in which a ``run``
    the journal holds no result for is completed with a failure instead of running.

    >>> class VM:
    ...     def sys_sleep(self, millis, name=None): return 7
    ...     def is_replaying(self): return False
    >>> tap = Tap(VM())
    >>> tap.sys_sleep(10), tap.is_replaying(), tap.commands
    (7, False, ['sleep'])
    """

    def __init__(self, vm: Any) -> None:
        self.vm = vm
        self.commands: list[str] = []
        self.before_command: Callable[[], None] | None = None
        self.only_journal = False

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.vm, name)
        if not name.startswith("sys_") or name in _NOT_COMMANDS or not callable(attribute):
            return attribute

        def command(*args: Any, **kwargs: Any) -> Any:
            self._command(name.removeprefix("sys_"))
            return attribute(*args, **kwargs)

        return command

    def _command(self, name: str) -> None:
        before, self.before_command = self.before_command, None
        if before is not None:
            before()
        self.commands.append(name)

    def sys_run(self, name: str) -> Run:
        self._command(f"run:{name}")
        run: Run = self.vm.sys_run(name)
        if not self.only_journal or run.replayed:
            return run
        failure = Failure(BLOCKED_CODE, f"agents_loopguard: {name!r} has no result in the journal: not run again")
        self.vm.propose_run_completion_failure(run.handle, failure)
        return Run(replayed=True, handle=run.handle)  # the closure is never scheduled


class RestateSteps:
    """Where Restate is in the invocation (:class:`~agents_loopguard.run.DurableSteps`): a model call is keyed by the
    invocation id and its ordinal in the handler (counted outside the journal, so a replayed call counts too: the
    handler is deterministic, the n-th call is the same one on every retry), a tool execution by the invocation id
    and the model's tool-call id.

    It is also the :class:`~agents_loopguard.run.durable.BodyJournal` of Restate (through the run's :class:`Tap`):
    a body's commands are counted; a body not run again runs journal-only, and a body whose attempt died is noted
    before its first command (Restate gives no way to read what a dead attempt journaled).

    >>> steps = RestateSteps("inv_1")
    >>> steps.model_step() is None          # before the first model call
    True
    >>> steps.next_model_call(); steps.model_step(), steps.tool_step("call_A"), steps.tool_step(None)
    ('restate:inv_1:model:1', 'restate:inv_1:tool:call_A', None)
    """

    def __init__(self, invocation_id: str, tap: Tap | None = None) -> None:
        self.invocation_id = invocation_id
        self.model_calls = 0
        self.tap = tap

    def next_model_call(self) -> None:
        """A model call of the handler begins (journaled or not)."""
        self.model_calls += 1

    def model_step(self) -> str | None:
        return f"restate:{self.invocation_id}:model:{self.model_calls}" if self.model_calls else None

    def tool_step(self, call_id: str | None) -> str | None:
        return f"restate:{self.invocation_id}:tool:{call_id}" if call_id else None

    def body_began(self, key: str, noted: Callable[[], None]) -> int:
        if self.tap is None:
            return 0
        self.tap.before_command = noted
        return len(self.tap.commands)

    def body_ended(self, began: int) -> list[str] | None:
        if self.tap is None:
            return None
        self.tap.before_command = None
        taken = self.tap.commands[began:]
        return taken or None

    def pass_over(self, journal: Any, began: int, noted: Callable[[], bool]) -> bool:
        return self.tap is not None and (journal is not None or noted())

    def is_cancellation(self, error: BaseException) -> bool:
        """Restate's cancellation reaches a tool body as a ``TerminalError`` 409 at its next journaled step."""
        return isinstance(error, TerminalError) and error.status_code == 409

    @contextlib.contextmanager
    def journal_only(self) -> Iterator[None]:
        if self.tap is None:
            yield
            return
        self.tap.only_journal = True
        try:
            yield
        finally:
            self.tap.only_journal = False


class JournaledModel(RestateModelWrapper):
    """Restate's journaled model call (``ctx.run_typed``, from ``RestateModelWrapper``) that counts the handler's
    model calls first (the ordinal of :class:`RestateSteps`). The guard wraps ``.model``, inside the block."""

    def __init__(self, model: Model, state: State, options: RestateRunOptions[Any], steps: RestateSteps) -> None:
        super().__init__(model, state, options)
        self.steps = steps

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        self.steps.next_model_call()
        response: ModelResponse = await super().get_response(*args, **kwargs)
        return response


register_step_model(JournaledModel, "model", refusal=terminal)


class JournaledModels(ModelProvider):
    """The application's model provider, each model it resolves given Restate's journaled call."""

    def __init__(self, inner: ModelProvider, journal: _Journal) -> None:
        self.inner, self.journal = inner, journal

    def get_model(self, model_name: str | None) -> Model:
        return self.journal.model(self.inner.get_model(model_name))

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclasses.dataclass
class _Journal:
    """What the run's journaled calls share: Restate's tool turnstile, the block's retry options, the ordinals."""

    state: State
    options: RestateRunOptions[Any]
    steps: RestateSteps

    def model(self, model: Model) -> Model:
        if isinstance(model, JournaledModel):
            return model
        return JournaledModel(model, self.state, self.options, self.steps)

    def agent(self, agent: Agent[Any], seen: dict[int, Agent[Any]] | None = None) -> Agent[Any]:
        """A copy of ``agent`` and of the agents it hands off to, their ``Model`` instances journaled (a model named
        by a string is resolved by the journaled provider)."""
        seen = {} if seen is None else seen
        if id(agent) in seen:
            return seen[id(agent)]
        model = self.model(agent.model) if isinstance(agent.model, Model) else agent.model
        copy = seen[id(agent)] = agent.clone(model=model)
        copy.handoffs = [self._handoff(target, seen) for target in agent.handoffs]
        return copy

    def _handoff(self, target: Any, seen: dict[int, Agent[Any]]) -> Any:
        if isinstance(target, Agent):
            return self.agent(target, seen)
        if not isinstance(target, Handoff):
            return target
        invoke = target.on_invoke_handoff

        async def on_invoke_handoff(ctx: Any, input_json: str) -> Any:
            agent = await invoke(ctx, input_json)
            return self.agent(agent, seen) if isinstance(agent, Agent) else agent

        return dataclasses.replace(target, on_invoke_handoff=on_invoke_handoff)

    def config(self, config: RunConfig | None) -> RunConfig:
        config = config or RunConfig()
        provider = JournaledModels(config.model_provider or MultiProvider(), self)
        model = self.model(config.model) if isinstance(config.model, Model) else config.model
        return dataclasses.replace(config, model_provider=provider, model=model)


_MODEL_CALL = "call LLM"
"""The name of Restate's journaled model call (``RestateModelWrapper``)."""


def _cancellable(agent: Agent[Any], seen: dict[int, Agent[Any]] | None = None) -> Agent[Any]:
    """A copy of ``agent`` (and of the agents it hands off to) whose function tools let Restate's cancellation out
    of a tool body (Restate's ``propagate_cancellation`` around each tool's failure policy), so the run ends
    cancelled with the call in flight instead of telling the model the tool failed."""
    seen = {} if seen is None else seen
    if id(agent) in seen:
        return seen[id(agent)]
    copy = seen[id(agent)] = agent.clone()
    copy.tools = [_cancelling(tool) if isinstance(tool, FunctionTool) else tool for tool in agent.tools]
    copy.handoffs = [_cancellable(target, seen) if isinstance(target, Agent) else target for target in agent.handoffs]
    return copy


def _cancelling(tool: FunctionTool) -> FunctionTool:
    """A copy of ``tool`` (its invoker follows the copy) whose failure policy re-raises Restate's cancellation."""
    policy = resolve_function_tool_failure_error_function(tool)
    return set_function_tool_failure_error_function(dataclasses.replace(tool), propagate_cancellation(policy))


_JOURNAL = "restate:{}:journal"
"""The step record of the commands an invocation's guarded run issued, kept before its outcome is stored."""


async def _unreachable() -> bytes:
    raise TerminalError("agents_loopguard: a finished task's journal replay asked for a new step")


async def _replay_journal(ctx: Any, commands: list[str] | None) -> None:
    """The task ended in an earlier attempt of this invocation (after its outcome was stored, before Restate
    recorded the handler's return): Restate requires the retry to take the journal's steps again, so the commands
    the run issued (kept with the task before its outcome was stored: the model calls and the tool bodies' own
    ``ctx.run`` blocks, in order) are taken again, each answered from the journal (nothing runs). Without that record
    (an invocation of an earlier release), the model calls are replayed while Restate replays."""
    options = RestateRunOptions(serde=BytesSerde())
    if commands is None:
        while restate_context_is_replaying.get():
            with contextlib.suppress(TerminalError):  # a refusal the journal recorded
                await ctx.run_typed(_MODEL_CALL, _unreachable, options)
        return
    for command in commands:
        kind, _, name = command.partition(":")
        if kind != "run":
            raise TerminalError(
                f"agents_loopguard: the finished run issued a {kind!r} command, which cannot be replayed without its "
                "arguments: keep a tool body's own steps to ctx.run blocks"
            )
        with contextlib.suppress(TerminalError):  # a failure the journal recorded (a refusal, a blocked run)
            await ctx.run_typed(name, _unreachable, options)


async def run_guarded_restate(
    agent: Agent[Any],
    input: Any,
    *,
    options: RunOptions | None = None,
    context: Any = None,
    max_turns: int | None = None,
    hooks: RunHooks[Any] | None = None,
    run_config: RunConfig | Mapping[str, Any] | None = None,
    error_handlers: Any = None,
    model_retries: RestateRunOptions[Any] | None = None,
    **fields: Unpack[RunFields],
) -> Outcome:
    """Run ``agent`` under the task's guard inside the current Restate handler, each model call journaled, and
    return the one :class:`~agents_loopguard.Outcome` (as :func:`~agents_loopguard.sdk.run_guarded` does).

    The options are :func:`~agents_loopguard.sdk.run_guarded`'s; ``task_id`` defaults to the invocation's id (a
    retried invocation continues its task). ``model_retries`` are Restate's options of the journaled model block
    (``restate.RunOptions``: ``max_attempts``...; default: the invocation's retry policy); every attempt Restate
    makes is reserved, so the model budget bounds them. Restate does not stream.

    Raises ``RuntimeError`` outside a Restate handler. Restate's own control flow (a suspension, a lost connection,
    the attempt's cancellation) goes through untouched: Restate retries the invocation, which continues the task.
    """
    ctx: Any = current_context()  # the server's invocation context (its state machine: ``ctx.vm``)
    if ctx is None:
        raise RuntimeError("run_guarded_restate runs inside a Restate handler (the journal is the handler's)")
    invocation = ctx.request().id
    tap = Tap(ctx.vm) if hasattr(ctx, "vm") else None
    steps = RestateSteps(invocation, tap)
    opts = RunOptions.merge(options, fields)
    if opts.guard is None and opts.task_id is None:
        opts = dataclasses.replace(opts, task_id=invocation)
    guard = LoopGuard(input, dataclasses.replace(opts, durable=steps))
    if guard.finished is not None:
        replaying = restate_context_is_replaying.get()
        await _replay_journal(ctx, guard.run.kept_step(_JOURNAL.format(invocation)) if replaying else None)
        return replay_of(guard.finished)
    state = State()
    journal = _Journal(state, model_retries or RestateRunOptions(), steps)
    config = RunConfig(**run_config) if isinstance(run_config, Mapping) else run_config
    sdk = {"context": context, "max_turns": max_turns}
    kwargs = runner_kwargs(
        guard, hooks=hooks, run_config=journal.config(config), error_handlers=error_handlers, sdk=sdk
    )
    copy = wrap_agent_tools(_cancellable(guard.compose(journal.agent(agent))), state)
    if tap is not None:
        ctx.vm = tap  # the guard sees the run's journal commands (the handler's own context restored below)
    try:
        result = await _run(guard, copy, kwargs)
        if tap is not None:  # kept before the outcome: a retry after the outcome was stored takes them again
            guard.run.keep_step(_JOURNAL.format(invocation), tap.commands)
        return await _outcome(guard, result)
    finally:
        if tap is not None:
            ctx.vm = tap.vm
        if config is None:  # the provider made for the run (the SDK's default): closed with it, as the SDK does
            with contextlib.suppress(Exception):
                await kwargs["run_config"].model_provider.aclose()


async def _run(guard: LoopGuard, agent: Agent[Any], kwargs: dict[str, Any]) -> Any:
    """``Runner.run`` under the guard: its result, or the exception it ended with (Restate's own control flow, a
    lost connection and a journal mismatch included, is re-raised: never the task's outcome)."""
    try:
        return await Runner.run(agent, guard.input, **kwargs)
    except (asyncio.CancelledError, DisconnectedException, VMException):
        raise  # this attempt is over, not the invocation: Restate retries it and the task continues
    except Exception as exc:
        return exc


async def _outcome(guard: LoopGuard, result: Any) -> Outcome:
    """The one outcome of how the run ended: a cancellation of the invocation, a refusal replayed from the journal
    (the guard's own verdict), or what the guarded run concludes."""
    if isinstance(result, TerminalError):
        if result.status_code == 409:  # the invocation was cancelled (Restate's cancellation)
            return await guard.outcome(cancelled=True)
        verdict = refused_verdict(result)
        if verdict is not None and guard.run.verdict is None:  # replayed from the journal: the guard's own verdict
            guard.run.stop(verdict)
    return await guard.outcome(result)
