"""The raw function-calling loop, written once as a generator of effects, on the guarded run.

It asks the model, reads the function calls of its answer, has each one proposed, executed, verified and settled by
the :class:`~agents_loopguard.run.GuardedRun`, and feeds the outputs back, until the run ends. Every rule is the
guarded run's; this module only builds requests and reads responses (see :mod:`.wire`). The drivers
(:mod:`.entry`) perform the effects with ``openai.OpenAI`` or ``openai.AsyncOpenAI``.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

from ..run import Answer, Executed, GuardedRun, ToolSpec
from ..run.conclusion import NO_OUTPUT, Ending, conclude, conclude_now
from ..run.requests import Failed, model_request
from ..values.calls import Call
from ..values.outcome import Outcome
from .options import LoopOptions
from .tools import GuardedTool, LoopResult
from .wire import Api, Proposed, content, dump

__all__ = ["Loop", "conversation_of", "in_flight_label"]


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
        specs: dict[str, ToolSpec],
        options: LoopOptions,
        request_options: dict[str, Any],
    ) -> None:
        self.api, self.run, self.model, self.tools, self.options = api, run, model, tools, options
        self.specs = specs
        """Each tool's declaration in this run (its own, or the run's by name: ``GuardedRun.declaration``)."""
        self.request_options = request_options
        self.result = LoopResult(conversation=conversation)
        self.doing = ""

    def steps(self) -> Generator[Any, Answer, Outcome]:
        """The loop, then its conclusion (:func:`~agents_loopguard.run.conclusion.conclude`). An exception ends the
        task first (a programming error: ``stopped/fatal``, re-raised); an interrupt (a cancellation,
        ``KeyboardInterrupt``) ends it with the calls that were in flight, then propagates."""
        if self.run.guard.outcome is not None:
            return self.run.guard.outcome
        try:
            ending = yield from self._turns()
        except GeneratorExit:
            raise
        except Exception as exc:
            ending = Ending(error=exc, result=self.result)
        except BaseException as exc:
            during = self.doing or "the loop"
            detail = f"{type(exc).__name__} during {during}"
            conclude_now(self.run, Ending(cancelled=True, detail=detail, result=self.result))
            raise
        return (yield from conclude(self.run, ending))

    def _ending(self, **seen: Any) -> Ending:
        output = self.result.final_text if self.result.final_text is not None else NO_OUTPUT
        return Ending(**{"output": output, "result": self.result, "tools_offered": bool(self.tools), **seen})

    def _turns(self) -> Generator[Any, Answer, Ending]:
        run, api, conversation = self.run, self.api, self.result.conversation
        while True:
            response = yield from self._ask()
            if isinstance(response, Failed):
                return self._ending(error=response.error)  # the run's verdict, or the failure it recorded
            self.result.responses.append(response)
            turn = api.read(response)
            if isinstance(turn, str):
                return self._ending(stopped_by="model_behavior", detail=turn)
            if run.done is not None:  # the final answer after validated done; calls in it are not executed
                self.result.final_text = turn.text
                return self._ending()
            if not turn.calls:
                self.result.final_text = turn.text
                return self._ending(output=turn.text)
            api.append_turn(conversation, response)
            for proposed in turn.calls:
                executed = yield from self._call(proposed)
                text = executed.message if executed.message is not None else content(executed.output)
                api.append_output(conversation, proposed.call_id, text)
            if run.verdict is not None or (run.done is not None and not self.options.final_answer):
                return self._ending()

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

    def _ask(self) -> Generator[Any, Answer, Any]:
        """One model request (:func:`~agents_loopguard.run.requests.model_request`: each attempt reserved, the
        loop's own retries); returns the response or :class:`~agents_loopguard.run.requests.Failed`."""
        options = self.options
        requested = options.tool_choice if self.tools else None
        steps = model_request(
            self.run,
            requested,
            offers_tools=bool(self.tools),
            model=self.model,
            request=lambda: self._request(requested),
            max_output_tokens=options.max_output_tokens,
            retry=options.model_retry,
            usage=self.api.usage,
            build=self._attempt,
        )
        self.doing = "a model request"
        try:
            response = yield from steps
        finally:
            self.doing = ""
        return response

    def _attempt(self, tool_choice: Any) -> dict[str, Any]:
        """The request of one attempt (each one is sent, and counted in ``LoopResult.attempts``)."""
        self.result.attempts += 1
        return self._request(tool_choice)

    def _call(self, proposed: Proposed) -> Generator[Any, Answer, Executed]:
        """Propose, execute (with the tool's retries), verify and settle one call of the response."""
        run = self.run
        tool = self.tools.get(proposed.name)
        if tool is None:
            known = ", ".join(self.tools) or "none"
            return run.refuse_invalid(proposed.name, "read", f"unknown tool {proposed.name!r} (known: {known})")
        spec = self.specs[tool.name]
        if proposed.arguments is None:
            return run.refuse_invalid(tool.name, spec.kind, f"{tool.name}: the call is not a function call")
        call = run.propose(spec, tool.name, proposed.arguments, proposed.call_id, check=tool.misfit)
        if isinstance(call, Executed):
            return call
        self.doing = f"the call of {tool.name}"
        executed = yield from run.execute(spec, call)
        self.doing = ""
        return executed


def conversation_of(conversation: Any) -> list[Any]:
    """The caller's conversation as plain JSON items (a string is one user message)."""
    if isinstance(conversation, str):
        conversation = [{"role": "user", "content": conversation}]
    return [dump(item) for item in conversation]
