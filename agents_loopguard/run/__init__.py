"""The guarded run, framework-neutral and the only door of every adapter: one run's options (:mod:`.options`), its
state and rules (:mod:`.guarded`, on :mod:`.state` and :mod:`.tool_calls`), the model request (:mod:`.requests`),
tool executions as effects (:mod:`.effects`), tool declarations (:mod:`.declarations`), durable engines' replays
(:mod:`.durable`), bounded retries (:mod:`.retry`), what a model error means (:mod:`.model_errors`) and how a run
ends (:mod:`.conclusion`). Nothing here imports a framework."""

from .conclusion import NO_OUTPUT, Ending, StopKind, conclude, conclude_now
from .declarations import UNDECLARED, ToolSpec, Verify, declare_tool
from .durable import DurableSteps
from .effects import (
    Answer,
    Check,
    DeadlineExceeded,
    Execute,
    Sleep,
    adrive,
    drive,
    perform_check,
    perform_check_async,
    within_deadline,
)
from .guarded import Executed, GuardedRun, GuardStopped, ModelAttempt, UnguardedTool
from .options import OnPause, OnRefusal, OutputVerifier, Release, RunFields, RunFieldsBase, RunOptions
from .requests import Failed, Send, model_request
from .retry import MODEL_RETRY, NO_RETRY, RetryPolicy

__all__ = [
    "MODEL_RETRY",
    "NO_OUTPUT",
    "NO_RETRY",
    "UNDECLARED",
    "Answer",
    "Check",
    "DeadlineExceeded",
    "DurableSteps",
    "Ending",
    "Execute",
    "Executed",
    "Failed",
    "GuardStopped",
    "GuardedRun",
    "ModelAttempt",
    "OnPause",
    "OnRefusal",
    "OutputVerifier",
    "Release",
    "RetryPolicy",
    "RunFields",
    "RunFieldsBase",
    "RunOptions",
    "Send",
    "Sleep",
    "StopKind",
    "ToolSpec",
    "UnguardedTool",
    "Verify",
    "adrive",
    "conclude",
    "conclude_now",
    "declare_tool",
    "drive",
    "model_request",
    "perform_check",
    "perform_check_async",
    "within_deadline",
]
