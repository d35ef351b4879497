"""Raw OpenAI function calling under the guard: Chat Completions and the Responses API, sync and async.

For applications that call the ``openai`` client directly instead of the Agents SDK. One loop asks the model, runs
the tools it calls and feeds their outputs back, and every step goes through the same engine
(:class:`~agents_loopguard.core.Guard`) as everything else:

- every model *attempt* reserves a model turn first (the loop owns the retries: the client is used with
  ``max_retries=0``, so each HTTP request that leaves the process is one reserved turn);
- with a price table, every attempt reserves its worst-case cost first and settles it with the reported usage;
- ``tool_choice`` is the guard's: a ``"required"`` or forced function is sent only while work remains, and dropped
  to ``"none"`` once the task is validated done or no tool execution is left (a forced function that already ran
  drops to ``"auto"``);
- every tool call of a response (parallel ones too, in order) is authorized, executed, verified and settled;
  malformed arguments and unknown tools are refused by the guard as ``invalid_call``;
- the loop ends with one :class:`~agents_loopguard.outcome.Outcome`: ``completed`` only with validated done,
  ``partial`` for a final answer the application never validated, ``stopped`` / ``needs_human`` /
  ``needs_reconciliation`` with their reason otherwise.

The loop is written once as a generator of effects (ask the model, run a tool, verify, sleep); a synchronous and an
asynchronous driver perform the effects with ``openai.OpenAI`` or ``openai.AsyncOpenAI``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import math
import random
import re
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from functools import cached_property
from typing import Any, Literal

import openai

from .budget import Budget, Policy
from .core import KINDS, Call, Guard, Kind, Ticket, Verdict
from .outcome import Outcome, Reason, Status
from .pricing import Price, price_for
from .pricing import estimate_input_tokens as _estimate_input_tokens
from .store.base import Store, TraceEntry

__all__ = [
    "MODEL_RETRY",
    "GuardedTool",
    "LoopResult",
    "RetryPolicy",
    "ToolFailure",
    "TransientToolError",
    "arun_chat_completions",
    "arun_responses",
    "run_chat_completions",
    "run_responses",
]

ToolChoice = str | Mapping[str, Any] | None
"""``"auto"``, ``"required"``, ``"none"``, a forced function (either API's shape), or ``None`` (not sent)."""

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_GUARDED_KEYS = frozenset(
    {"model", "messages", "input", "tools", "tool_choice", "stream", "max_tokens", "max_completion_tokens"}
    | {"max_output_tokens"}
)
_SKIPPED = "not executed: the application already validated the task as done"
_NOT_REACHED = "not executed: the run ended before this call"


class TransientToolError(Exception):
    """Raise it from a tool to say "this attempt failed transiently" (retried per the tool's :class:`RetryPolicy`)."""


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries of one model request or one tool call. ``max_retries=2`` is three attempts, each reserved.

    Model requests are retried on transient API errors (timeouts, connection errors, 408, 409, 429, 5xx; the
    server's ``x-should-retry`` wins), never on 401/403 (``needs_human/permission``) or another 4xx
    (``stopped/fatal``). Tool calls are retried when the tool raises one of ``transient`` and the attempt had no
    effect (a read, or a write whose ``verify`` says ``not_committed``); one of ``permission`` is never retried.

    >>> RetryPolicy(max_retries=2).attempts
    3
    >>> RetryPolicy(initial_delay=0.5, jitter=0).delay(2), RetryPolicy().delay(0, retry_after=0.25)
    (2.0, 0.25)
    """

    max_retries: int = 0
    """Retries after the first attempt."""
    initial_delay: float = 0.5
    """Backoff before the first retry, doubled for each next one."""
    max_delay: float = 8.0
    """Cap of the computed backoff."""
    max_retry_after: float = 60.0
    """Longest wait a server may ask for (``retry-after``); a longer one ends the request instead of waiting."""
    jitter: float = 0.25
    """Up to this fraction is taken off each computed backoff at random."""
    transient: tuple[type[BaseException], ...] = (TransientToolError, TimeoutError, ConnectionError)
    """Tool exceptions that mean "try again": retried only when the attempt is verified to have had no effect."""
    permission: tuple[type[BaseException], ...] = (PermissionError,)
    """Tool exceptions that mean "not allowed": ``needs_human/permission``, never retried."""

    def __post_init__(self) -> None:
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"RetryPolicy.max_retries must be an int >= 0, got {self.max_retries!r}")
        for name in ("initial_delay", "max_delay", "max_retry_after", "jitter"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"RetryPolicy.{name} must be a non-negative finite number, got {value!r}")

    @property
    def attempts(self) -> int:
        """Attempts in all: ``max_retries + 1``."""
        return self.max_retries + 1

    def delay(self, retry: int, *, retry_after: float | None = None) -> float | None:
        """Seconds to wait before retry number ``retry`` (0 for the first retry).

        A positive ``retry_after`` from the server is honoured as is, up to ``max_retry_after`` (beyond it:
        ``None``, do not retry); otherwise exponential backoff capped at ``max_delay``, minus jitter.
        """
        if retry_after is not None and math.isfinite(retry_after) and retry_after > 0:
            return retry_after if retry_after <= self.max_retry_after else None
        backoff = min(self.initial_delay * 2.0 ** min(retry, 64), self.max_delay)
        return backoff * (1.0 - self.jitter * random.random())

    def classify(self, error: BaseException) -> Literal["transient", "permission"] | None:
        """How a tool exception is handled: ``permission``, ``transient``, or ``None`` (an executor failure)."""
        if isinstance(error, self.permission):
            return "permission"
        if isinstance(error, self.transient):
            return "transient"
        return None


MODEL_RETRY = RetryPolicy(max_retries=2)
"""The default for model requests: three attempts, like the openai client's own default."""


@dataclass(frozen=True)
class ToolFailure:
    """What a write's ``verify`` receives instead of an output when the attempt raised a transient or permission
    error. ``verify`` must then ask the receiving system, by the operation id, whether the write happened: say
    ``not_committed`` (it may be retried), ``committed``, or ``unknown`` (it needs reconciliation)."""

    error: BaseException
    kind: Literal["transient", "permission"]
    attempt: int
    """1 for the first attempt."""

    def __str__(self) -> str:
        return f"{type(self.error).__name__}: {self.error}"


def _empty_object() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


@dataclass(frozen=True)
class GuardedTool:
    """A function the model may call, with what the guard needs to know about it.

    ``fn`` is called with the model's arguments as keyword arguments (a coroutine function in the async loops).
    ``verify(args, output)`` is the application's trusted check of the result: it returns evidence
    ``{"revision": int, "done": bool, "effect": "none" | "committed" | "not_committed" | "unknown"}`` (see
    :class:`~agents_loopguard.evidence.Evidence`). A read without ``verify`` never advances the revision, so
    reads alone end in ``no_progress`` after ``Policy.max_stalled`` of them. A write needs ``operation_id``
    (the stable business action, from the arguments) and ``verify``.

    >>> confirm = GuardedTool("confirm_order", lambda order_id, version: {"receipt": f"r-{order_id}"},
    ...     parameters={"type": "object", "properties": {"order_id": {"type": "integer"},
    ...                                                  "version": {"type": "integer"}}},
    ...     kind="write", operation_id=lambda a: f"confirm-order-{a['order_id']}-v{a['version']}",
    ...     verify=lambda a, out: {"revision": 1, "done": True, "effect": "committed"})
    >>> confirm.chat_spec()["function"]["name"], confirm.responses_spec()["type"]
    ('confirm_order', 'function')
    """

    name: str
    fn: Callable[..., Any]
    _: KW_ONLY
    parameters: Mapping[str, Any] = field(default_factory=_empty_object)
    """The JSON schema of the arguments (an object)."""
    kind: Kind = "read"
    """read, write, poll or page (see :class:`~agents_loopguard.core.Call`)."""
    operation_id: Callable[[Mapping[str, Any]], str] | None = None
    """For a write: ``args -> "confirm-order-42-v3"``, the business action, never the model's call id."""
    verify: Callable[[Mapping[str, Any], Any], Any] | None = None
    """``(args, output) -> evidence``; ``output`` is a :class:`ToolFailure` for a failed write attempt."""
    description: str = ""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """Retries of a transient failure without effect (none by default: a side effect is never re-sent blindly)."""
    strict: bool | None = None
    """Sent as the function's ``strict`` flag when set."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"tool name {self.name!r} must match {_NAME.pattern} (the OpenAI API's rule)")
        if not callable(self.fn):
            raise TypeError(f"tool {self.name!r}: fn must be callable")
        if self.kind not in KINDS:
            raise ValueError(f"tool {self.name!r}: kind {self.kind!r} is not one of {', '.join(sorted(KINDS))}")
        if not isinstance(self.parameters, Mapping):
            raise TypeError(f"tool {self.name!r}: parameters must be a JSON schema object (a mapping)")
        if self.kind == "write" and (self.operation_id is None or self.verify is None):
            raise ValueError(
                f"tool {self.name!r} is a write: give operation_id=(args -> stable business id) and "
                "verify=(args, output -> evidence with effect committed/not_committed), or the guard cannot "
                "tell a duplicate from a new action"
            )

    @cached_property
    def _signature(self) -> inspect.Signature | None:
        try:
            return inspect.signature(self.fn)
        except (TypeError, ValueError):  # some builtins have none: let the call decide
            return None

    def misfit(self, args: Mapping[str, Any]) -> str | None:
        """Why ``args`` cannot be passed to ``fn`` as keyword arguments, or ``None`` when they fit."""
        if self._signature is None:
            return None
        try:
            self._signature.bind(**args)
        except TypeError as exc:
            return f"the arguments do not fit {self.name}(): {exc}"
        return None

    def chat_spec(self) -> dict[str, Any]:
        """The Chat Completions ``tools`` entry."""
        function: dict[str, Any] = {"name": self.name, "parameters": dict(self.parameters)}
        if self.description:
            function["description"] = self.description
        if self.strict is not None:
            function["strict"] = self.strict
        return {"type": "function", "function": function}

    def responses_spec(self) -> dict[str, Any]:
        """The Responses API ``tools`` entry."""
        spec: dict[str, Any] = {"type": "function", "name": self.name, "parameters": dict(self.parameters)}
        if self.description:
            spec["description"] = self.description
        if self.strict is not None:
            spec["strict"] = self.strict
        return spec


@dataclass
class LoopResult:
    """The loop's own record, as ``Outcome.result``: the final text, the conversation, the responses."""

    final_text: str | None = None
    """The model's last answer (``None`` when the run ended before one)."""
    conversation: list[Any] = field(default_factory=list)
    """Chat messages or Responses input items, with the assistant turns and tool outputs appended."""
    responses: list[Any] = field(default_factory=list)
    """Every model response received, in order."""
    attempts: int = 0
    """Model requests this run sent (each one reserved a model turn)."""


# --------------------------------------------------------------------------- the two API styles


@dataclass(frozen=True)
class _Proposed:
    call_id: str
    name: str
    arguments: str | None
    """The raw JSON text; ``None`` when the item is not a function call."""


@dataclass(frozen=True)
class _Turn:
    text: str | None
    calls: tuple[_Proposed, ...]
    finish: str | None


def _dump(item: Any) -> Any:
    return item.model_dump(mode="json", exclude_none=True) if hasattr(item, "model_dump") else item


def _forced(choice: ToolChoice) -> str | None:
    """The name of a forced function in either API's shape, or ``None``."""
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else choice.get("name")
        return name if isinstance(name, str) else None
    return None


class _Chat:
    """Chat Completions: ``messages``, ``tools[].function``, ``message.tool_calls``, ``role: tool`` outputs."""

    conversation_key = "messages"
    max_tokens_key = "max_completion_tokens"

    @staticmethod
    def endpoint(client: Any) -> Callable[..., Any]:
        return client.chat.completions.create  # type: ignore[no-any-return]

    @staticmethod
    def spec(tool: GuardedTool) -> dict[str, Any]:
        return tool.chat_spec()

    @staticmethod
    def read(response: Any) -> _Turn | str:
        choices = getattr(response, "choices", None)
        if not choices:
            return "the response has no choices"
        message = choices[0].message
        calls = []
        for call in getattr(message, "tool_calls", None) or []:
            function = getattr(call, "function", None)
            if getattr(call, "type", "function") == "function" and function is not None:
                calls.append(_Proposed(call.id, function.name, function.arguments))
            else:
                calls.append(_Proposed(call.id, getattr(getattr(call, "custom", None), "name", ""), None))
        text = message.content if message.content is not None else getattr(message, "refusal", None)
        return _Turn(text, tuple(calls), choices[0].finish_reason)

    @staticmethod
    def usage(response: Any) -> tuple[int, int] | None:
        usage = getattr(response, "usage", None)
        return None if usage is None else (usage.prompt_tokens, usage.completion_tokens)

    @staticmethod
    def append_turn(conversation: list[Any], response: Any) -> None:
        message = response.choices[0].message
        entry: dict[str, Any] = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            entry["tool_calls"] = [_dump(call) for call in message.tool_calls]
        conversation.append(entry)

    @staticmethod
    def append_output(conversation: list[Any], call_id: str, content: str) -> None:
        conversation.append({"role": "tool", "tool_call_id": call_id, "content": content})


class _Responses:
    """The Responses API: ``input`` items, flat ``tools``, ``function_call`` items, ``function_call_output``."""

    conversation_key = "input"
    max_tokens_key = "max_output_tokens"

    @staticmethod
    def endpoint(client: Any) -> Callable[..., Any]:
        return client.responses.create  # type: ignore[no-any-return]

    @staticmethod
    def spec(tool: GuardedTool) -> dict[str, Any]:
        return tool.responses_spec()

    @staticmethod
    def read(response: Any) -> _Turn | str:
        output = getattr(response, "output", None)
        if output is None:
            return "the response has no output"
        calls = []
        for item in output:
            kind = getattr(item, "type", None)
            if kind == "function_call":
                calls.append(_Proposed(item.call_id, item.name, item.arguments))
            elif kind == "custom_tool_call":
                calls.append(_Proposed(item.call_id, item.name, None))
        text = getattr(response, "output_text", None) or None
        return _Turn(text, tuple(calls), getattr(response, "status", None))

    @staticmethod
    def usage(response: Any) -> tuple[int, int] | None:
        usage = getattr(response, "usage", None)
        return None if usage is None else (usage.input_tokens, usage.output_tokens)

    @staticmethod
    def append_turn(conversation: list[Any], response: Any) -> None:
        conversation.extend(_dump(item) for item in response.output)

    @staticmethod
    def append_output(conversation: list[Any], call_id: str, content: str) -> None:
        conversation.append({"type": "function_call_output", "call_id": call_id, "output": content})


_Api = type[_Chat] | type[_Responses]


# --------------------------------------------------------------------------- effects


@dataclass(frozen=True)
class _Request:
    """Send one model request (no client retries)."""

    kwargs: dict[str, Any]


@dataclass(frozen=True)
class _Invoke:
    """Run one tool attempt."""

    tool: GuardedTool
    args: dict[str, Any]


@dataclass(frozen=True)
class _Check:
    """Run the application's ``verify(args, output)``."""

    verify: Callable[[Mapping[str, Any], Any], Any]
    args: dict[str, Any]
    output: Any


@dataclass(frozen=True)
class _Sleep:
    seconds: float


_Effect = _Request | _Invoke | _Check | _Sleep


@dataclass(frozen=True)
class _Answer:
    """What performing an effect gave: a value, or the exception it raised."""

    value: Any = None
    error: Exception | None = None


_Steps = Generator[_Effect, _Answer, Outcome]


@dataclass(frozen=True)
class _Spec:
    api: _Api
    model: str
    conversation: list[Any]
    tools: dict[str, GuardedTool]
    tool_choice: ToolChoice
    max_output_tokens: int | None
    price: Price | None
    estimate: Callable[[Mapping[str, Any]], int]
    model_retry: RetryPolicy
    final_answer: bool
    options: dict[str, Any]


def _model_failure(error: Exception) -> tuple[Literal["transient", "permission", "fatal"], bool, float | None]:
    """Classify a model request's error: (kind, may retry, server-asked delay in seconds)."""
    if isinstance(error, openai.APIConnectionError):  # timeouts included
        return "transient", True, None
    if not isinstance(error, openai.APIStatusError):
        return "fatal", False, None
    headers = error.response.headers
    retry_after: float | None = None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            with contextlib.suppress(ValueError):
                retry_after = float(value) / scale
                break
    status = error.status_code
    if status in (401, 403) or (status == 429 and error.code == "insufficient_quota"):
        return "permission", False, None
    should = headers.get("x-should-retry")
    transient = status in (408, 409, 429) or status >= 500
    if should in ("true", "false"):
        return ("transient" if transient else "fatal"), should == "true", retry_after
    return ("transient" if transient else "fatal"), transient, retry_after


def _describe(error: BaseException) -> str:
    if isinstance(error, openai.APIStatusError):
        return f"{type(error).__name__}: {error.message}"  # the message starts with "Error code: <status>"
    return f"{type(error).__name__}: {error}"


def _content(output: Any) -> str:
    """A tool output as the text the model reads."""
    if isinstance(output, str):
        return output
    if hasattr(output, "model_dump"):
        output = output.model_dump(mode="json")
    return json.dumps(output, ensure_ascii=False, default=str)


class _Loop:
    """The tool loop, once, as a generator of effects; :func:`_drive` and :func:`_adrive` perform them."""

    def __init__(self, spec: _Spec, guard: Guard) -> None:
        self.spec, self.guard = spec, guard
        self.result = LoopResult(conversation=spec.conversation)
        self.done: Verdict | None = None
        """The validated-done verdict, kept while the model is asked for its final answer."""
        self.ran: set[str] = set()
        """Tools whose call settled successfully (a forced function that ran is no longer forced)."""
        self.in_flight: Ticket | None = None
        """The execution reserved and not yet settled (what a cancellation leaves in flight)."""
        self.doing = ""

    # -- helpers

    def _end(self, verdict: Verdict) -> Outcome:
        return self.guard.end(verdict, result=self.result)

    def _tools_left(self) -> bool:
        return self.guard.used.tools < self.guard.budget.tool_executions

    def _tool_choice(self) -> ToolChoice:
        if self.done is not None or not self._tools_left():
            return "none"  # R12: no work remains that needs a tool, so nothing may force one
        forced = _forced(self.spec.tool_choice)
        if forced is not None and forced in self.ran:
            return "auto"
        return self.spec.tool_choice

    def _request(self) -> dict[str, Any]:
        spec = self.spec
        kwargs: dict[str, Any] = {"model": spec.model, spec.api.conversation_key: list(self.result.conversation)}
        if spec.tools:
            kwargs["tools"] = [spec.api.spec(tool) for tool in spec.tools.values()]
            choice = self._tool_choice()
            if choice is not None:
                kwargs["tool_choice"] = dict(choice) if isinstance(choice, Mapping) else choice
        if spec.max_output_tokens is not None:
            kwargs[spec.api.max_tokens_key] = spec.max_output_tokens
        kwargs.update(spec.options)
        return kwargs

    def _trace_model(self, result_class: str) -> None:
        guard = self.guard
        entry = TraceEntry(
            kind="model",
            result_class=result_class,
            revision=guard.revision,
            models=guard.used.models,
            tools=guard.used.tools,
            at=float(guard.clock()),
        )
        guard.store.append_trace(guard.task_id, entry)

    def _wait(self, seconds: float) -> Generator[_Effect, _Answer, Verdict | None]:
        deadline = self.guard.budget.deadline
        if deadline is not None and float(self.guard.clock()) + seconds >= deadline:
            return Verdict(Status.STOPPED, Reason.DEADLINE, f"a retry in {seconds:.3g}s would start past the deadline")
        if seconds > 0:
            self.doing = "a retry backoff"
            yield _Sleep(seconds)
            self.doing = ""
        return None

    def _invalid(self, proposed: _Proposed, kind: str, detail: str) -> Verdict:
        """Refuse a call that is not a valid call of an offered tool, through the guard's own validation (so it is
        refused, traced and ended like any other invalid proposal; nothing is reserved)."""
        verdict = self.guard.authorize({"tool": proposed.name, "kind": kind, "args": None})
        assert isinstance(verdict, Verdict), "a call without arguments is never authorized"
        return replace(verdict, detail=detail) if verdict.reason is Reason.INVALID_CALL else verdict

    # -- the loop

    def steps(self) -> _Steps:
        if self.guard.outcome is not None:
            return self.guard.outcome
        try:
            return (yield from self._run())
        except (Exception, GeneratorExit):
            raise
        except BaseException as exc:  # cancelled or interrupted: record what was in flight, then let it go on
            ticket = self.in_flight
            if ticket is not None:
                verdict = self.guard.fail(ticket, exc, reason=Reason.CANCELLED)
                in_flight: tuple[str, ...] = (ticket.call.call_id or ticket.call.tool,)
            else:
                during = self.doing or "the loop"
                verdict = Verdict(Status.STOPPED, Reason.CANCELLED, f"{type(exc).__name__} during {during}")
                in_flight = ()
            self.guard.end(verdict, in_flight=in_flight, result=self.result)
            raise

    def _run(self) -> _Steps:
        api, conversation = self.spec.api, self.result.conversation
        while True:
            response = yield from self._ask(self._request())
            if isinstance(response, Verdict):
                return self._end(self.done or response)  # a validated done stands without its final answer
            self.result.responses.append(response)
            turn = api.read(response)
            if isinstance(turn, str):
                return self._end(self.done or Verdict(Status.STOPPED, Reason.MODEL_BEHAVIOR, turn))
            if self.done is not None:  # the final answer after validated done; calls in it are not executed
                self.result.final_text = turn.text
                return self._end(self.done)
            if not turn.calls:
                self.result.final_text = turn.text
                why = " after the tool budget ran out" if self.spec.tools and not self._tools_left() else ""
                detail = f"the model gave a final answer{why}; the application never validated the task as done"
                return self._end(Verdict(Status.PARTIAL, Reason.UNVERIFIED_FINAL, detail))
            api.append_turn(conversation, response)
            ending: Verdict | None = None
            for proposed in turn.calls:
                if ending is not None:
                    api.append_output(conversation, proposed.call_id, _NOT_REACHED)
                    continue
                if self.done is not None:
                    api.append_output(conversation, proposed.call_id, _SKIPPED)
                    continue
                content, verdict = yield from self._call(proposed)
                if verdict is not None and verdict.status is not Status.COMPLETED:
                    ending = verdict
                    content = f"refused: {verdict.status}/{verdict.reason}: {verdict.detail}"
                elif verdict is not None:
                    self.done = verdict
                api.append_output(conversation, proposed.call_id, content)
            if ending is not None:
                return self._end(ending)
            if self.done is not None and not self.spec.final_answer:
                return self._end(self.done)

    def _ask(self, kwargs: dict[str, Any]) -> Generator[_Effect, _Answer, Any]:
        """One model request with the loop's own retries; returns the response or a :class:`Verdict`."""
        spec, guard = self.spec, self.guard
        retry = 0
        while True:
            reserved = 0.0
            if spec.price is not None:
                reserved = spec.price.cost(
                    input_tokens=spec.estimate(kwargs), output_tokens=spec.max_output_tokens or 0
                )
                grant = guard.store.reserve_cost(guard.task_id, reserved)
                if not grant.granted:
                    reason = grant.reason or Reason.COST_BUDGET
                    detail = grant.detail or (
                        f"the next request's worst case ({reserved:.6g}) would exceed the cost budget "
                        f"({guard.budget.cost}; used {grant.used.cost:.6g})"
                    )
                    return Verdict(Status.STOPPED, reason, detail)
            refused = guard.begin_turn()
            if refused is not None:
                if reserved:
                    guard.store.settle_cost(guard.task_id, reserved, 0.0)
                return refused
            self.result.attempts += 1
            self.doing = "a model request"
            answer = yield _Request(kwargs)
            self.doing = ""
            if answer.error is None:
                usage = spec.api.usage(answer.value)
                if spec.price is not None:
                    actual = (
                        reserved if usage is None else spec.price.cost(input_tokens=usage[0], output_tokens=usage[1])
                    )
                    guard.store.settle_cost(guard.task_id, reserved, actual)
                self._trace_model("answered")
                return answer.value
            error = answer.error
            if not isinstance(error, openai.OpenAIError):
                raise error  # a programming error (a bad request option...), not an outcome
            if isinstance(error, openai.APIStatusError):
                label = str(error.status_code)
                if spec.price is not None:
                    guard.store.settle_cost(guard.task_id, reserved, 0.0)  # an error response is not billed
            else:  # a timeout or a lost connection keeps its worst case: the request may have been served
                label = type(error).__name__
            kind, may_retry, retry_after = _model_failure(error)
            self._trace_model(f"error:{label}")
            detail = str(guard.storable(_describe(error)))
            if kind == "permission":
                return Verdict(Status.NEEDS_HUMAN, Reason.PERMISSION, f"{detail}: not retried, a human must act")
            if kind == "fatal":
                return Verdict(Status.STOPPED, Reason.FATAL, f"{detail}: the API refused the request")
            if not may_retry:
                return Verdict(Status.STOPPED, Reason.MODEL_ERROR, f"{detail}: the server says not to retry")
            if retry >= spec.model_retry.max_retries:
                return Verdict(Status.STOPPED, Reason.MODEL_ERROR, f"{detail} (after {retry + 1} attempts)")
            delay = spec.model_retry.delay(retry, retry_after=retry_after)
            if delay is None:
                why = f"{detail}: the server asks to wait {retry_after}s, more than max_retry_after"
                return Verdict(Status.STOPPED, Reason.MODEL_ERROR, why)
            stop = yield from self._wait(delay)
            if stop is not None:
                return stop
            retry += 1

    def _evidence(
        self, tool: GuardedTool, args: dict[str, Any], output: Any, failure: ToolFailure | None
    ) -> Generator[_Effect, _Answer, Callable[[Any, Any], Any]]:
        """The evidence of one attempt, as the ``verify`` that :meth:`Guard.settle` calls."""
        if tool.verify is None or (failure is not None and tool.kind != "write"):
            revision = self.guard.revision  # a failed read changed nothing; an unverified read proves nothing
            return lambda proposal, result: {"revision": revision, "done": False, "effect": "none"}
        answer = yield _Check(tool.verify, args, output)
        error = answer.error
        if error is not None:

            def raising(proposal: Any, result: Any) -> Any:
                raise error

            return raising
        return lambda proposal, result: answer.value

    def _call(self, proposed: _Proposed) -> Generator[_Effect, _Answer, tuple[str, Verdict | None]]:
        """Authorize, run (with the tool's retries), verify and settle one call: (tool output, verdict)."""
        guard = self.guard
        tool = self.spec.tools.get(proposed.name)
        if tool is None:
            known = ", ".join(self.spec.tools) or "none"
            return "", self._invalid(proposed, "read", f"unknown tool {proposed.name!r} (known: {known})")
        if proposed.arguments is None:
            return "", self._invalid(proposed, tool.kind, f"{tool.name}: the call is not a function call")
        try:
            args = json.loads(proposed.arguments) if proposed.arguments.strip() else {}
        except ValueError as exc:
            return "", self._invalid(proposed, tool.kind, f"{tool.name}: the arguments are not JSON ({exc})")
        if not isinstance(args, dict):
            return "", self._invalid(proposed, tool.kind, f"{tool.name}: the arguments are not a JSON object")
        misfit = tool.misfit(args)
        if misfit is not None:
            return "", self._invalid(proposed, tool.kind, misfit)
        operation_id = None
        if tool.kind == "write" and tool.operation_id is not None:
            with contextlib.suppress(Exception):  # no id is the guard's missing_operation_id
                operation_id = tool.operation_id(args)
        call = Call(tool.name, args, tool.kind, operation_id, proposed.call_id)
        ticket = guard.authorize(call)
        attempt = 1
        while True:
            if isinstance(ticket, Verdict):
                return "", ticket
            failure: ToolFailure | None = None
            if ticket.replay:  # a committed write: its stored result, never a second execution
                result = ticket.result
                output = result.get("output") if isinstance(result, Mapping) else result
            else:
                self.in_flight = ticket  # until settled: executed but unverified is still in flight
                answer = yield _Invoke(tool, args)
                if answer.error is None:
                    output = answer.value
                    result = {"status": "ok", "output": output}
                else:
                    kind = tool.retry.classify(answer.error)
                    if kind is None:
                        self.in_flight = None
                        return "", guard.fail(ticket, answer.error)
                    failure = output = ToolFailure(answer.error, kind, attempt)
                    status = "retryable" if kind == "transient" else "needs_human"
                    result = {"status": status, "error": guard.storable(str(failure))}
            verify = yield from self._evidence(tool, args, output, failure)
            verdict = guard.settle(ticket, result, verify)
            self.in_flight = None
            if verdict is not None:
                if failure is not None and failure.kind == "permission" and verdict.reason is Reason.APPROVAL:
                    detail = f"{tool.name}: {guard.storable(str(failure))}: a permission error is never retried"
                    verdict = replace(verdict, reason=Reason.PERMISSION, detail=detail)
                return (_content(output) if verdict.status is Status.COMPLETED else ""), verdict
            if failure is None:
                self.ran.add(tool.name)
                return _content(output), None
            if attempt > tool.retry.max_retries:
                note = f"error: {guard.storable(str(failure))} ({attempt} attempts; verified to have had no effect)"
                return note, None
            delay = tool.retry.delay(attempt - 1)
            stop = yield from self._wait(delay or 0.0)
            if stop is not None:
                return "", stop
            attempt += 1
            ticket = guard.authorize(call, retry_of=ticket)


# --------------------------------------------------------------------------- drivers


def _drive(steps: _Steps, perform: Callable[[_Effect], Any]) -> Outcome:
    """Run the loop synchronously."""
    try:
        effect = next(steps)
        while True:
            try:
                answer = _Answer(perform(effect))
            except Exception as exc:
                answer = _Answer(error=exc)
            except BaseException as exc:
                with contextlib.suppress(BaseException):
                    steps.throw(exc)
                raise
            effect = steps.send(answer)
    except StopIteration as stop:
        outcome: Outcome = stop.value
        return outcome


async def _adrive(steps: _Steps, perform: Callable[[_Effect], Awaitable[Any]]) -> Outcome:
    """Run the loop on the event loop."""
    try:
        effect = next(steps)
        while True:
            try:
                answer = _Answer(await perform(effect))
            except Exception as exc:
                answer = _Answer(error=exc)
            except BaseException as exc:  # asyncio.CancelledError: record the calls in flight, then propagate
                with contextlib.suppress(BaseException):
                    steps.throw(exc)
                raise
            effect = steps.send(answer)
    except StopIteration as stop:
        outcome: Outcome = stop.value
        return outcome


def _sync_performer(client: Any, api: _Api) -> Callable[[_Effect], Any]:
    create = api.endpoint(client.with_options(max_retries=0))  # the loop owns retries: one request, one turn

    def perform(effect: _Effect) -> Any:
        if isinstance(effect, _Request):
            return create(**effect.kwargs)
        if isinstance(effect, _Invoke):
            return effect.tool.fn(**effect.args)
        if isinstance(effect, _Check):
            return effect.verify(effect.args, effect.output)
        time.sleep(effect.seconds)
        return None

    return perform


def _async_performer(client: Any, api: _Api) -> Callable[[_Effect], Awaitable[Any]]:
    create = api.endpoint(client.with_options(max_retries=0))

    async def perform(effect: _Effect) -> Any:
        if isinstance(effect, _Request):
            return await create(**effect.kwargs)
        if isinstance(effect, _Sleep):
            await asyncio.sleep(effect.seconds)
            return None
        value = (
            effect.tool.fn(**effect.args) if isinstance(effect, _Invoke) else effect.verify(effect.args, effect.output)
        )
        return await value if inspect.isawaitable(value) else value

    return perform


# --------------------------------------------------------------------------- set-up


def _prepare(
    api: _Api,
    *,
    asynchronous: bool,
    model: str,
    conversation: Any,
    tools: Sequence[GuardedTool],
    guard: Guard | None,
    budget: Budget | None,
    store: Store | None,
    task_id: str | None,
    policy: Policy | None,
    tool_choice: ToolChoice,
    max_output_tokens: int | None,
    prices: Mapping[str, Price] | None,
    estimate_input_tokens: Callable[[Mapping[str, Any]], int],
    model_retry: RetryPolicy,
    final_answer: bool,
    request_options: Mapping[str, Any] | None,
) -> _Loop:
    if guard is not None and (budget is not None or store is not None or task_id is not None or policy is not None):
        raise ValueError("pass either guard= or budget= (with store=, task_id=, policy=), not both")
    if guard is None:
        if budget is None:
            raise ValueError("a guarded loop needs guard= or budget=: there is no unlimited default")
        guard = Guard(budget=budget, store=store, task_id=task_id, policy=policy)
    by_name: dict[str, GuardedTool] = {}
    for tool in tools:
        if not isinstance(tool, GuardedTool):
            raise TypeError(f"tools must be GuardedTool instances, got {type(tool).__name__}")
        if tool.name in by_name:
            raise ValueError(f"two tools are named {tool.name!r}")
        if not asynchronous and any(inspect.iscoroutinefunction(f) for f in (tool.fn, tool.verify)):
            raise TypeError(f"tool {tool.name!r} is async: use the async loop (arun_...) with openai.AsyncOpenAI")
        by_name[tool.name] = tool
    options = dict(request_options or {})
    clash = sorted(_GUARDED_KEYS & set(options))
    if clash:
        raise ValueError(f"request_options may not set {clash}: the loop sets them (streaming is not supported)")
    if max_output_tokens is not None and (isinstance(max_output_tokens, bool) or max_output_tokens < 1):
        raise ValueError(f"max_output_tokens must be a positive int, got {max_output_tokens!r}")
    price = None
    if prices is not None:
        price = price_for(prices, model)
        if price is None:
            raise ValueError(f"prices= has no entry for model {model!r}")
    if guard.budget.cost is not None:
        if price is None:
            raise ValueError(f"the task has a cost budget: give prices= with an entry for model {model!r}")
        if max_output_tokens is None:
            raise ValueError("the task has a cost budget: give max_output_tokens= to bound each request's worst case")
    if isinstance(conversation, str):
        conversation = [{"role": "user", "content": conversation}]
    spec = _Spec(
        api=api,
        model=model,
        conversation=[_dump(item) for item in conversation],
        tools=by_name,
        tool_choice=tool_choice,
        max_output_tokens=max_output_tokens,
        price=price,
        estimate=estimate_input_tokens,
        model_retry=model_retry,
        final_answer=final_answer,
        options=options,
    )
    return _Loop(spec, guard)


def run_chat_completions(
    client: openai.OpenAI,
    *,
    model: str,
    messages: Sequence[Any],
    tools: Sequence[GuardedTool],
    guard: Guard | None = None,
    budget: Budget | None = None,
    store: Store | None = None,
    task_id: str | None = None,
    policy: Policy | None = None,
    tool_choice: ToolChoice = None,
    max_output_tokens: int | None = None,
    prices: Mapping[str, Price] | None = None,
    estimate_input_tokens: Callable[[Mapping[str, Any]], int] = _estimate_input_tokens,
    model_retry: RetryPolicy = MODEL_RETRY,
    final_answer: bool = True,
    request_options: Mapping[str, Any] | None = None,
) -> Outcome:
    """Run a guarded Chat Completions tool loop to one :class:`~agents_loopguard.outcome.Outcome`.

    The task's limits come from ``guard=`` or from ``budget=`` (with ``store=``, ``task_id=``, ``policy=``).
    After the application validates done, the model is asked once more, with ``tool_choice="none"``, for its
    final answer (``final_answer=False`` skips it); ``Outcome.result`` is a :class:`LoopResult`.
    ``request_options`` are passed to every request (``temperature``, ``parallel_tool_calls``...).

    >>> import openai
    >>> from agents_loopguard import Budget
    >>> from tests.support.scripted_openai import ScriptedOpenAIServer, final_text, tool_call
    >>> orders = {}
    >>> confirm = GuardedTool("confirm_order", lambda order_id: orders.setdefault(order_id, "confirmed"),
    ...     parameters={"type": "object", "properties": {"order_id": {"type": "integer"}}},
    ...     kind="write", operation_id=lambda args: f"confirm-order-{args['order_id']}",
    ...     verify=lambda args, out: {"revision": 1, "done": orders.get(args["order_id"]) == "confirmed",
    ...                               "effect": "committed" if args["order_id"] in orders else "not_committed"})
    >>> with ScriptedOpenAIServer([tool_call("confirm_order", {"order_id": 42}), final_text("Confirmed.")]) as srv:
    ...     client = openai.OpenAI(base_url=srv.base_url, api_key="test")
    ...     outcome = run_chat_completions(client, model="gpt-4o-mini", tools=[confirm], tool_choice="required",
    ...         messages=[{"role": "user", "content": "Confirm order 42"}],
    ...         budget=Budget(model_turns=4, tool_executions=2))
    ...     sent = [r.body["tool_choice"] for r in srv.requests]
    >>> outcome.status, outcome.reason, outcome.result.final_text, sent
    (<Status.COMPLETED: 'completed'>, <Reason.VALIDATED_DONE: 'validated_done'>, 'Confirmed.', ['required', 'none'])
    """
    loop = _prepare(
        _Chat,
        asynchronous=False,
        model=model,
        conversation=messages,
        tools=tools,
        guard=guard,
        budget=budget,
        store=store,
        task_id=task_id,
        policy=policy,
        tool_choice=tool_choice,
        max_output_tokens=max_output_tokens,
        prices=prices,
        estimate_input_tokens=estimate_input_tokens,
        model_retry=model_retry,
        final_answer=final_answer,
        request_options=request_options,
    )
    return _drive(loop.steps(), _sync_performer(client, _Chat))


async def arun_chat_completions(
    client: openai.AsyncOpenAI,
    *,
    model: str,
    messages: Sequence[Any],
    tools: Sequence[GuardedTool],
    guard: Guard | None = None,
    budget: Budget | None = None,
    store: Store | None = None,
    task_id: str | None = None,
    policy: Policy | None = None,
    tool_choice: ToolChoice = None,
    max_output_tokens: int | None = None,
    prices: Mapping[str, Price] | None = None,
    estimate_input_tokens: Callable[[Mapping[str, Any]], int] = _estimate_input_tokens,
    model_retry: RetryPolicy = MODEL_RETRY,
    final_answer: bool = True,
    request_options: Mapping[str, Any] | None = None,
) -> Outcome:
    """:func:`run_chat_completions` with ``openai.AsyncOpenAI``; tools and ``verify`` may be coroutine functions.

    Cancelling the task records the outcome first (``stopped/cancelled``, or ``needs_reconciliation`` for a
    write in flight, whose call id is in ``Outcome.in_flight``), then lets ``CancelledError`` propagate.

    >>> import asyncio, openai
    >>> from agents_loopguard import Budget
    >>> from tests.support.scripted_openai import ScriptedOpenAIServer, final_text
    >>> async def main(url):
    ...     async with openai.AsyncOpenAI(base_url=url, api_key="test") as client:
    ...         return await arun_chat_completions(client, model="gpt-4o-mini", tools=[],
    ...             messages=[{"role": "user", "content": "hi"}], budget=Budget(model_turns=1, tool_executions=0))
    >>> with ScriptedOpenAIServer([final_text("Hello.")]) as srv:
    ...     outcome = asyncio.run(main(srv.base_url))
    >>> outcome.status, outcome.reason, outcome.result.final_text
    (<Status.PARTIAL: 'partial'>, <Reason.UNVERIFIED_FINAL: 'unverified_final'>, 'Hello.')
    """
    loop = _prepare(
        _Chat,
        asynchronous=True,
        model=model,
        conversation=messages,
        tools=tools,
        guard=guard,
        budget=budget,
        store=store,
        task_id=task_id,
        policy=policy,
        tool_choice=tool_choice,
        max_output_tokens=max_output_tokens,
        prices=prices,
        estimate_input_tokens=estimate_input_tokens,
        model_retry=model_retry,
        final_answer=final_answer,
        request_options=request_options,
    )
    return await _adrive(loop.steps(), _async_performer(client, _Chat))


def run_responses(
    client: openai.OpenAI,
    *,
    model: str,
    input: str | Sequence[Any],
    tools: Sequence[GuardedTool],
    instructions: str | None = None,
    guard: Guard | None = None,
    budget: Budget | None = None,
    store: Store | None = None,
    task_id: str | None = None,
    policy: Policy | None = None,
    tool_choice: ToolChoice = None,
    max_output_tokens: int | None = None,
    prices: Mapping[str, Price] | None = None,
    estimate_input_tokens: Callable[[Mapping[str, Any]], int] = _estimate_input_tokens,
    model_retry: RetryPolicy = MODEL_RETRY,
    final_answer: bool = True,
    request_options: Mapping[str, Any] | None = None,
) -> Outcome:
    """Run a guarded Responses API tool loop (``function_call`` items) to one Outcome.

    Same rules as :func:`run_chat_completions`. The whole input is sent on every request (output items and
    ``function_call_output`` items appended), so nothing depends on server-side conversation state.

    >>> import openai
    >>> from agents_loopguard import Budget
    >>> from tests.support.scripted_openai import ScriptedOpenAIServer, final_text, tool_call
    >>> lookup = GuardedTool("lookup_order", lambda order_id: {"order_id": order_id, "status": "shipped"},
    ...     parameters={"type": "object", "properties": {"order_id": {"type": "integer"}}},
    ...     verify=lambda args, out: {"revision": 1, "done": out["status"] == "shipped", "effect": "none"})
    >>> with ScriptedOpenAIServer([tool_call("lookup_order", {"order_id": 7}), final_text("Shipped.")]) as srv:
    ...     client = openai.OpenAI(base_url=srv.base_url, api_key="test")
    ...     outcome = run_responses(client, model="gpt-4o-mini", input="Where is order 7?", tools=[lookup],
    ...         budget=Budget(model_turns=3, tool_executions=1))
    >>> outcome.reason, outcome.value["output"]["status"], outcome.used.models, outcome.used.tools
    (<Reason.VALIDATED_DONE: 'validated_done'>, 'shipped', 2, 1)
    """
    loop = _prepare(
        _Responses,
        asynchronous=False,
        model=model,
        conversation=input,
        tools=tools,
        guard=guard,
        budget=budget,
        store=store,
        task_id=task_id,
        policy=policy,
        tool_choice=tool_choice,
        max_output_tokens=max_output_tokens,
        prices=prices,
        estimate_input_tokens=estimate_input_tokens,
        model_retry=model_retry,
        final_answer=final_answer,
        request_options={**({"instructions": instructions} if instructions is not None else {})}
        | dict(request_options or {}),
    )
    return _drive(loop.steps(), _sync_performer(client, _Responses))


async def arun_responses(
    client: openai.AsyncOpenAI,
    *,
    model: str,
    input: str | Sequence[Any],
    tools: Sequence[GuardedTool],
    instructions: str | None = None,
    guard: Guard | None = None,
    budget: Budget | None = None,
    store: Store | None = None,
    task_id: str | None = None,
    policy: Policy | None = None,
    tool_choice: ToolChoice = None,
    max_output_tokens: int | None = None,
    prices: Mapping[str, Price] | None = None,
    estimate_input_tokens: Callable[[Mapping[str, Any]], int] = _estimate_input_tokens,
    model_retry: RetryPolicy = MODEL_RETRY,
    final_answer: bool = True,
    request_options: Mapping[str, Any] | None = None,
) -> Outcome:
    """:func:`run_responses` with ``openai.AsyncOpenAI``; tools and ``verify`` may be coroutine functions.

    >>> import asyncio, openai
    >>> from agents_loopguard import Budget
    >>> from tests.support.scripted_openai import ScriptedOpenAIServer, http_error
    >>> async def main(url):
    ...     async with openai.AsyncOpenAI(base_url=url, api_key="test") as client:
    ...         return await arun_responses(client, model="gpt-4o-mini", input="hi", tools=[],
    ...             budget=Budget(model_turns=5, tool_executions=0))
    >>> with ScriptedOpenAIServer([http_error(401)]) as srv:
    ...     outcome = asyncio.run(main(srv.base_url))
    ...     attempts = len(srv.requests)
    >>> outcome.status, outcome.reason, attempts, outcome.used.models
    (<Status.NEEDS_HUMAN: 'needs_human'>, <Reason.PERMISSION: 'permission'>, 1, 1)
    """
    loop = _prepare(
        _Responses,
        asynchronous=True,
        model=model,
        conversation=input,
        tools=tools,
        guard=guard,
        budget=budget,
        store=store,
        task_id=task_id,
        policy=policy,
        tool_choice=tool_choice,
        max_output_tokens=max_output_tokens,
        prices=prices,
        estimate_input_tokens=estimate_input_tokens,
        model_retry=model_retry,
        final_answer=final_answer,
        request_options={**({"instructions": instructions} if instructions is not None else {})}
        | dict(request_options or {}),
    )
    return await _adrive(loop.steps(), _async_performer(client, _Responses))
