"""The LangChain v1 adapter (``pip install 'agents-loopguard[langchain]'``): one ``AgentMiddleware`` for
``langchain.agents.create_agent``, sync and async, translation onto the guarded run (:mod:`agents_loopguard.run`).

>>> from langchain.agents import create_agent
>>> from agents_loopguard import Budget, MemoryStore
>>> from agents_loopguard.langchain import LoopGuardMiddleware
>>> guard = LoopGuardMiddleware(budget=Budget(model_turns=6, tool_executions=4), store=MemoryStore())
>>> guard.options.on_refusal
'end'

See docs/langchain.md: the mapping of LangChain's thread and run limits onto one task's budget, approvals through
``HumanInTheLoopMiddleware`` and ``Command(resume=...)``, and what each of their limit middlewares becomes.
"""

from .approvals import GuardedHumanInTheLoop
from .middleware import LoopGuardMiddleware, LoopGuardState, outcome_of
from .options import LangChainFields, LangChainOptions

__all__ = [
    "GuardedHumanInTheLoop",
    "LangChainFields",
    "LangChainOptions",
    "LoopGuardMiddleware",
    "LoopGuardState",
    "outcome_of",
]
