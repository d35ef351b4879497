"""OpenAI Agents SDK adapter: decorate tools, run, read one Outcome.

>>> from agents_loopguard.sdk import guarded_tool, tool_spec
>>> @guarded_tool
... def search_docs(query: str) -> list[str]:
...     '''Search the policy documents.'''
...     return []
>>> search_docs.name, tool_spec(search_docs).kind
('search_docs', 'read')

* :func:`guarded_tool` / :func:`guard_tool`: function tools that declare their kind, a write's operation id, the
  application's ``verify`` and a per-tool ``max_executions`` (every ``function_tool`` keyword too); a refused call
  never runs the body. :mod:`agents_loopguard.sdk.testing` calls one in a unit test, without a model.
* :func:`run_guarded` / :func:`run_guarded_sync` / :func:`run_guarded_streamed`: run an agent under the task's
  guard (every model attempt and tool execution reserved first; forced ``tool_choice`` released once no work
  remains) and map how the run ended to one :class:`~agents_loopguard.Outcome`.
* :class:`LoopGuard`: the same guard attached to your own ``Runner.run`` (``hooks=guard.hooks(yours)``,
  ``run_config=guard.run_config(yours)``), the outcome read from the result or from the exception the SDK raised.
* :func:`persist_pause` / :func:`resume_guarded` / :func:`resume_guarded_sync`: an approval pause is stored with
  the task's budget (by default) and resumed once, in any process, with the counters continuing.
"""

from ..ops.approvals import ResumeError
from ..run import OnRefusal, ToolSpec
from ._internal import current_guard
from .attach import LoopGuard
from .decided import ResumedPause, resume_decided, resume_decided_sync
from .hooks import GuardHooks
from .model import GuardedModel, GuardedModelProvider, register_step_model
from .pauses import pending_calls, persist_pause
from .resume import resume_guarded, resume_guarded_sync
from .run import GuardedStream, GuardStopped, run_guarded, run_guarded_streamed, run_guarded_sync
from .tools import guard_tool, guarded_tool, tool_spec

__all__ = [
    "GuardHooks",
    "GuardStopped",
    "GuardedModel",
    "GuardedModelProvider",
    "GuardedStream",
    "LoopGuard",
    "OnRefusal",
    "ResumeError",
    "ResumedPause",
    "ToolSpec",
    "current_guard",
    "guard_tool",
    "guarded_tool",
    "pending_calls",
    "persist_pause",
    "register_step_model",
    "resume_decided",
    "resume_decided_sync",
    "resume_guarded",
    "resume_guarded_sync",
    "run_guarded",
    "run_guarded_streamed",
    "run_guarded_sync",
    "tool_spec",
]
