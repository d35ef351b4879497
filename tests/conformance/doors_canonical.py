"""One refund, spelled differently (issue 28 item 2, R20): every framework's door gets the arguments of a write's
``operation_id(args)`` in their canonical (RFC 8785) form.

The model proposes the refund of order 1 as ``80`` and then as ``80.0`` with its keys reordered, and the refund of
order 2 as ``100`` and then as ``1e2`` (the Gemini wire, built from a mapping, carries ``100.0`` instead). The
tool's ``operation_id`` is the issue's, ``refund-<order>-<amount>``, which formats the amount itself: each second
spelling must name the first one's operation and get its stored result, so the receiver sees one refund per order
(``env.body("refund", "refund-<order>")``; invariant I2 counts them) and two bodies ran.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents import Agent
from agents.testing import assistant_message
from agents.testing import function_call as sdk_call
from google.adk.agents import LlmAgent
from langchain.agents import create_agent
from langchain_core.tools import tool

from agents_loopguard.adk import guarded_tool as adk_tool
from agents_loopguard.function_calling import GuardedTool
from agents_loopguard.langchain import LoopGuardMiddleware
from agents_loopguard.run import ToolSpec, declare_tool
from agents_loopguard.sdk import guarded_tool as sdk_tool
from tests.conformance import doors_adk, doors_langchain, doors_mcp, doors_raw, doors_sdk
from tests.conformance.kit import Door, Env, Observed
from tests.support.scripted_gemini import Reply
from tests.support.scripted_openai import ScriptedOpenAIServer, final_text, function_call, tool_calls

__all__ = ["DOORS"]

FINAL = "Refunded orders 1 and 2."
SPELLINGS = (
    '{"order": 1, "amount": 80}',
    '{"amount": 80.0, "order": 1}',
    '{"order": 2, "amount": 100}',
    '{"amount": 1e2, "order": 2}',
)
"""The model's arguments, as it writes them: each second spelling is the same call as the one before it."""
OPERATIONS = {"refund-1-80", "refund-2-100"}


def declaration(env: Env, name: str = "refund") -> ToolSpec:
    """The issue's declaration: the operation id formats the amount; the receiver says whether it committed (the
    revision: how many refunds it holds)."""

    def refunded(args: dict[str, Any], output: Any) -> dict[str, Any]:
        committed = env.committed(f"refund-{args['order']}")
        held = sum(1 for order in (1, 2) if env.committed(f"refund-{order}"))
        return {"revision": held, "done": False, "effect": "committed" if committed else "not_committed"}

    return declare_tool(
        name, kind="write", operation_id=lambda a: f"refund-{a['order']}-{a['amount']}", verify=refunded
    )


def refund_body(env: Env) -> Callable[[int, float], str]:
    def refund(order: int, amount: float) -> str:
        """Refund an amount on an order."""
        env.body("refund", f"refund-{order}")
        return f"refunded {amount} on order {order}"

    return refund


def once_each(env: Env, seen: Observed, operations: set[str] = OPERATIONS) -> Observed:
    """What only this door promises: in the ``run`` variant, one body and one committed operation per order."""
    if env.variant == "run":
        assert seen.bodies["refund"] == 2, seen.bodies
        assert {op.operation_id for op in env.store.operations(env.task_id)} == operations
    return seen


# --- the doors ---------------------------------------------------------------------------------------------------


def sdk(env: Env) -> Observed:
    """``@guarded_tool`` in the Agents SDK (``ScriptedModel``)."""
    spec = declaration(env)
    refund = sdk_tool(refund_body(env), spec)
    turns = [[sdk_call("refund", raw, call_id=f"c{n}")] for n, raw in enumerate(SPELLINGS)]
    (model,) = doors_sdk.models(env, [*turns, [assistant_message(FINAL)]])
    return once_each(env, doors_sdk.guarded(env, Agent(name="clerk", model=model, tools=[refund])))


def steps() -> list[Any]:
    """The spellings on the OpenAI wire (Chat Completions), then the answer."""
    return [*(tool_calls(function_call("refund", raw, f"c{n}")) for n, raw in enumerate(SPELLINGS)), final_text(FINAL)]


