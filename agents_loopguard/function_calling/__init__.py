"""Raw OpenAI function calling under the guard: Chat Completions and the Responses API, sync and async.

For applications that call the ``openai`` client directly instead of the Agents SDK. One loop asks the model, runs
the tools it calls and feeds their outputs back; every step goes through the guarded run
(:class:`~agents_loopguard.run.GuardedRun`) and the engine, like every other adapter:

- every model *attempt* reserves a model turn first (the loop owns the retries: the client is used with
  ``max_retries=0``, so each HTTP request that leaves the process is one reserved turn);
- with a price table, every attempt reserves its worst-case cost first and settles it with the reported usage;
- ``tool_choice`` is the guard's: a ``"required"`` or forced function is sent only while work remains (R12);
- every tool call of a response (parallel ones too, in order) is proposed, executed, verified and settled;
  malformed arguments and unknown tools are refused as ``invalid_call``;
- the loop ends with one :class:`~agents_loopguard.values.outcome.Outcome`.

Modules: :mod:`.tools` (:class:`GuardedTool`), :mod:`.options` (:class:`LoopOptions`), :mod:`.wire` (the two API
styles), :mod:`.loop` (the loop as a generator of effects), :mod:`.entry` (the drivers and entry points).

>>> from agents_loopguard.function_calling import GuardedTool, LoopOptions
>>> GuardedTool("lookup_order", lambda order_id: {"order_id": order_id}).spec.kind
'read'
"""

from ..run import GuardStopped
from ..run.retry import MODEL_RETRY, RetryPolicy, ToolFailure, TransientToolError
from .entry import arun_chat_completions, arun_responses, run_chat_completions, run_responses
from .options import LoopOptions, ToolChoice
from .tools import GuardedTool, LoopResult

__all__ = [
    "MODEL_RETRY",
    "GuardStopped",
    "GuardedTool",
    "LoopOptions",
    "LoopResult",
    "RetryPolicy",
    "ToolChoice",
    "ToolFailure",
    "TransientToolError",
    "arun_chat_completions",
    "arun_responses",
    "run_chat_completions",
    "run_responses",
]
