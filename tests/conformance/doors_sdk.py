"""The Agents SDK's doors (openai-agents, ``agents.testing.ScriptedModel`` or the real openai client over HTTP).

Every row runs the same little shop as a user of the SDK would write it: a read (``lookup``), a write (``refund``,
operation ``refund-<order>``, verified at the receiver), a model that looks order 1 up, refunds it, asks for the
same refund again (the ledger answers it), then answers. Each door changes one thing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import agents
import httpx2
import openai
from agents import (
    Agent,
    FunctionTool,
    ModelRetrySettings,
    ModelSettings,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    SQLiteSession,
    StopAtTools,
    Usage,
    function_tool,
    handoff,
    retry_policies,
)
from agents.mcp import MCPServer
from agents.testing import ScriptedModel, assistant_message, function_call
from mcp import types as mcp_types

from agents_loopguard import Budget, Outcome, Reason
from agents_loopguard.run import RetryPolicy, ToolSpec, declare_tool
from agents_loopguard.sdk import LoopGuard, guarded_tool, run_guarded, run_guarded_streamed, run_guarded_sync
from tests.conformance.kit import Door, Env, Observed
from tests.support.scripted_openai import ScriptedOpenAIServer, final_text, http_error
from tests.support.scripted_openai import function_call as wire_call
from tests.support.scripted_openai import tool_calls as wire_calls
from tests.support.shop import MODEL
from tests.support.wire import async_http_client

__all__ = ["DOORS"]

agents.set_tracing_disabled(True)
USAGE = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
FINAL = "Refunded order 1."


# --- the shop -------------------------------------------------------------------------------------------------


def looked_up(args: dict[str, Any], output: Any) -> dict[str, Any]:
    return {"revision": 1, "done": False, "effect": "none"}


def refund_declaration(env: Env) -> ToolSpec:
    """The refund's declaration: a write named by its order, verified at the receiver."""
    return declare_tool(
        "refund",
        kind="write",
        operation_id=lambda a: f"refund-{a['order']}",
        verify=lambda a, out: {
            "revision": 2,
            "done": False,
            "effect": "committed" if env.committed(f"refund-{a['order']}") else "not_committed",
        },
    )


def shop(env: Env, **refund_options: Any) -> tuple[FunctionTool, FunctionTool]:
    """``lookup`` (a read) and ``refund`` (a write) whose bodies count themselves in ``env``."""

    @guarded_tool(verify=looked_up)
    def lookup(order: int) -> str:
        """Look an order up."""
        env.body("lookup")
        return f"order {order}: paid"

    @guarded_tool(refund_declaration(env), **refund_options)
    def refund(order: int) -> str:
        """Refund an order."""
        env.body("refund", f"refund-{order}")
        return f"refunded {order}"

    return lookup, refund


def turns(final: str = FINAL, *, prefix: str = "c") -> list[Any]:
    """Look order 1 up, refund it, ask for the same refund again, answer."""
    return [
        [function_call("lookup", {"order": 1}, call_id=f"{prefix}1")],
        [function_call("refund", {"order": 1}, call_id=f"{prefix}2")],
        [function_call("refund", {"order": 1}, call_id=f"{prefix}3")],
        [assistant_message(final)],
    ]


def models(env: Env, *scripts: Sequence[Any]) -> list[ScriptedModel]:
    """One ``ScriptedModel`` per script, whose calls (every attempt, failed ones included) the env counts."""
    made = [ScriptedModel(list(script), default_usage=USAGE) for script in scripts]
    env.count_requests(lambda: sum(len(model.calls) for model in made))
    return made


def clerk(env: Env, tools: Sequence[Any], script: Sequence[Any] | None = None, **agent_options: Any) -> Agent[Any]:
    (model,) = models(env, turns() if script is None else script)
    return Agent(name="clerk", model=model, tools=list(tools), **agent_options)


def guarded(env: Env, agent: Agent[Any], **options: Any) -> Observed:
    """``run_guarded(agent, ...)`` under the env's task."""
    return env.observe(asyncio.run(run_guarded(agent, "Refund order 1.", **env.options(**options))))


