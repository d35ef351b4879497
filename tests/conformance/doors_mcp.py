"""MCP's doors: an MCP server's tools reached through a framework (the Agents SDK's ``Agent(mcp_servers=[...])``,
Google ADK's ``McpToolset``), the upstream a real FastMCP-style payment server process (tests/support/mcp_upstream.py).

The tool bodies run in the upstream's process, so they are counted there: the upstream appends every ``tools/call``
it receives to its own log and every effect (a refund, a payment) to its receiver's ledger before it answers. A row
copies those counts into the env before each model request (the model's responder is the row's checkpoint) and at
the end. The scenario is issue 27's reproduction: the first write records its effect and then loses its answer,
and the model asks for the same write again.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import agents
from agents import Agent
from agents.mcp import MCPServerStdio
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from google.adk.agents import LlmAgent
from google.adk.models.google_llm import Gemini
from google.adk.tools.mcp_tool.mcp_session_manager import StdioConnectionParams
from google.adk.tools.mcp_tool.mcp_toolset import McpToolset
from mcp import StdioServerParameters

from agents_loopguard import Outcome, adk
from agents_loopguard.run import declare_tool
from agents_loopguard.sdk import run_guarded
from tests.conformance.kit import Door, Env, Observed
from tests.support.adk import GEMINI
from tests.support.mcp_upstream import read_lines
from tests.support.scripted_gemini import Dynamic, Reply, ScriptedGeminiServer, calls, text
from tests.support.wire import gemini_http_options

__all__ = ["DOORS"]

agents.set_tracing_disabled(True)
ROOT = Path(__file__).resolve().parents[2]
FINAL = "Done."
KEYS = {"refund": "order_id", "pay": "invoice", "wire_transfer": "account"}
"""Each write of the upstream -> the argument that names its operation (``<tool>-<value>``)."""
LOOKUP = {"lookup": "an invoice lookup, read-only though the server does not say so"}
"""The opt-out of ``lookup`` (no annotations: a possible write by the spec's defaults)."""


class Upstream:
    """The payment server a row runs (a real process, started by the framework's MCP client), and its logs."""

    def __init__(self, env: Env, *flags: str, prefix: str = "") -> None:
        self.calls = env.tmp_path / "calls.jsonl"
        self.effects = env.tmp_path / "effects.jsonl"
        self.flags = flags
        self.prefix = prefix
        """Put before a tool's name where the framework renames it (the env counts bodies by the name it sees)."""

    def command(self) -> list[str]:
        return ["-m", "tests.support.mcp_upstream", "--log", str(self.calls), "--effects", str(self.effects)]

    def stdio(self, **server_options: Any) -> MCPServerStdio:
        """The Agents SDK's stdio client of this server, as a user builds it."""
        params: Any = {"command": sys.executable, "args": [*self.command(), *self.flags], "cwd": str(ROOT)}
        return MCPServerStdio(params=params, name="payments", client_session_timeout_seconds=30, **server_options)

    def committed(self, operation_id: str) -> bool:
        """The receiver's ledger: did ``operation_id`` take effect? (a write's ``verify`` asks it)."""
        return operation_id in self.operations()

    def operations(self) -> Counter[str]:
        return Counter(f"{e['tool']}-{e['args'][KEYS[e['tool']]]}" for e in read_lines(self.effects))

    def sync(self, env: Env) -> None:
        """The env's counters set from the upstream's logs: bodies that ran, effects at the receiver."""
        bodies = Counter(self.prefix + str(entry["tool"]) for entry in read_lines(self.calls))
        writes = self.operations()
        with env._lock:
            env.bodies.clear()
            env.bodies.update(bodies)
            env.writes.clear()
            env.writes.update(writes)

    def verify(self, tool: str) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
        """A write's ``verify``: the receiver says whether the operation took effect, whatever the answer was."""

        def verify(args: dict[str, Any], result: Any) -> dict[str, Any]:
            committed = self.committed(f"{tool}-{args[KEYS[tool]]}")
            return {"revision": 2, "done": False, "effect": "committed" if committed else "not_committed"}

        return verify

    def declare(self, tool: str, name: str | None = None) -> Any:
        """``tool`` declared a write (under ``name``, the name the model sees, when a prefix changes it)."""
        key = KEYS[tool]
        op = lambda a: f"{tool}-{a[key]}"  # noqa: E731
        return declare_tool(name or tool, kind="write", operation_id=op, verify=self.verify(tool))


def scripted(env: Env, upstream: Upstream, turns: Sequence[Any]) -> ScriptedModel:
    """A ``ScriptedModel`` whose every answer is a checkpoint: the upstream's counts are copied into the env first."""

    def step(output: Any) -> ModelStep:
        def responder(_call: Any) -> Any:
            upstream.sync(env)
            env.checkpoint()
            return output

        return ModelStep(responder=responder)

    model = ScriptedModel([step(turn) for turn in turns])
    env.count_requests(lambda: len(model.calls))
    return model


def twice(tool: str, args: dict[str, Any]) -> list[Any]:
    """Search (a trusted read), then the write, then the same write again after its answer was lost; answer."""
    return [
        [function_call("search", {"query": "order 1"}, call_id="c1")],
        [function_call(tool, args, call_id="c2")],
        [function_call(tool, args, call_id="c3")],
        [assistant_message(FINAL)],
    ]


def sdk_run(
    env: Env, upstream: Upstream, turns: Sequence[Any], *, server_options: dict[str, Any] | None = None, **fields: Any
) -> Observed:
    """``Agent(mcp_servers=[MCPServerStdio(...)])`` run by ``run_guarded`` under the env's task."""

    async def main() -> Outcome:
        async with upstream.stdio(**(server_options or {})) as server:
            agent = Agent(name="clerk", model=scripted(env, upstream, turns), mcp_servers=[server])
            declared = {tool: upstream.declare(tool) for tool in ("pay", "refund")}
            options = env.options(mcp_trusted=["payments"], unguarded=LOOKUP, tools=declared)
            options.update(fields)
            return await run_guarded(agent, "Refund order 1.", **options)

    outcome = asyncio.run(main())
    upstream.sync(env)
    return env.observe(outcome)


def refused(build: Callable[[Env], Observed]) -> Callable[[Env], Observed]:
    """A door the adapter refuses before the model is asked: the error's message is what the row observed."""

    def refusing(env: Env) -> Observed:
        try:
            seen = build(env)
        except agents.exceptions.UserError as exc:
            seen = env.observe(None)
            seen.refused = str(exc)
        return seen

    return refusing


def sdk_refund(env: Env) -> Observed:
    """Issue 27's first reproduction: the refund records its effect, loses its answer, and is asked again."""
    return sdk_run(env, Upstream(env, "--lose", "1"), twice("refund", {"order_id": 1}))


def sdk_payment(env: Env) -> Observed:
    """Issue 27's second reproduction: the same payment sent twice."""
    return sdk_run(env, Upstream(env, "--lose", "1"), twice("pay", {"invoice": "1", "amount": 1}))


def sdk_undeclared(env: Env) -> Observed:
    """Nobody declared ``refund`` (annotated ``readOnlyHint: false``): the run is refused before the model is asked."""
    upstream = Upstream(env)
    return sdk_run(env, upstream, twice("refund", {"order_id": 1}), tools={"pay": upstream.declare("pay")})


def opted_out(env: Env, seen: Observed, tool: str) -> Observed:
    """The opt-out's records: one ``unguarded`` entry per run of ``tool``, never a tool entry of its own (it used to
    be written as one: a body counted as two executions)."""
    recorded = [(e.tool, e.result_class) for e in env.store.trace(env.task_id) if e.kind == "unguarded"]
    assert recorded == [(tool, "undeclared")] * seen.bodies[tool], recorded
    return seen


def lookups(prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
    return [(f"{prefix}lookup", {"invoice": "1"}), (f"{prefix}lookup", {"invoice": "2"})]


def sdk_unguarded(env: Env) -> Observed:
    """``lookup`` (no annotations: a possible write) opted out with why (``unguarded=``): it runs as a read nobody
    verifies, each run reserved and recorded."""
    turns = [[function_call(t, a, call_id=f"c{n}")] for n, (t, a) in enumerate(lookups())]
    return opted_out(env, sdk_run(env, Upstream(env), [*turns, [assistant_message(FINAL)]]), "lookup")


def sdk_retries(env: Env) -> Observed:
    """A server built with the SDK's own retries (``max_retry_attempts=2``) re-sends a call under one reservation."""
    turns = twice("refund", {"order_id": 1})
    return sdk_run(env, Upstream(env), turns, server_options={"max_retry_attempts": 2})


def sdk_tool_added(env: Env) -> Observed:
    """After the first ``search`` the server adds ``wire_transfer``: judged at its listing, refused when called."""
    upstream = Upstream(env, "--grow")
    turns = [
        [function_call("search", {"query": "order 1"}, call_id="c1")],
        [function_call("wire_transfer", {"account": "X", "amount": 5}, call_id="c2")],
        [assistant_message(FINAL)],
    ]
    return sdk_run(env, upstream, turns, on_refusal="continue")


# --- Google ADK: McpToolset ----------------------------------------------------------------------------------

PREFIX = "payments"
"""ADK names no MCP server: a toolset is known by its ``tool_name_prefix`` (the name ``mcp_trusted`` takes)."""


def adk_turns(tool: str, args: dict[str, Any]) -> list[Reply]:
    """:func:`twice`, as the Gemini wire carries it (tool names with the toolset's prefix)."""
    return [
        calls((f"{PREFIX}_search", {"query": "order 1"})),
        calls((f"{PREFIX}_{tool}", args)),
        calls((f"{PREFIX}_{tool}", args)),
        text(FINAL),
    ]


def adk_run(
    env: Env, upstream: Upstream, turns: Sequence[Reply], *, declared: Sequence[str] = ("pay", "refund")
) -> Observed:
    """``LlmAgent(tools=[McpToolset(...)])`` run by ``agents_loopguard.adk.run_guarded`` under the env's task, its
    model ADK's ``Gemini`` over HTTP against the scripted server (each answer a checkpoint)."""

    def step(reply: Reply) -> Dynamic:
        def respond(_body: Any) -> Reply:
            upstream.sync(env)
            env.checkpoint()
            return reply

        return Dynamic(respond)

    tools = {f"{PREFIX}_{tool}": upstream.declare(tool, f"{PREFIX}_{tool}") for tool in declared}
    params = StdioServerParameters(command=sys.executable, args=[*upstream.command(), *upstream.flags], cwd=str(ROOT))
    with ScriptedGeminiServer([step(reply) for reply in turns]) as server:
        env.count_requests(lambda: len(server.requests))
        toolset = McpToolset(
            connection_params=StdioConnectionParams(server_params=params, timeout=30), tool_name_prefix=PREFIX
        )
        model = Gemini(model=GEMINI, base_url=server.base_url, client_kwargs=gemini_http_options())
        agent = LlmAgent(name="clerk", model=model, tools=[toolset])

        async def main() -> Outcome:
            options = env.options(mcp_trusted=[PREFIX], unguarded={f"{PREFIX}_{t}": w for t, w in LOOKUP.items()})
            try:
                return await adk.run_guarded(agent, "Refund order 1.", tools=tools, **options)
            finally:
                await toolset.close()

        outcome = asyncio.run(main())
    upstream.sync(env)
    return env.observe(outcome)


def adk_refund(env: Env) -> Observed:
    """Issue 27's first reproduction through ADK: the refund loses its answer and is asked again."""
    return adk_run(env, Upstream(env, "--lose", "1", prefix=f"{PREFIX}_"), adk_turns("refund", {"order_id": 1}))


def adk_payment(env: Env) -> Observed:
    """Issue 27's second reproduction through ADK: the same payment sent twice."""
    upstream = Upstream(env, "--lose", "1", prefix=f"{PREFIX}_")
    return adk_run(env, upstream, adk_turns("pay", {"invoice": "1", "amount": 1}))


def adk_unguarded(env: Env) -> Observed:
    """The same through ADK's ``McpToolset`` (the opt-out names the prefixed tool)."""
    turns = [*(calls(c) for c in lookups(f"{PREFIX}_")), text(FINAL)]
    return opted_out(env, adk_run(env, Upstream(env, prefix=f"{PREFIX}_"), turns), f"{PREFIX}_lookup")


def adk_undeclared(env: Env) -> Observed:
    """Nobody declared ``refund``: the run is refused when it starts, before the model is asked."""
    try:
        return adk_run(env, Upstream(env, prefix=f"{PREFIX}_"), adk_turns("refund", {"order_id": 1}), declared=("pay",))
    except ValueError as exc:
        upstream = Upstream(env, prefix=f"{PREFIX}_")
        upstream.sync(env)
        seen = env.observe(None)
        seen.refused = str(exc)
        return seen


def door(name: str, doc: str, build: Callable[[Env], Observed], **more: Any) -> Door:
    """A row on the SQLite store only: each case starts the upstream as a process; what the guard asks of the store
    here is what the SDK's and ADK's own rows ask of it, on every store."""
    return Door("mcp", name, doc, build, stores=("sqlite",), **more)


DOORS = [
    door(
        "sdk-refund",
        "Agents SDK `Agent(mcp_servers=[MCPServerStdio(...)])`, a declared write whose answer is lost, asked again",
        sdk_refund,
        stop_at=2,
    ),
    door("sdk-payment", "the same payment asked twice through the SDK's MCP server (declared)", sdk_payment, stop_at=2),
    door(
        "sdk-undeclared-write",
        "an SDK MCP tool nobody declared, not annotated read-only by a trusted server",
        refused(sdk_undeclared),
        mark="refused",
        refusal="tools={'refund': declare_tool('refund'",
    ),
    door(
        "sdk-unguarded-tool",
        'an SDK MCP tool nobody declared, opted out with why (`unguarded={"lookup": "why"}`)',
        sdk_unguarded,
        stop_at=2,
    ),
    door(
        "sdk-server-retries",
        "an SDK MCP server built with its own retries (`max_retry_attempts=2`)",
        refused(sdk_retries),
        mark="refused",
        refusal="max_retry_attempts=0",
    ),
    door(
        "sdk-tool-added",
        "a tool the SDK's MCP server adds during the run (listed again every turn)",
        sdk_tool_added,
        stop_at=2,
    ),
    door(
        "adk-refund",
        "Google ADK `LlmAgent(tools=[McpToolset(...)])`, a declared write whose answer is lost, asked again",
        adk_refund,
        stop_at=2,
    ),
    door("adk-payment", "the same payment asked twice through ADK's `McpToolset` (declared)", adk_payment, stop_at=2),
    door(
        "adk-unguarded-tool",
        'an ADK MCP tool nobody declared, opted out with why (`unguarded={"payments_lookup": "why"}`)',
        adk_unguarded,
        stop_at=2,
    ),
    door(
        "adk-undeclared-write",
        "an ADK MCP tool nobody declared, not annotated read-only by a trusted toolset",
        adk_undeclared,
        mark="refused",
        refusal="tools={'payments_refund': declare_tool('payments_refund'",
    ),
]
