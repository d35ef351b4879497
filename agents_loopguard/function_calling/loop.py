"""The raw function-calling loop, written once as a generator of effects, on the guarded run.

It asks the model, reads the function calls of its answer, has each one proposed, executed, verified and settled by
the :class:`~agents_loopguard.run.GuardedRun`, and feeds the outputs back, until the run ends. Every rule is the
guarded run's; this module only builds requests and reads responses (see :mod:`.wire`). The drivers
(:mod:`.entry`) perform the effects with ``openai.OpenAI`` or ``openai.AsyncOpenAI``.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any

from ..core import Call, Verdict
from ..model_errors import classify_model_error
from ..outcome import Outcome, Reason, Status
from ..run import Answer, Executed, GuardedRun, ModelAttempt, Sleep
from .options import LoopOptions
from .tools import GuardedTool, LoopResult
from .wire import Api, Proposed, Turn, content, dump

__all__ = ["Loop", "Request", "conversation_of", "in_flight_label"]


@dataclass(frozen=True)
class Request:
    """Send one model request (no client retries: the loop owns them)."""

    kwargs: dict[str, Any]
    timeout: float | None = None
    """Seconds left before the task's deadline: the request is sent with at most that timeout."""


def in_flight_label(call: Call) -> str:
    """The raw loop names a call in flight by the model's call id, as its conversation does."""
    return call.call_id or call.tool


class Loop:
    """One guarded loop: :meth:`steps` is the generator the drivers run."""

    def __init__(
        self,
        api: Api,
        run: GuardedRun,
        *,
        model: str,
        conversation: list[Any],
        tools: dict[str, GuardedTool],
        options: LoopOptions,
        request_options: dict[str, Any],
    ) -> None:
        self.api, self.run, self.model, self.tools, self.options = api, run, model, tools, options
        self.request_options = request_options
        self.result = LoopResult(conversation=conversation)
        self.doing = ""

    def steps(self) -> Generator[Any, Answer, Outcome]:
        """The loop. An interrupt (a cancellation, ``KeyboardInterrupt``) ends the task first, with the calls that
        were in flight, then propagates."""
        if self.run.guard.outcome is not None:
            return self.run.guard.outcome
        try:
            return (yield from self._turns())
        except (Exception, GeneratorExit):
            raise
        except BaseException as exc:
            during = self.doing or "the loop"
            verdict = Verdict(Status.STOPPED, Reason.CANCELLED, f"{type(exc).__name__} during {during}")
            self.run.end(verdict, result=self.result)
            raise

    def _end(self, verdict: Verdict) -> Outcome:
        return self.run.end(verdict, result=self.result, final_output=self.result.final_text)

    def _turns(self) -> Generator[Any, Answer, Outcome]:
        run, api, conversation = self.run, self.api, self.result.conversation
        while True:
            response = yield from self._ask()
            if isinstance(response, Verdict):
                return self._end(response)  # a validated done stands without its final answer
            self.result.responses.append(response)
            turn = api.read(response)
            if isinstance(turn, str):
                return self._end(Verdict(Status.STOPPED, Reason.MODEL_BEHAVIOR, turn))
            if run.done is not None:  # the final answer after validated done; calls in it are not executed
                self.result.final_text = turn.text
                return self._end(run.done)
            if not turn.calls:
                return self._end((yield from self._final(turn)))
            api.append_turn(conversation, response)
            for proposed in turn.calls:
                executed = yield from self._call(proposed)
                text = executed.message if executed.message is not None else content(executed.output)
                api.append_output(conversation, proposed.call_id, text)
            if run.verdict is not None:
                return self._end(run.verdict)
            if run.done is not None and not self.options.final_answer:
                return self._end(run.done)

    def _final(self, turn: Turn) -> Generator[Any, Answer, Verdict]:
        self.result.final_text = turn.text
        check = self.run.final_check(self.options.verify_output, turn.text)
        answer = (yield check) if check is not None else None
        return self.run.final_verdict(turn.text, answer, tools_offered=bool(self.tools))

    def _request(self, tool_choice: Any) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.model, self.api.conversation_key: list(self.result.conversation)}
        if self.tools:
            kwargs["tools"] = [self.api.spec(tool) for tool in self.tools.values()]
            if tool_choice is not None:
                kwargs["tool_choice"] = dict(tool_choice) if isinstance(tool_choice, Mapping) else tool_choice
        if self.options.max_output_tokens is not None:
            kwargs[self.api.max_tokens_key] = self.options.max_output_tokens
        kwargs.update(self.request_options)
        return kwargs

    def _begin(self) -> ModelAttempt | Verdict:
        options = self.options
        requested = options.tool_choice if self.tools else None
        return self.run.begin_model_attempt(
            requested,
            offers_tools=bool(self.tools),
            model=self.model,
            request=lambda: self._request(requested),
            max_output_tokens=options.max_output_tokens,
        )

    def _ask(self) -> Generator[Any, Answer, Any]:
        """One model request with the loop's own retries; returns the response or a :class:`Verdict`."""
        run, retry_policy = self.run, self.options.model_retry
        retry = 0
        while True:
            attempt = self._begin()
            if isinstance(attempt, Verdict):
                return attempt
            self.result.attempts += 1
            self.doing = "a model request"
            answer = yield Request(self._request(attempt.tool_choice), timeout=attempt.timeout)
            self.doing = ""
            if answer.error is None:
                run.end_model_attempt(attempt, usage=self.api.usage(answer.value))
                return answer.value
            failure = classify_model_error(answer.error)
            if failure is None:
                raise answer.error  # a programming error (a bad request option...), not an outcome
            run.end_model_attempt(attempt, failure=failure)
            wait = run.model_retry(failure, retry=retry, policy=retry_policy)
            if isinstance(wait, Verdict):
                return wait
            if wait > 0:
                self.doing = "a retry backoff"
                yield Sleep(wait)
                self.doing = ""
            retry += 1

    def _call(self, proposed: Proposed) -> Generator[Any, Answer, Executed]:
        """Propose, execute (with the tool's retries), verify and settle one call of the response."""
        run = self.run
        tool = self.tools.get(proposed.name)
        if tool is None:
            known = ", ".join(self.tools) or "none"
            return run.refuse_invalid(proposed.name, "read", f"unknown tool {proposed.name!r} (known: {known})")
        if proposed.arguments is None:
            return run.refuse_invalid(tool.name, tool.kind, f"{tool.name}: the call is not a function call")
        call = run.propose(tool.spec, tool.name, proposed.arguments, proposed.call_id, check=tool.misfit)
        if isinstance(call, Executed):
            return call
        self.doing = f"the call of {tool.name}"
        executed = yield from run.execute(tool.spec, call)
        self.doing = ""
        return executed


def conversation_of(conversation: Any) -> list[Any]:
    """The caller's conversation as plain JSON items (a string is one user message)."""
    if isinstance(conversation, str):
        conversation = [{"role": "user", "content": conversation}]
    return [dump(item) for item in conversation]