# --- doors ----------------------------------------------------------------------------------------------------


def function_tools(env: Env) -> Observed:
    return guarded(env, clerk(env, shop(env)))


def plain_function_tool(env: Env) -> Observed:
    @function_tool
    def lookup(order: int) -> str:
        """Look an order up (nobody declared it)."""
        env.body("lookup")
        return f"order {order}: paid"

    script = [[function_call("lookup", {"order": 1}, call_id="c1")], [assistant_message(FINAL)]]
    return guarded(env, clerk(env, [lookup], script))


def parallel_calls(env: Env) -> Observed:
    lookup, refund = shop(env)
    batch = [
        function_call("lookup", {"order": 1}, call_id="c1"),
        function_call("refund", {"order": 1}, call_id="c2"),
        function_call("refund", {"order": 2}, call_id="c3"),
    ]
    one_at_a_time = RunConfig(tool_execution=agents.ToolExecutionConfig(max_function_tool_concurrency=1))
    agent = clerk(env, [lookup, refund], [batch, [assistant_message(FINAL)]])
    return guarded(env, agent, run_config=one_at_a_time) if env.variant == "stop" else guarded(env, agent)


def streamed(env: Env) -> Observed:
    agent = clerk(env, shop(env))

    async def main() -> Outcome:
        stream = run_guarded_streamed(agent, "Refund order 1.", **env.options())
        async for _event in stream.stream_events():
            pass
        return await stream.outcome()

    return env.observe(asyncio.run(main()))


def synchronous(env: Env) -> Observed:
    return env.observe(run_guarded_sync(clerk(env, shop(env)), "Refund order 1.", **env.options()))


def attached(env: Env) -> Observed:
    agent = clerk(env, shop(env))

    async def main() -> Outcome:
        guard = LoopGuard("Refund order 1.", **env.options())
        try:
            result: Any = await Runner.run(agent, guard.input, hooks=guard.hooks(), run_config=guard.run_config())
        except Exception as exc:
            result = exc
        return await guard.outcome(result)

    return env.observe(asyncio.run(main()))


def attached_run_sync(env: Env) -> Observed:
    """A ``LoopGuard`` attached to the application's own ``Runner.run_sync``."""
    agent = clerk(env, shop(env))
    guard = LoopGuard("Refund order 1.", **env.options())
    try:
        result: Any = Runner.run_sync(agent, guard.input, hooks=guard.hooks(), run_config=guard.run_config())
    except Exception as exc:
        result = exc
    return env.observe(asyncio.run(guard.outcome(result)))


def helper_turns() -> list[Any]:
    return [[function_call("lookup", {"order": 1}, call_id="h1")], [assistant_message("order 1 is paid")]]


def boss_turns(tool: str, args: dict[str, Any]) -> list[Any]:
    return [[function_call(tool, args, call_id="b1")], [assistant_message(FINAL)]]


def as_tool(env: Env) -> Observed:
    lookup, _ = shop(env)
    helper_model, boss_model = models(env, helper_turns(), boss_turns("research", {"input": "order 1"}))
    helper = Agent(name="helper", model=helper_model, tools=[lookup])
    boss = Agent(name="boss", model=boss_model, tools=[helper.as_tool("research", "Research an order.")])
    return guarded(env, boss)


def nested_run(env: Env) -> Observed:
    lookup, _ = shop(env)
    helper_model, boss_model = models(env, helper_turns(), boss_turns("delegate", {"question": "order 1"}))
    helper = Agent(name="helper", model=helper_model, tools=[lookup])

    @guarded_tool(verify=looked_up)
    async def delegate(question: str) -> str:
        """Ask the helper agent."""
        env.body("delegate")
        result = await Runner.run(helper, question)
        return str(result.final_output)

    return guarded(env, Agent(name="boss", model=boss_model, tools=[delegate]))