NUMBERS = {
    "type": "object",
    "properties": {"order": {"type": "integer"}, "amount": {"type": "number"}},
    "required": ["order", "amount"],
}


def raw(env: Env) -> Observed:
    """``run_chat_completions`` with the real ``openai`` client over HTTP."""
    spec = declaration(env)
    refund = GuardedTool(
        "refund", refund_body(env), parameters=NUMBERS, kind="write", operation_id=spec.operation_id, verify=spec.verify
    )
    return once_each(env, doors_raw.loop(env, "chat", "sync", steps(), tools=[refund]))


def langchain(env: Env) -> Observed:
    """``create_agent`` with ``ChatOpenAI`` over HTTP, the refund declared in the middleware's ``tools=``."""
    refund = tool(refund_body(env))
    guard = LoopGuardMiddleware(budget=env.budget, store=env.store, tools={"refund": declaration(env)})
    with ScriptedOpenAIServer(steps()) as server:
        env.count_requests(lambda: len(server.requests))
        agent = create_agent(doors_langchain.chat(server), tools=[refund], middleware=[guard])
        result = doors_langchain.invoke(agent, "invoke", doors_langchain.ask(), doors_langchain.thread(env))
        return once_each(env, env.observe(guard.outcome(result)))


def adk(env: Env) -> Observed:
    """``guarded_tool`` in Google ADK, ``Gemini`` over HTTP (the wire's arguments are a mapping: ``100.0``)."""
    spec = declaration(env)
    refund = adk_tool(refund_body(env), kind="write", operation_id=spec.operation_id, verify=spec.verify)
    turns = [
        doors_adk.call("refund", order=1, amount=80),
        Reply(calls=(("refund", {"amount": 80.0, "order": 1}),)),
        doors_adk.call("refund", order=2, amount=100),
        Reply(calls=(("refund", {"amount": 100.0, "order": 2}),)),
        doors_adk.say(FINAL),
    ]
    with doors_adk.gemini(env, clerk=turns) as models:
        return once_each(env, doors_adk.guarded(env, LlmAgent(name="clerk", model=models.model(), tools=[refund])))


def mcp(env: Env) -> Observed:
    """The Agents SDK's ``MCPServerStdio``: the upstream's ``pay`` (invoice, amount), a real process."""
    upstream = doors_mcp.Upstream(env)
    spellings = (
        '{"invoice": "1", "amount": 80}',
        '{"amount": 80.0, "invoice": "1"}',
        '{"invoice": "2", "amount": 100}',
        '{"amount": 1e2, "invoice": "2"}',
    )
    turns = [*([sdk_call("pay", raw, call_id=f"c{n}")] for n, raw in enumerate(spellings)), [assistant_message(FINAL)]]
    pay = declare_tool(
        "pay", kind="write", operation_id=lambda a: f"pay-{a['invoice']}-{a['amount']}", verify=upstream.verify("pay")
    )
    seen = doors_mcp.sdk_run(env, upstream, turns, tools={"pay": pay, "refund": upstream.declare("refund")})
    if env.variant == "run":
        assert seen.bodies["pay"] == 2, seen.bodies
        assert {op.operation_id for op in env.store.operations(env.task_id)} == {"pay-1-80", "pay-2-100"}
    return seen


DOC = "the same refund proposed as `80`, then `80.0` with its keys reordered, then `100`, then `1e2`"
DOORS = [
    Door("sdk", "canonical-arguments", DOC, sdk),
    Door("raw", "canonical-arguments", DOC, raw),
    Door("langchain", "canonical-arguments", DOC, langchain),
    Door("adk", "canonical-arguments", "the same refund proposed as `80`, then `80.0` with its keys reordered", adk),
    Door(
        "mcp",
        "canonical-arguments",
        "the same payment proposed as `80`, then `80.0` with its keys reordered, then `100`, then `1e2`",
        mcp,
        stop_at=2,
    ),
]
