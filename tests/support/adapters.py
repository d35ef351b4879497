"""One scenario, every adapter: run the same scripted model turns and tools through the Agents SDK adapter and the
raw function-calling loop, and read back the same things (the Outcome, the tool_choice each model request carried,
the tool outputs the model read).

The adapters are real: the Agents SDK with ``agents.testing.ScriptedModel`` (non-streamed and streamed), and the raw
loop with the real ``openai`` client over HTTP against :class:`~tests.support.scripted_openai.ScriptedOpenAIServer`
(Chat Completions driven synchronously, Responses asynchronously). A scenario is written once, in neutral terms:

* a tool is a plain annotated Python function plus its guard declaration (:class:`Tool`); the SDK adapter gets it
  through ``guarded_tool``, the raw loop as a ``GuardedTool`` whose JSON schema is the one the SDK derives;
* a model turn is :class:`Calls` (function calls, arguments as a dict or as raw text), :class:`Say` (a final
  answer), :class:`Fail` (the API answers with an HTTP error status) or :class:`Obey` (a turn computed from the
  ``tool_choice`` the request carries, as a model that respects it would answer);
* a forced function is written as its name (``"lookup"``) and sent in each API's own shape.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import agents
import httpx2
import openai
from agents import Agent, ModelSettings, Usage, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message
from agents.testing import function_call as sdk_function_call

from agents_loopguard import MemoryStore, Outcome
from agents_loopguard.function_calling import GuardedTool, LoopOptions, arun_responses, run_chat_completions
from agents_loopguard.run.guarded import forced_name
from agents_loopguard.run.retry import RetryPolicy
from agents_loopguard.sdk import guarded_tool
from tests.support.scripted_openai import (
    ScriptedOpenAIServer,
    dynamic,
    final_text,
    function_call,
    http_error,
    tool_calls,
)
from tests.support.sdk import guarded_outcome, told_by_id
from tests.support.shop import MODEL
from tests.support.wire import async_http_client, http_client, tool_outputs

__all__ = ["ADAPTERS", "Calls", "Fail", "Obey", "Ran", "Say", "Tool", "run_scenario", "tool_value"]

ADAPTERS = ["sdk", "sdk-streamed", "sdk-attached", "chat", "responses", "langchain", "langchain-async", "adk"]
"""Every way a scenario runs: the Agents SDK adapter (``run_guarded``, ``run_guarded_streamed``, and a
``LoopGuard`` attached to the application's own ``Runner.run``), the raw loop (Chat Completions, sync;
Responses, async) and the LangChain middleware (``create_agent`` with ``ChatOpenAI`` over HTTP; ``invoke`` and
``ainvoke``)."""

USAGE = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
"""What each scripted answer reports, the same on both sides (the scripted server's default usage)."""
NO_MODEL_RETRY = RetryPolicy(max_retries=0)
"""The raw loop's model retries in a scenario: none, as ``ScriptedModel`` (no openai client) has none."""

agents.set_tracing_disabled(True)


@dataclass(frozen=True)
class Tool:
    """A tool in neutral terms: ``fn`` (annotated, with a docstring) and what the guard needs to know."""

    fn: Callable[..., Any]
    kind: str = "read"
    operation_id: Callable[[Mapping[str, Any]], str] | None = None
    verify: Callable[[Mapping[str, Any], Any], Any] | None = None
    retry: RetryPolicy | None = None
    """The tool's retries of a transient failure (``None``: each adapter's default)."""
    volatile_args: tuple[str, ...] = ()
    probe: Callable[[str, dict[str, Any]], Any] | None = None
    progress_key: str | None = None

    @property
    def name(self) -> str:
        return str(self.fn.__name__)

    def declaration(self) -> dict[str, Any]:
        """The guard declaration's keywords, the same for every adapter."""
        declared: dict[str, Any] = {"kind": self.kind, "operation_id": self.operation_id, "verify": self.verify}
        if self.retry is not None:
            declared["retry"] = self.retry
        if self.probe is not None:
            declared["probe"] = self.probe
        if self.progress_key is not None:
            declared["progress_key"] = self.progress_key
        return {**declared, "volatile_args": self.volatile_args}

    def for_sdk(self) -> Any:
        return guarded_tool(self.fn, **self.declaration())

    def for_raw_loop(self) -> GuardedTool:
        schema = function_tool(self.fn).params_json_schema  # the schema the SDK would send
        return GuardedTool(self.name, self.fn, parameters=schema, **self.declaration())


@dataclass(frozen=True)
class Calls:
    """A model turn with function calls: ``(name, arguments)`` pairs, arguments a dict or the raw JSON text."""

    calls: tuple[tuple[str, Mapping[str, Any] | str], ...]

    def __init__(self, *calls: tuple[str, Mapping[str, Any] | str]) -> None:
        object.__setattr__(self, "calls", tuple(calls))


@dataclass(frozen=True)
class Say:
    """A model turn with a final answer."""

    text: str


@dataclass(frozen=True)
class Fail:
    """A model request the API answers with HTTP error ``status`` (the SDK's model raises the client's error)."""

    status: int


@dataclass(frozen=True)
class Obey:
    """A model turn computed from the request's ``tool_choice`` (normalized: a forced function is its name)."""

    respond: Callable[[Any], Calls | Say]


Step = Calls | Say | Fail | Obey


@dataclass
class Ran:
    """What one scenario run came to, the same for every adapter."""

    outcome: Outcome
    choices: list[Any] = field(default_factory=list)
    """The tool_choice of each model request, normalized: a forced function is its name; not sent is ``None``."""
    outputs: list[dict[str, str]] = field(default_factory=list)
    """For each model request: the tool outputs its input carried, call id -> text."""


def normalized_choice(choice: Any) -> Any:
    """A tool_choice in any API's shape as the SDK writes it: a forced function is its name."""
    name = forced_name(choice)
    return name if name is not None and choice != name else choice


def tool_value(outcome: Outcome) -> Any:
    """The tool output an outcome's value carries. The adapters differ here by design (``GuardedRun.unwrap_values``):
    the Agents SDK adapter's value is the output itself, the raw loop's the engine's result
    ``{"status": "ok", "output": ...}``, as :func:`~agents_loopguard.create_runner`'s."""
    value = outcome.value
    if isinstance(value, Mapping) and set(value) == {"status", "output"}:
        return value["output"]
    return value


def call_id(turn: int, index: int) -> str:
    return f"call_{turn}_{index}"


def run_scenario(
    adapter: str,
    steps: Sequence[Step],
    tools: Sequence[Tool],
    *,
    tool_choice: Any = None,
    reset_forced_function: bool = True,
    max_output_tokens: int | None = None,
    **options: Any,
) -> Ran:
    """Run ``steps`` with ``tools`` through ``adapter`` (one of :data:`ADAPTERS`).

    ``tool_choice``: what the application asks for while work remains (a forced function by its name).
    ``reset_forced_function``: the Agents SDK's ``Agent.reset_tool_choice``, the raw loop's option of the same
    meaning. ``max_output_tokens``: the bound of each answer (``ModelSettings.max_tokens``, the raw loop's option
    of that name). ``options``: the run-level options both entry points take (``budget``, ``store``, ``task_id``,
    ``guard``, ``policy``, ``on_refusal``, ``release_tool_choice``, ``verify_output``). Without ``store`` or
    ``guard`` the task lives in a fresh :class:`MemoryStore`.
    """
    if "store" not in options and "guard" not in options:
        options["store"] = MemoryStore()
    if adapter.startswith("sdk"):
        settings = ModelSettings(tool_choice=tool_choice, max_tokens=max_output_tokens)
        return _run_sdk(adapter.removeprefix("sdk").lstrip("-"), steps, tools, settings, reset_forced_function, options)
    if adapter in ("chat", "responses"):
        loop_options = LoopOptions(
            tool_choice=_wire_choice(adapter, tool_choice),
            reset_forced_function=reset_forced_function,
            max_output_tokens=max_output_tokens,
            model_retry=NO_MODEL_RETRY,
        )
        return _run_raw(adapter, steps, tools, loop_options, options)
    if adapter == "adk":
        from tests.support.adk import run_adk  # the Google ADK adapter's block (tests/support/adk.py)

        return run_adk(steps, tools, tool_choice, max_output_tokens, reset_forced_function, options)
    if adapter.startswith("langchain"):
        from tests.support.langchain_adapter import run_langchain

        ran = run_langchain(
            adapter.endswith("async"), steps, tools, tool_choice, reset_forced_function, max_output_tokens, options
        )
        return Ran(ran[0], [normalized_choice(c) for c in ran[1]], ran[2])
    raise ValueError(f"unknown adapter {adapter!r}")


# --- the Agents SDK adapter ------------------------------------------------------------------------------------


_ERRORS: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError,
    401: openai.AuthenticationError,
    403: openai.PermissionDeniedError,
    404: openai.NotFoundError,
    429: openai.RateLimitError,
}