def nested_run_streamed(env: Env) -> Observed:
    """A ``Runner.run_streamed`` started inside a tool body, its events consumed there."""
    lookup, _ = shop(env)
    helper_model, boss_model = models(env, helper_turns(), boss_turns("delegate", {"question": "order 1"}))
    helper = Agent(name="helper", model=helper_model, tools=[lookup])

    @guarded_tool(verify=looked_up)
    async def delegate(question: str) -> str:
        """Ask the helper agent."""
        env.body("delegate")
        streamed = Runner.run_streamed(helper, question)
        async for _event in streamed.stream_events():
            pass
        return str(streamed.final_output)

    return guarded(env, Agent(name="boss", model=boss_model, tools=[delegate]))


def handoffs(env: Env) -> Observed:
    lookup, refund = shop(env)
    triage_model, billing_model = models(
        env, [[function_call("transfer_to_billing", {}, call_id="t1")]], turns(prefix="b")
    )
    billing = Agent(name="billing", model=billing_model, tools=[lookup, refund])
    return guarded(env, Agent(name="triage", model=triage_model, handoffs=[handoff(billing)]))


def network_error() -> Exception:
    return openai.APIConnectionError(request=httpx2.Request("POST", "https://example.invalid/v1/responses"))


def sdk_model_retries(env: Env) -> Observed:
    script = turns()
    script[1:1] = [network_error()]  # the request after the lookup fails once; the SDK retries it
    retry = ModelRetrySettings(
        max_retries=2, backoff={"initial_delay": 0, "jitter": False}, policy=retry_policies.network_error()
    )
    return guarded(env, clerk(env, shop(env), script, model_settings=ModelSettings(retry=retry)))


def http_retries(env: Env) -> Observed:
    """A default-shaped ``AsyncOpenAI`` (its own retries on) against the scripted server, which fails the second
    request with a 500 once: every HTTP attempt is counted at the server."""
    script = [
        wire_calls(wire_call("lookup", {"order": 1}, "c1")),
        http_error(500),
        wire_calls(wire_call("refund", {"order": 1}, "c2")),
        wire_calls(wire_call("refund", {"order": 1}, "c3")),
        final_text(FINAL),
    ]
    with ScriptedOpenAIServer(script) as server:
        env.count_requests(lambda: len(server.requests))

        async def main() -> Outcome:
            client = openai.AsyncOpenAI(
                base_url=server.base_url, api_key="test", max_retries=2, http_client=async_http_client()
            )
            async with client:
                model = OpenAIResponsesModel(MODEL, client)
                agent = Agent(name="clerk", model=model, tools=list(shop(env)))
                return await run_guarded(agent, "Refund order 1.", **env.options())

        outcome = asyncio.run(main())
    return env.observe(outcome)


def tool_retries(env: Env) -> Observed:
    """``guarded_tool(retry=...)``: a transient failure of the lookup is retried, each attempt reserved."""
    failures = [ConnectionError("the shop did not answer")]

    @guarded_tool(verify=looked_up, retry=RetryPolicy(max_retries=2, initial_delay=0, jitter=0))
    def lookup(order: int) -> str:
        """Look an order up."""
        env.body("lookup")
        if failures:
            raise failures.pop()
        return f"order {order}: paid"

    _, refund = shop(env)
    return guarded(env, clerk(env, [lookup, refund]))


def approvals(env: Env) -> Observed:
    """``needs_approval=True``: the run pauses, the user approves with the SDK's own ``state.approve(item)`` and
    runs the state again; the write runs once, the counters continue. The stop variant stops before the pause."""
    lookup, refund = shop(env, needs_approval=True)
    agent = clerk(env, [lookup, refund], [*turns()[:2], *turns()[3:]])

    async def main() -> Outcome:
        first = await run_guarded(agent, "Refund order 1.", **env.options())
        if not getattr(first.result, "interruptions", None):
            return first
        state = first.result.to_state()
        for item in state.get_interruptions():
            state.approve(item)
        return await run_guarded(agent, state, **env.options())

    return env.observe(asyncio.run(main()))


