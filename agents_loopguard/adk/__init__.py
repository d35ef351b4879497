"""Google ADK adapter: the guard as a ``BasePlugin`` for ``Runner(..., plugins=[...])``, tools that declare what the
guard needs, and one entry point that runs an agent and returns the :class:`~agents_loopguard.Outcome`.

* :class:`LoopGuardPlugin`: each LLM call reserved before it is sent (``ANY`` released once no work remains),
  each tool execution authorized, verified and settled, one outcome per invocation (:meth:`LoopGuardPlugin.outcome`).
* :func:`guarded_tool`: ADK's ``FunctionTool`` with its kind, a write's ``operation_id``, ``verify``,
  ``max_executions`` and ``require_confirmation``.
* :func:`agent_callbacks`: the same guard as one ``LlmAgent``'s callbacks, for those who prefer them.
* :func:`run_guarded`: a ``Runner`` with the plugin, one invocation, its outcome.
"""

from .callbacks import agent_callbacks
from .plugin import LoopGuardPlugin
from .run import run_guarded
from .tools import GuardedFunctionTool, guarded_tool, tool_spec

__all__ = ["GuardedFunctionTool", "LoopGuardPlugin", "agent_callbacks", "guarded_tool", "run_guarded", "tool_spec"]