def api_error(status: int) -> openai.APIStatusError:
    """The error the openai client raises for an HTTP ``status`` answer."""
    request = httpx2.Request("POST", "https://example.invalid/v1/responses")
    response = httpx2.Response(status, request=request)
    error = _ERRORS.get(status, openai.InternalServerError if status >= 500 else openai.APIStatusError)
    return error(f"Error code: {status}", response=response, body=None)


def _sdk_output(turn: int, step: Calls | Say) -> list[Any]:
    if isinstance(step, Say):
        return [assistant_message(step.text)]
    return [sdk_function_call(name, args, call_id=call_id(turn, i)) for i, (name, args) in enumerate(step.calls)]


def _sdk_step(turn: int, step: Step) -> Any:
    if isinstance(step, Fail):
        return ModelStep.raise_error(api_error(step.status))
    if isinstance(step, Obey):
        return ModelStep.respond(lambda call: _sdk_output(turn, step.respond(call.model_settings.tool_choice)))
    return _sdk_output(turn, step)


def _run_sdk(
    mode: str,
    steps: Sequence[Step],
    tools: Sequence[Tool],
    settings: ModelSettings,
    reset: bool,
    options: dict[str, Any],
) -> Ran:
    script = [_sdk_step(turn, step) for turn, step in enumerate(steps, start=1)]
    model = ScriptedModel(script, default_usage=USAGE)  # every answer reports what the scripted server reports
    agent = Agent(
        name="clerk",
        model=model,
        tools=[tool.for_sdk() for tool in tools],
        model_settings=settings,
        reset_tool_choice=reset,
    )

    outcome = asyncio.run(guarded_outcome(agent, "go", mode=mode, **options))
    outputs = [told_by_id(call.input if isinstance(call.input, list) else []) for call in model.calls]
    return Ran(outcome, [call.model_settings.tool_choice for call in model.calls], outputs)


