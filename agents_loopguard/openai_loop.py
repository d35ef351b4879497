"""The raw function-calling entry points under their first name (kept for existing imports); the code lives in
:mod:`agents_loopguard.function_calling`.

>>> import agents_loopguard.openai_loop as openai_loop
>>> from agents_loopguard import function_calling
>>> openai_loop.run_chat_completions is function_calling.run_chat_completions
True
>>> openai_loop.RetryPolicy(max_retries=2).attempts
3
"""

from .function_calling import (
    MODEL_RETRY,
    GuardedTool,
    GuardStopped,
    LoopOptions,
    LoopResult,
    RetryPolicy,
    ToolChoice,
    ToolFailure,
    TransientToolError,
    arun_chat_completions,
    arun_responses,
    run_chat_completions,
    run_responses,
)

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