def as_tool_approval(env: Env) -> Observed:
    """An approval inside an agent used as a tool: the nested run pauses, the parent run pauses with it, the user
    approves with ``state.approve(item)`` on the parent's state and runs it again; the nested run resumes."""
    lookup, refund = shop(env, needs_approval=True)
    helper_script = [[function_call("refund", {"order": 1}, call_id="h1")], [assistant_message("order 1 refunded")]]
    helper_model, boss_model = models(env, helper_script, boss_turns("billing", {"input": "refund order 1"}))
    helper = Agent(name="helper", model=helper_model, tools=[lookup, refund])
    boss = Agent(name="boss", model=boss_model, tools=[helper.as_tool("billing", "Billing.")])

    async def main() -> Outcome:
        first = await run_guarded(boss, "Refund order 1.", **env.options())
        if not getattr(first.result, "interruptions", None):
            return first
        state = first.result.to_state()
        for item in state.get_interruptions():
            state.approve(item)
        return await run_guarded(boss, state, **env.options())

    return env.observe(asyncio.run(main()))


def rerun(env: Env) -> Observed:
    """The same task run again after it ended: the stored outcome comes back, nothing runs."""
    agent = clerk(env, shop(env), [*turns(), *turns()])
    asyncio.run(run_guarded(agent, "Refund order 1.", **env.options()))
    return guarded(env, agent)


def wrapped_invoker(env: Env) -> Observed:
    """The logging idiom: ``dataclasses.replace(tool, on_invoke_tool=wrapper)`` around a guarded tool."""
    seen: list[str] = []

    def logged(tool: FunctionTool) -> FunctionTool:
        inner = tool.on_invoke_tool

        async def invoke(ctx: Any, args: str) -> Any:
            seen.append(f"{tool.name}({args})")
            return await inner(ctx, args)

        return dataclasses.replace(tool, on_invoke_tool=invoke)

    return guarded(env, clerk(env, [logged(tool) for tool in shop(env)]))


def retrying(tool: FunctionTool, attempts: int = 3) -> FunctionTool:
    """A retry wrapper around a tool's invoker: the invoker again while the answer reads as an error."""
    inner = tool.on_invoke_tool

    async def invoke(ctx: Any, args: str) -> Any:
        for _ in range(attempts):
            output = await inner(ctx, args)
            if "error" not in str(output).lower():
                break
        return output

    return dataclasses.replace(tool, on_invoke_tool=invoke)


def retry_wrapper(env: Env) -> Observed:
    """A retry wrapper around a guarded read whose first attempt fails: the second attempt is reserved on its own.
    ``on_refusal="continue"``: the first failure is reported to the model instead of ending the run."""
    failures = [ConnectionError("the shop did not answer")]

    @guarded_tool(verify=looked_up)
    def lookup(order: int) -> str:
        """Look an order up."""
        env.body("lookup")
        if failures:
            raise failures.pop()
        return f"order {order}: paid"

    _, refund = shop(env)
    return guarded(env, clerk(env, [retrying(lookup), refund]), on_refusal="continue")


def retry_wrapper_write(env: Env) -> Observed:
    """A retry wrapper around a guarded write whose answer is lost after it committed: the write is not sent
    again (``unknown_commit``: the first attempt is still unsettled), the run ends needing reconciliation."""

    @guarded_tool(refund_declaration(env))
    def refund(order: int) -> str:
        """Refund an order."""
        env.body("refund", f"refund-{order}")
        raise ConnectionError("the answer was lost")

    lookup, _ = shop(env)
    observed = guarded(env, clerk(env, [lookup, retrying(refund)]))
    ended = observed.outcome.reason if observed.outcome is not None else None
    assert env.variant == "stop" or ended is Reason.UNKNOWN_COMMIT, f"the run ended {ended}, not unknown_commit"
    return observed


def wraps_wrapper(env: Env) -> Observed:
    """A wrapper made with ``functools.wraps(inner)`` (it copies the guarded invoker's attributes): it stays the
    tool's invoker (it runs) and the guarded invoker inside it reserves once."""
    seen: list[str] = []

    def logged(tool: FunctionTool) -> FunctionTool:
        inner = tool.on_invoke_tool

        @functools.wraps(inner)
        async def invoke(ctx: Any, args: str) -> Any:
            seen.append(tool.name)
            return await inner(ctx, args)

        return dataclasses.replace(tool, on_invoke_tool=invoke)

    observed = guarded(env, clerk(env, [logged(tool) for tool in shop(env)]))
    # the wrapper runs as the body: the repeated refund is answered from the ledger, the wrapper not run again
    assert env.variant == "stop" or seen == ["lookup", "refund"], f"the wrapper did not run: {seen}"
    return observed