# --- the raw function-calling loop -------------------------------------------------------------------------------


def _raw_reply(turn: int, step: Calls | Say) -> Any:
    if isinstance(step, Say):
        return final_text(step.text)
    return tool_calls(*(function_call(name, args, call_id(turn, i)) for i, (name, args) in enumerate(step.calls)))


def _raw_step(turn: int, step: Step) -> Any:
    if isinstance(step, Fail):
        return http_error(step.status)
    if isinstance(step, Obey):
        return dynamic(lambda body: _raw_reply(turn, step.respond(normalized_choice(body.get("tool_choice")))))
    return _raw_reply(turn, step)


def _wire_choice(api: str, choice: Any) -> Any:
    name = forced_name(choice)
    if name is None:
        return choice
    return {"type": "function", "function": {"name": name}} if api == "chat" else {"type": "function", "name": name}


def _run_raw(
    api: str,
    steps: Sequence[Step],
    tools: Sequence[Tool],
    loop_options: LoopOptions,
    options: dict[str, Any],
) -> Ran:
    guarded = [tool.for_raw_loop() for tool in tools]
    with ScriptedOpenAIServer([_raw_step(turn, step) for turn, step in enumerate(steps, start=1)]) as server:
        if api == "chat":
            with openai.OpenAI(base_url=server.base_url, api_key="test", http_client=http_client()) as client:
                outcome = run_chat_completions(
                    client,
                    model=MODEL,
                    messages=[{"role": "user", "content": "go"}],
                    tools=guarded,
                    options=loop_options,
                    **options,
                )
        else:

            async def main() -> Outcome:
                async with openai.AsyncOpenAI(
                    base_url=server.base_url, api_key="test", http_client=async_http_client()
                ) as client:
                    return await arun_responses(
                        client, model=MODEL, input="go", tools=guarded, options=loop_options, **options
                    )

            outcome = asyncio.run(main())
        requests = server.requests
    choices = [normalized_choice(r.body.get("tool_choice")) for r in requests]
    return Ran(outcome, choices, [tool_outputs(api, r.body) for r in requests])
