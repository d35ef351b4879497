"""A scripted ADK model for examples and unit tests, without an API key: :class:`ScriptedLlm` answers each LLM
call with the next step of its script and records the requests it got (the tests also run ADK's own ``Gemini``
model over real HTTP against a scripted Gemini endpoint).

>>> import asyncio
>>> from google.adk.agents import LlmAgent
>>> from agents_loopguard import Budget, MemoryStore
>>> from agents_loopguard.adk import guarded_tool, run_guarded
>>> def lookup(order: int) -> str:
...     '''Look an order up.'''
...     return "shipped"
>>> model = ScriptedLlm([calls(("lookup", {"order": 42})) for _ in range(5)])
>>> agent = LlmAgent(name="clerk", model=model, tools=[guarded_tool(lookup)])
>>> outcome = asyncio.run(run_guarded(agent, "order 42?", budget=Budget(6, 6), store=MemoryStore()))
>>> outcome.reason, outcome.used.tools, len(model.requests)
(<Reason.SAME_CALL: 'same_call'>, 2, 3)
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from typing import Any

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from pydantic import PrivateAttr

__all__ = ["ScriptedLlm", "calls", "text"]

Step = LlmResponse | Exception | Callable[[LlmRequest], "LlmResponse | Exception"]


def _usage() -> types.GenerateContentResponseUsageMetadata:
    return types.GenerateContentResponseUsageMetadata(
        prompt_token_count=10, candidates_token_count=5, total_token_count=15
    )


def calls(*pairs: tuple[str, Mapping[str, Any]]) -> LlmResponse:
    """A model turn asking for these function calls (``(name, args)``)."""
    parts = [types.Part(function_call=types.FunctionCall(name=name, args=dict(args))) for name, args in pairs]
    return LlmResponse(content=types.Content(role="model", parts=parts), usage_metadata=_usage())


def text(answer: str) -> LlmResponse:
    """A model turn with a final text answer."""
    parts = [types.Part(text=answer)]
    return LlmResponse(content=types.Content(role="model", parts=parts), usage_metadata=_usage())


class ScriptedLlm(BaseLlm):
    """Answers each call with the next step: a response, an exception to raise, or a function of the request.
    A call past the end of the script raises ``AssertionError``."""

    model: str = "scripted"
    _script: list[Step] = PrivateAttr(default_factory=list)
    _requests: list[LlmRequest] = PrivateAttr(default_factory=list)

    def __init__(self, script: Iterable[Step], **fields: Any) -> None:
        super().__init__(**fields)
        self._script = list(script)

    @property
    def requests(self) -> list[LlmRequest]:
        """The requests received, in order (copies, as they were sent)."""
        return self._requests

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self._requests.append(llm_request.model_copy(deep=True))
        if not self._script:
            raise AssertionError(f"the script is over: request {len(self._requests)} was not expected")
        step = self._script.pop(0)
        if callable(step) and not isinstance(step, LlmResponse):
            step = step(llm_request)
        if isinstance(step, Exception):
            raise step
        yield step