class ShopServer(MCPServer):
    """An MCP server in the process (the SDK's ``MCPServer`` interface): ``call_tool`` is the tools' body."""

    def __init__(self, env: Env) -> None:
        super().__init__()
        self.env = env

    @property
    def name(self) -> str:
        return "shop"

    async def connect(self) -> None:
        pass

    async def cleanup(self) -> None:
        pass

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> list[mcp_types.Tool]:
        schema = {"type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"]}
        return [mcp_types.Tool(name=name, inputSchema=schema) for name in ("lookup", "refund")]

    async def call_tool(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None
    ) -> mcp_types.CallToolResult:
        order = (arguments or {})["order"]
        self.env.body(tool_name, f"refund-{order}" if tool_name == "refund" else None)
        text = f"refunded {order}" if tool_name == "refund" else f"order {order}: paid"
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text=text)])

    async def list_prompts(self) -> mcp_types.ListPromptsResult:
        return mcp_types.ListPromptsResult(prompts=[])

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None) -> mcp_types.GetPromptResult:
        raise KeyError(name)


def mcp_server_tools(env: Env) -> Observed:
    """An MCP server's tools (``Agent(mcp_servers=[...])``: ``FunctionTool``s made at run time by
    ``MCPUtil.to_function_tool``), the write declared by name."""
    (model,) = models(env, turns())
    agent = Agent(name="clerk", model=model, mcp_servers=[ShopServer(env)])
    return guarded(env, agent, tools={"refund": refund_declaration(env)})


def runtime_tools(env: Env) -> Observed:
    """Tools that appear only at run time (``Agent.get_all_tools`` overridden, as MCP tools do)."""
    found = list(shop(env))

    class Dynamic(Agent[Any]):
        async def get_all_tools(self, run_context: Any) -> list[Any]:
            return [*await super().get_all_tools(run_context), *found]

    (model,) = models(env, turns())
    return guarded(env, Dynamic(name="clerk", model=model))


def cloned(env: Env) -> Observed:
    """``Agent.clone(...)`` of an agent with guarded tools."""
    base = clerk(env, shop(env))
    return guarded(env, base.clone(name="clerk-2", instructions="Be brief."))


def run_config_model(env: Env) -> Observed:
    """``RunConfig(model=...)`` overrides every agent's model."""
    (model,) = models(env, turns())
    agent = Agent(name="clerk", model="not-a-real-model", tools=list(shop(env)))
    return guarded(env, agent, run_config=RunConfig(model=model))


def stop_on_first_tool(env: Env) -> Observed:
    """``tool_use_behavior="stop_on_first_tool"``: the tool's output is the final output; one request."""
    lookup, _ = shop(env)
    return guarded(env, clerk(env, [lookup], turns()[:1], tool_use_behavior="stop_on_first_tool"))


def stop_at_tools(env: Env) -> Observed:
    """``tool_use_behavior=StopAtTools(stop_at_tool_names=["refund"])``: the refund's output is the final output."""
    script = turns()[:2]
    return guarded(env, clerk(env, shop(env), script, tool_use_behavior=StopAtTools(stop_at_tool_names=["refund"])))


def tool_timeout(env: Env) -> Observed:
    """An async guarded tool with the SDK's own ``timeout=``: the body is cancelled, its execution stays counted."""

    @guarded_tool(verify=looked_up, timeout=0.05)
    async def lookup(order: int) -> str:
        """Look an order up (slowly)."""
        env.body("lookup")
        await asyncio.sleep(5)
        return f"order {order}: paid"

    return guarded(env, clerk(env, [lookup, shop(env)[1]]))


class Provider(agents.ModelProvider):
    """A model provider that resolves every model name to the row's scripted model."""

    def __init__(self, model: ScriptedModel) -> None:
        self.model = model

    def get_model(self, model_name: str | None) -> agents.Model:
        return self.model


def model_provider(env: Env) -> Observed:
    """``RunConfig(model_provider=...)``: the agent names its model, the provider resolves it."""
    (model,) = models(env, turns())
    agent = Agent(name="clerk", model="shop-model", tools=list(shop(env)))
    return guarded(env, agent, run_config=RunConfig(model_provider=Provider(model)))


def session(env: Env) -> Observed:
    """A run with an SDK session (``SQLiteSession``): the conversation is stored by the SDK, the task by the
    guard."""
    return guarded(env, clerk(env, shop(env)), session=SQLiteSession("conversation-1"))


def built_by_hand(env: Env) -> Observed:
    """A ``FunctionTool(...)`` built by hand, its invoker the body (nobody declared it: guarded as a read)."""

    async def invoke(ctx: Any, args: str) -> str:
        env.body("lookup")
        return "order 1: paid"

    lookup = FunctionTool(
        name="lookup",
        description="Look an order up.",
        params_json_schema={
            "type": "object",
            "properties": {"order": {"type": "integer"}},
            "required": ["order"],
            "additionalProperties": False,
        },
        on_invoke_tool=invoke,
    )
    script = [[function_call("lookup", {"order": 1}, call_id="c1")], [assistant_message(FINAL)]]
    return guarded(env, clerk(env, [lookup], script))


def tool_input_guardrail(env: Env) -> Observed:
    """A tool input guardrail that rejects the refund: the model reads the rejection, the body never runs."""

    @agents.tool_input_guardrail
    def no_refunds(data: Any) -> agents.ToolGuardrailFunctionOutput:
        return agents.ToolGuardrailFunctionOutput.reject_content("refunds need a ticket")

    lookup, refund = shop(env)
    refund = dataclasses.replace(refund, tool_input_guardrails=[no_refunds])
    return guarded(env, clerk(env, [lookup, refund]))


def plain_shop(env: Env) -> list[FunctionTool]:
    """The shop's tools as plain ``@function_tool`` functions (nothing declared on them)."""

    @function_tool
    def lookup(order: int) -> str:
        """Look an order up."""
        env.body("lookup")
        return f"order {order}: paid"

    @function_tool
    def refund(order: int) -> str:
        """Refund an order."""
        env.body("refund", f"refund-{order}")
        return f"refunded {order}"

    return [lookup, refund]


def declared_by_name(env: Env) -> Observed:
    """Plain ``@function_tool`` tools, the write declared by name: ``run_guarded(..., tools={...})``."""
    return guarded(env, clerk(env, plain_shop(env)), tools={"refund": refund_declaration(env)})


def refused(build: Callable[[Env], Observed]) -> Callable[[Env], Observed]:
    """A door refused before anything runs: the error's message is what the row observed."""

    def refusing(env: Env) -> Observed:
        try:
            seen = build(env)
        except (ValueError, TypeError, agents.UserError) as exc:
            seen = env.observe(None)
            seen.refused = str(exc)
        return seen

    return refusing


def declared_twice(env: Env) -> Observed:
    """A tool declared by ``guarded_tool`` and, differently, in ``tools=``."""
    return guarded(env, clerk(env, shop(env)), tools={"refund": declare_tool("refund")})


def door(name: str, doc: str, build: Callable[[Env], Observed], **more: Any) -> Door:
    """A row of this file: by default the user gets the shop's final answer (``final=None``: not checked)."""
    return Door("sdk", name, doc, build, **{"final": FINAL, **more})


DOORS = [
    door("function-tool", "a `@guarded_tool` function tool, read and write", function_tools),
    door("plain-function-tool", "a plain `@function_tool` nobody declared (guarded as a read)", plain_function_tool),
    door("parallel-calls", "several function calls in one model turn", parallel_calls),
    door("streamed", "`run_guarded_streamed`", streamed),
    door("sync", "`run_guarded_sync`", synchronous),
    door("attached", "a `LoopGuard` attached to the application's own `Runner.run`", attached),
    door(
        "attached-run-sync",
        "a `LoopGuard` attached to the application's own `Runner.run_sync`",
        attached_run_sync,
    ),
    door("as-tool", "an agent used as a tool (`agent.as_tool()`)", as_tool, final=FINAL),
    door("nested-run", "a `Runner.run` started inside a tool body", nested_run, final=FINAL),
    door(
        "nested-run-streamed",
        "a `Runner.run_streamed` started inside a tool body",
        nested_run_streamed,
    ),
    door("handoff", "a handoff to another agent", handoffs),
    door(
        "model-retries",
        "the SDK's model retries (`ModelSettings(retry=ModelRetrySettings(...))`)",
        sdk_model_retries,
    ),
    door("http-retries", "the openai client's own HTTP retries (`AsyncOpenAI(max_retries=2)`)", http_retries),
    door("tool-retries", "a guarded tool's own retries (`guarded_tool(retry=RetryPolicy(...))`)", tool_retries),
    door(
        "approval",
        "an approval pause resumed with the SDK's `state.approve(item)` and a new run of the state",
        approvals,
        final=FINAL,
    ),
    door(
        "as-tool-approval",
        "an approval inside an agent used as a tool, resumed with the SDK's `state.approve(item)`",
        as_tool_approval,
    ),
    door("rerun", "the same task run again after it ended", rerun, stop_reason=None),
    door(
        "wrapped-invoker",
        "a guarded tool's `on_invoke_tool` wrapped (`dataclasses.replace(tool, on_invoke_tool=...)`)",
        wrapped_invoker,
    ),
    door(
        "retry-wrapper",
        "a retry wrapper around a guarded tool's invoker (a read, called again after a failure)",
        retry_wrapper,
    ),
    door(
        "retry-wrapper-write",
        "a retry wrapper around a guarded write whose answer was lost (refused `unknown_commit`)",
        retry_wrapper_write,
        stop_reason=None,
        final=None,
    ),
    door(
        "wraps-wrapper",
        "a wrapper of a guarded tool's invoker made with `functools.wraps`",
        wraps_wrapper,
    ),
    door(
        "mcp-server-tools",
        "an MCP server's tools (`Agent(mcp_servers=[...])`), the write declared by name",
        mcp_server_tools,
    ),
    door("runtime-tools", "tools that appear only at run time (`Agent.get_all_tools`)", runtime_tools),
    door("clone", "`Agent.clone(...)` of an agent with guarded tools", cloned),
    door("run-config-model", "`RunConfig(model=...)` overriding the agents' models", run_config_model),
    door(
        "stop-on-first-tool",
        '`tool_use_behavior="stop_on_first_tool"` (the tool\'s output is the final output)',
        stop_on_first_tool,
        stop_reason=None,
        final="order 1: paid",
        budget=Budget(model_turns=3, tool_executions=3),
    ),
    door(
        "stop-at-tools",
        "`tool_use_behavior=StopAtTools(...)` (a named tool's output is the final output)",
        stop_at_tools,
        stop_reason=None,
        final="refunded 1",
    ),
    door(
        "tool-timeout",
        "a tool's own timeout (`guarded_tool(..., timeout=0.05)` on an async tool)",
        tool_timeout,
        stop_reason=None,
        final=None,
    ),
    door("model-provider", "`RunConfig(model_provider=...)` resolving the agents' model names", model_provider),
    door("session", "a run with an SDK session (`session=SQLiteSession(...)`)", session),
    door("hand-made-tool", "a `FunctionTool(...)` built by hand (its invoker is the body)", built_by_hand),
    door("tool-input-guardrail", "a tool input guardrail that rejects a call", tool_input_guardrail),
    door("declared-by-name", "plain tools declared by name (`run_guarded(..., tools={...})`)", declared_by_name),
    door(
        "declared-twice",
        "a tool declared by `guarded_tool` and, differently, in `tools=`",
        refused(declared_twice),
        mark="refused",
        refusal="is declared twice",
    ),
]
