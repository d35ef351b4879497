"""Google ADK's doors (google-adk 2.13): ADK's own ``Gemini`` model, the real ``google-genai`` client over HTTP
against the scripted Gemini server, counting every request it received.

Every row runs the same little shop as an ADK user would write it: a read (``lookup``), a write (``refund``,
operation ``refund-<order>``, verified at the receiver), a model that looks order 1 up, refunds it, asks for the
same refund again (the ledger answers it), then answers. Each door changes one thing: where the plugin sits, how
agents nest (``AgentTool``, sub-agents, a transfer), how ADK runs the model (streaming, retries, its own limit),
how a session goes on (a second message, a confirmation), or a door no callback sees (refused, with its fix).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from google.adk.agents import LlmAgent, LoopAgent, ParallelAgent, SequentialAgent
from google.adk.agents.live_request_queue import LiveRequestQueue
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.apps import App
from google.adk.code_executors import BuiltInCodeExecutor
from google.adk.models.google_llm import Gemini
from google.adk.plugins.reflect_retry_tool_plugin import ReflectAndRetryToolPlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.agent_tool import AgentTool
from google.adk.tools.exit_loop_tool import exit_loop
from google.adk.tools.google_search_tool import google_search
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.genai import types

from agents_loopguard import Budget, Outcome
from agents_loopguard.adk import LoopGuardPlugin, agent_callbacks, guarded_tool, run_guarded
from agents_loopguard.adk.claims import CONFIRMATION
from agents_loopguard.run import ToolSpec, declare_tool
from tests.conformance.kit import Door, Env, Observed
from tests.support.adk import GEMINI
from tests.support.scripted_gemini import Dynamic, HttpError, Reply, ScriptedGeminiServer
from tests.support.wire import gemini_http_options

__all__ = ["DOORS"]

FINAL = "Refunded order 1."
JSON = dict[str, Any]
Turn = Reply | Callable[[JSON], Reply]
_NAME = re.compile(r'internal name is "([^"]+)"')


# --- the model: one scripted Gemini server, a script per agent --------------------------------------------------


def agent_of(body: JSON) -> str:
    """The agent a request comes from (ADK names it in the system instruction)."""
    parts = (body.get("systemInstruction") or {}).get("parts") or []
    found = _NAME.search(" ".join(str(part.get("text", "")) for part in parts))
    return found.group(1) if found else "?"


class Models:
    """``Gemini`` models on one scripted server; each agent answers with the next turn of its own script."""

    def __init__(self, server: ScriptedGeminiServer, scripts: dict[str, list[Turn]], unnamed: str) -> None:
        self.server = server
        self.scripts = scripts
        self.unnamed = unnamed

    def respond(self, body: JSON) -> Reply | HttpError:
        name = agent_of(body)
        script = self.scripts.get(self.unnamed if name == "?" else name)
        if not script:
            return HttpError(500, f"no turn left for agent {agent_of(body)!r}")
        turn = script.pop(0)
        return turn(body) if callable(turn) else turn

    def model(self, **options: Any) -> Gemini:
        kwargs = gemini_http_options()
        kwargs.update(options.pop("client_kwargs", {}))
        return Gemini(model=GEMINI, base_url=self.server.base_url, client_kwargs=kwargs, **options)


@contextlib.contextmanager
def gemini(env: Env, unnamed: str = "", **scripts: Sequence[Turn]) -> Iterator[Models]:
    """The scripted server, its requests counted by ``env``, answering each agent from its script (a request that
    names no agent, as a delegated sub-agent's, from ``unnamed``'s)."""
    holder: list[Models] = []
    with ScriptedGeminiServer([Dynamic(lambda body: holder[0].respond(body)) for _ in range(200)]) as server:
        holder.append(Models(server, {name: list(script) for name, script in scripts.items()}, unnamed))
        env.count_requests(lambda: len(server.requests))
        yield holder[0]


def call(name: str, **args: Any) -> Reply:
    return Reply(calls=((name, args),))


def say(text: str) -> Reply:
    return Reply(text=text)


def shop_turns(final: str = FINAL) -> list[Turn]:
    """Look order 1 up, refund it, ask for the same refund again, answer."""
    return [call("lookup", order=1), call("refund", order=1), call("refund", order=1), say(final)]


# --- the shop ---------------------------------------------------------------------------------------------------


def looked_up(args: dict[str, Any], output: Any) -> dict[str, Any]:
    return {"revision": 1, "done": False, "effect": "none"}


def refund_declaration(env: Env) -> ToolSpec:
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


def functions(env: Env) -> tuple[Callable[..., str], Callable[..., str]]:
    """``lookup`` and ``refund`` as plain functions whose bodies count themselves in ``env``."""

    def lookup(order: int) -> str:
        """Look an order up."""
        env.body("lookup")
        return f"order {order}: paid"

    def refund(order: int) -> str:
        """Refund an order."""
        env.body("refund", f"refund-{order}")
        return f"refunded {order}"

    return lookup, refund


def shop(env: Env, **refund_options: Any) -> list[Any]:
    """``lookup`` (a read) and ``refund`` (a write), declared with ``guarded_tool``."""
    lookup, refund = functions(env)
    spec = refund_declaration(env)
    return [
        guarded_tool(lookup, verify=looked_up),
        guarded_tool(refund, kind="write", operation_id=spec.operation_id, verify=spec.verify, **refund_options),
    ]


def guarded(env: Env, agent: Any, message: str | types.Content = "Refund order 1.", **options: Any) -> Observed:
    """``run_guarded(agent, ...)`` under the env's task."""
    return env.observe(asyncio.run(run_guarded(agent, message, **env.options(**options))))


def refused(build: Callable[[Env], Observed]) -> Callable[[Env], Observed]:
    """A door refused before anything runs: the error's message is what the row observed."""

    def refusing(env: Env) -> Observed:
        try:
            seen = build(env)
        except (ValueError, TypeError, RuntimeError) as exc:
            seen = env.observe(None)
            seen.refused = str(exc)
        return seen

    return refusing


async def send(runner: Runner, session_id: str, message: str | types.Content, **run: Any) -> list[str]:
    """One message through the application's own ``Runner``; the texts the agents said."""
    content = (
        message if isinstance(message, types.Content) else types.Content(role="user", parts=[types.Part(text=message)])
    )
    said = []
    async for event in runner.run_async(user_id="u", session_id=session_id, new_message=content, **run):
        if event.content and event.author != "user":
            said.extend(part.text for part in event.content.parts or [] if part.text)
    return said


def own_runner(agent: Any, *plugins: Any) -> Runner:
    return Runner(
        app=App(name="shop", root_agent=agent, plugins=list(plugins)), session_service=InMemorySessionService()
    )


# --- doors: one agent -------------------------------------------------------------------------------------------


def function_tools(env: Env) -> Observed:
    with gemini(env, clerk=shop_turns()) as models:
        return guarded(env, LlmAgent(name="clerk", model=models.model(), tools=shop(env)))


def plain_function_tool(env: Env) -> Observed:
    lookup, _ = functions(env)
    with gemini(env, clerk=[call("lookup", order=1), say(FINAL)]) as models:
        return guarded(env, LlmAgent(name="clerk", model=models.model(), tools=[lookup]))


def declared_by_name(env: Env) -> Observed:
    lookup, refund = functions(env)
    with gemini(env, clerk=shop_turns()) as models:
        agent = LlmAgent(name="clerk", model=models.model(), tools=[lookup, refund])
        return guarded(env, agent, tools={"refund": refund_declaration(env)})


def declared_twice(env: Env) -> Observed:
    with gemini(env, clerk=shop_turns()) as models:
        agent = LlmAgent(name="clerk", model=models.model(), tools=shop(env))
        return guarded(env, agent, tools={"refund": declare_tool("refund")})


def parallel_calls(env: Env) -> Observed:
    batch = Reply(calls=(("lookup", {"order": 1}), ("refund", {"order": 1}), ("refund", {"order": 2})))
    with gemini(env, clerk=[batch, say(FINAL)]) as models:
        return guarded(env, LlmAgent(name="clerk", model=models.model(), tools=shop(env)))


def sse_streaming(env: Env) -> Observed:
    with gemini(env, clerk=shop_turns()) as models:
        agent = LlmAgent(name="clerk", model=models.model(), tools=shop(env))
        return guarded(env, agent, run_config=RunConfig(streaming_mode=StreamingMode.SSE))


def in_own_runner(env: Env) -> Observed:
    with gemini(env, clerk=shop_turns()) as models:
        plugin = LoopGuardPlugin(**env.options())
        runner = own_runner(LlmAgent(name="clerk", model=models.model(), tools=shop(env)), plugin)

        async def main() -> Outcome | None:
            session = await runner.session_service.create_session(app_name="shop", user_id="u")
            await send(runner, session.id, "Refund order 1.")
            return plugin.outcome(session.id)

        return env.observe(asyncio.run(main()))


def per_agent_callbacks(env: Env) -> Observed:
    with gemini(env, clerk=shop_turns()) as models:
        plugin = LoopGuardPlugin(**env.options())
        agent = LlmAgent(name="clerk", model=models.model(), tools=shop(env), **agent_callbacks(plugin))
        runner = own_runner(agent)

        async def main() -> Outcome | None:
            session = await runner.session_service.create_session(app_name="shop", user_id="u")
            await send(runner, session.id, "Refund order 1.")
            return plugin.outcome(session.id)

        return env.observe(asyncio.run(main()))


def unknown_tool(env: Env) -> Observed:
    with gemini(env, clerk=[call("cancel_order", order=1), *shop_turns()]) as models:
        return guarded(env, LlmAgent(name="clerk", model=models.model(), tools=shop(env)), on_refusal="continue")


def rewritten_arguments(env: Env) -> Observed:
    """The agent's own ``before_tool_callback`` runs after the plugin's and rewrites the refund's order (1 -> 2):
    the body refunds order 2, so the reservation must name ``refund-2`` (the second proposal is then answered by
    the ledger); reserved with the model's arguments, order 2 was refunded twice."""

    def rewrite(tool: Any, args: dict[str, Any], tool_context: Any) -> None:
        if tool.name == "refund":
            args["order"] = 2

    with gemini(env, clerk=shop_turns()) as models:
        agent = LlmAgent(name="clerk", model=models.model(), tools=shop(env), before_tool_callback=rewrite)
        return guarded(env, agent)


def long_running(env: Env) -> Observed:
    def start_refund(order: int) -> dict[str, Any]:
        """Start a refund that a person completes later."""
        env.body("start_refund")
        return {"status": "pending", "ticket": f"refund-{order}"}

    with gemini(env, clerk=[call("start_refund", order=1), say(FINAL)]) as models:
        agent = LlmAgent(name="clerk", model=models.model(), tools=[LongRunningFunctionTool(start_refund)])
        return guarded(env, agent)


# --- doors: agents in agents ------------------------------------------------------------------------------------


def helper_turns() -> list[Turn]:
    return [call("lookup", order=1), call("refund", order=1), say("helper: refunded order 1")]


def agent_tool(env: Env) -> Observed:
    with gemini(env, clerk=[call("helper", request="refund order 1"), say(FINAL)], helper=helper_turns()) as models:
        helper = LlmAgent(name="helper", description="Refunds orders.", model=models.model(), tools=shop(env))
        clerk = LlmAgent(name="clerk", model=models.model(), tools=[AgentTool(helper)])
        return guarded(env, clerk)


def agent_tool_again_and_again(env: Env) -> Observed:
    """Issue 26's measurement: the clerk calls the helper again and again, the helper never stops looking up; the
    task is the session's (no ``task_id``: the ADK session is named after the env's task), as an ADK user runs it.
    Each ``AgentTool`` call used to be a task of its own: 9 requests and 6 executions for a budget of 3 and 2."""
    lookups = [call("lookup", order=n) for n in range(1, 20)]
    with gemini(env, clerk=[call("helper", request="find it")] * 10, helper=lookups) as models:
        lookup, _ = functions(env)
        helper = LlmAgent(name="helper", description="Finds orders.", model=models.model(), tools=[lookup])
        clerk = LlmAgent(name="clerk", model=models.model(), tools=[AgentTool(helper)])
        options = {**env.options(session_id=env.task_id)}
        del options["task_id"]
        return env.observe(asyncio.run(run_guarded(clerk, "Find my order.", **options)))


def runner_in_tool(env: Env) -> Observed:
    with gemini(env, clerk=[call("delegate", question="refund order 1"), say(FINAL)], helper=helper_turns()) as models:
        helper = LlmAgent(name="helper", model=models.model(), tools=shop(env))
        plugin = LoopGuardPlugin(**env.options())

        async def delegate(question: str) -> str:
            """Ask the helper agent."""
            runner = own_runner(helper, plugin)
            session = await runner.session_service.create_session(app_name="shop", user_id="u")
            return " ".join(await send(runner, session.id, question))

        runner = own_runner(LlmAgent(name="clerk", model=models.model(), tools=[delegate]), plugin)

        async def main() -> Outcome | None:
            session = await runner.session_service.create_session(app_name="shop", user_id="u")
            await send(runner, session.id, "Refund order 1.")
            return plugin.outcome(session.id)

        return env.observe(asyncio.run(main()))


def sequential(env: Env) -> Observed:
    with gemini(env, a=[call("lookup", order=1), say("looked up")], b=shop_turns()[1:]) as models:
        a = LlmAgent(name="a", model=models.model(), tools=shop(env))
        b = LlmAgent(name="b", model=models.model(), tools=shop(env))
        return guarded(env, SequentialAgent(name="steps", sub_agents=[a, b]))


def parallel_agents(env: Env) -> Observed:
    """Two branches at once. No stop variant: a branch's request reserved before the mark may still be on its way
    to the server when the other branch's body sets it (in flight, counted; nothing is reserved after the mark:
    the sequential rows prove that)."""
    with gemini(env, a=[call("lookup", order=1), say("looked up")], b=[call("lookup", order=2), say("too")]) as models:
        a = LlmAgent(name="a", model=models.model(), tools=shop(env))
        b = LlmAgent(name="b", model=models.model(), tools=shop(env))
        return guarded(env, ParallelAgent(name="both", sub_agents=[a, b]))


def loop_agent(env: Env) -> Observed:
    with gemini(env, worker=[call("lookup", order=1), call("refund", order=1), call("exit_loop")]) as models:
        worker = LlmAgent(name="worker", model=models.model(), tools=[*shop(env), exit_loop])
        return guarded(env, LoopAgent(name="loop", sub_agents=[worker], max_iterations=3))


def transfer(env: Env) -> Observed:
    with gemini(env, clerk=[call("transfer_to_agent", agent_name="refunds")], refunds=shop_turns()[1:]) as models:
        refunds = LlmAgent(name="refunds", description="Refunds orders.", model=models.model(), tools=shop(env))
        clerk = LlmAgent(name="clerk", model=models.model(), tools=shop(env), sub_agents=[refunds])
        return guarded(env, clerk)


def single_turn_sub_agent(env: Env) -> Observed:
    clerk = [call("helper", request="refund order 1"), say(FINAL)]
    with gemini(env, unnamed="helper", clerk=clerk, helper=helper_turns()) as models:
        helper = LlmAgent(
            name="helper", description="Refunds.", mode="single_turn", model=models.model(), tools=shop(env)
        )
        return guarded(env, LlmAgent(name="clerk", model=models.model(), sub_agents=[helper]))


def task_sub_agent(env: Env) -> Observed:
    helper = [call("lookup", order=1), call("refund", order=1), call("finish_task", result="refunded")]
    with gemini(
        env, unnamed="helper", clerk=[call("helper", request="refund order 1"), say(FINAL)], helper=helper
    ) as models:
        agent = LlmAgent(name="helper", description="Refunds.", mode="task", model=models.model(), tools=shop(env))
        return guarded(env, LlmAgent(name="clerk", model=models.model(), sub_agents=[agent]))


# --- doors: a session goes on -----------------------------------------------------------------------------------


def conversation(env: Env) -> Observed:
    turns = [call("lookup", order=1), say("Order 1 is paid."), call("refund", order=1), say("Refunding."), say(FINAL)]
    with gemini(env, clerk=turns) as models:
        plugin = LoopGuardPlugin(**env.options())
        runner = own_runner(LlmAgent(name="clerk", model=models.model(), tools=shop(env)), plugin)

        async def main() -> tuple[Outcome | None, list[str]]:
            session = await runner.session_service.create_session(app_name="shop", user_id="u")
            said: list[str] = []
            for message in ("Is order 1 paid?", "Refund it.", "Done?"):
                said += (await send(runner, session.id, message))[-1:]
            return plugin.outcome(session.id), said

        outcome, said = asyncio.run(main())
        return env.observe(outcome, final=said[-1] if env.variant == "run" else None)


def confirmation(env: Env) -> Observed:
    with gemini(env, clerk=[call("lookup", order=1), call("refund", order=1), say(FINAL)]) as models:
        service = InMemorySessionService()
        agent = LlmAgent(name="clerk", model=models.model(), tools=shop(env, require_confirmation=True))
        kept = {"session_id": "ticket-7", "session_service": service, "app_name": "shop", **env.options()}

        async def main() -> Outcome:
            paused = await run_guarded(agent, "Refund order 1.", **kept)
            session = await service.get_session(app_name="shop", user_id="user", session_id="ticket-7")
            asked = [c.id for e in session.events for c in e.get_function_calls() if c.name == CONFIRMATION]
            if not asked:
                return paused
            response = types.FunctionResponse(id=asked[-1], name=CONFIRMATION, response={"confirmed": True})
            answer = types.Content(role="user", parts=[types.Part(function_response=response)])
            await run_guarded(agent, answer, **kept)
            return await run_guarded(agent, answer, **kept)  # ADK delivers at least once: a quiet no-op

        return env.observe(asyncio.run(main()))


def max_llm_calls(env: Env) -> Observed:
    with gemini(env, clerk=[call("lookup", order=n) for n in range(1, 10)]) as models:
        plugin = LoopGuardPlugin(**env.options())
        lookup, _ = functions(env)
        runner = own_runner(LlmAgent(name="clerk", model=models.model(), tools=[lookup]), plugin)

        async def main() -> Outcome | None:
            session = await runner.session_service.create_session(app_name="shop", user_id="u")
            await send(runner, session.id, "Look them up.", run_config=RunConfig(max_llm_calls=3))
            return plugin.outcome(session.id)

        return env.observe(asyncio.run(main()))


def ended_session(env: Env) -> Observed:
    """A task the guard ended (the same lookup, again and again) answers the next message with its outcome."""
    with gemini(env, clerk=[call("lookup", order=1)] * 3) as models:
        agent = LlmAgent(name="clerk", model=models.model(), tools=shop(env))
        first = asyncio.run(run_guarded(agent, "Look order 1 up.", **env.options()))
        again = asyncio.run(run_guarded(agent, "And now?", **env.options()))
        assert (again.status, again.reason) == (first.status, first.reason)
        return env.observe(again)


# --- doors no callback sees: refused ----------------------------------------------------------------------------


def gemini_retries(env: Env) -> Observed:
    with gemini(env, clerk=shop_turns()) as models:
        model = models.model(retry_options=types.HttpRetryOptions(attempts=3, initial_delay=0))
        return guarded(env, LlmAgent(name="clerk", model=model, tools=shop(env)))


def client_retries(env: Env) -> Observed:
    retry = types.HttpRetryOptions(attempts=3, initial_delay=0)
    with gemini(env, clerk=shop_turns()) as models:
        base = gemini_http_options()["http_options"]
        options = types.HttpOptions(
            client_args=base.client_args, async_client_args=base.async_client_args, retry_options=retry
        )
        model = models.model(client_kwargs={"http_options": options})
        return guarded(env, LlmAgent(name="clerk", model=model, tools=shop(env)))


def request_retries(env: Env) -> Observed:
    retry = types.HttpRetryOptions(attempts=3, initial_delay=0)
    config = types.GenerateContentConfig(http_options=types.HttpOptions(retry_options=retry))
    with gemini(env, clerk=shop_turns()) as models:
        agent = LlmAgent(name="clerk", model=models.model(), tools=shop(env), generate_content_config=config)
        return guarded(env, agent)


def agent_tool_without_plugins(env: Env) -> Observed:
    with gemini(env, clerk=[call("helper", request="refund order 1"), say(FINAL)], helper=helper_turns()) as models:
        helper = LlmAgent(name="helper", description="Refunds orders.", model=models.model(), tools=shop(env))
        clerk = LlmAgent(name="clerk", model=models.model(), tools=[AgentTool(helper, include_plugins=False)])
        return guarded(env, clerk)


def hosted_tool(env: Env) -> Observed:
    with gemini(env, clerk=[say(FINAL)]) as models:
        return guarded(env, LlmAgent(name="clerk", model=models.model(), tools=[google_search]))


def hosted_tool_opted_out(env: Env) -> Observed:
    """The search runs inside the model's server: no body to count; the stop mark is set while the model answers
    (nothing is sent after it: the answer was the last request). The opt-out is in the task's trace, with its why,
    as an ``unguarded`` entry (never a tool execution); it used to be a declaration by name, recorded nowhere."""

    def searched(body: JSON) -> Reply:
        env.checkpoint()
        return say(FINAL)

    with gemini(env, clerk=[searched]) as models:
        agent = LlmAgent(name="clerk", model=models.model(), tools=[google_search])
        seen = guarded(env, agent, unguarded={"google_search": "public web search, reads only"})
    recorded = [(e.kind, e.tool, e.result_class) for e in env.store.trace(env.task_id) if e.kind != "model"]
    assert recorded == [("unguarded", "google_search", "outside")], recorded
    return seen


def hosted_tool_declared(env: Env) -> Observed:
    """A declaration by name does not reach a hosted tool's body: refused, naming the one opt-out."""
    with gemini(env, clerk=[say(FINAL)]) as models:
        agent = LlmAgent(name="clerk", model=models.model(), tools=[google_search])
        return guarded(env, agent, tools={"google_search": declare_tool("google_search")})


def code_executor(env: Env) -> Observed:
    with gemini(env, clerk=[say(FINAL)]) as models:
        agent = LlmAgent(name="clerk", model=models.model(), code_executor=BuiltInCodeExecutor())
        return guarded(env, agent)


def live(env: Env) -> Observed:
    with gemini(env, clerk=[say(FINAL)]) as models:
        plugin = LoopGuardPlugin(**env.options())
        runner = own_runner(LlmAgent(name="clerk", model=models.model(), tools=shop(env)), plugin)

        async def main() -> None:
            session = await runner.session_service.create_session(app_name="shop", user_id="u")
            queue = LiveRequestQueue()
            queue.close()
            async for _event in runner.run_live(user_id="u", session_id=session.id, live_request_queue=queue):
                pass

        asyncio.run(main())
        return env.observe(plugin.outcome())


def plugin_before_guard(env: Env) -> Observed:
    with gemini(env, clerk=shop_turns()) as models:
        plugin = LoopGuardPlugin(**env.options())
        runner = own_runner(
            LlmAgent(name="clerk", model=models.model(), tools=shop(env)), ReflectAndRetryToolPlugin(), plugin
        )

        async def main() -> None:
            session = await runner.session_service.create_session(app_name="shop", user_id="u")
            await send(runner, session.id, "Refund order 1.")

        asyncio.run(main())
        return env.observe(plugin.outcome())


def door(name: str, doc: str, build: Callable[[Env], Observed], **more: Any) -> Door:
    return Door("adk", name, doc, build, **more)


def refused_door(name: str, doc: str, build: Callable[[Env], Observed], refusal: str) -> Door:
    return Door("adk", name, doc, refused(build), mark="refused", refusal=refusal)


DOORS = [
    door("function-tool", "`guarded_tool` function tools, read and write, under `run_guarded`", function_tools),
    door(
        "plain-function-tool",
        "a plain function in `tools=[...]` nobody declared (guarded as a read)",
        plain_function_tool,
    ),
    door("declared-by-name", "plain functions declared by name (`tools={...}`)", declared_by_name),
    door("parallel-calls", "several function calls in one model turn (ADK runs them concurrently)", parallel_calls),
    door("sse-streaming", "`RunConfig(streaming_mode=StreamingMode.SSE)`", sse_streaming),
    door("own-runner", "the plugin in `App(plugins=[...])` with the application's own `Runner`", in_own_runner),
    door("agent-callbacks", "per-agent callbacks (`LlmAgent(**agent_callbacks(plugin))`)", per_agent_callbacks),
    door("unknown-tool", "a call of a tool the agent does not have", unknown_tool, final=FINAL),
    door(
        "rewritten-arguments",
        "an agent's `before_tool_callback` that rewrites a call's arguments",
        rewritten_arguments,
        final=FINAL,
    ),
    door("long-running-tool", "a `LongRunningFunctionTool`", long_running),
    door("agent-tool", "an agent used as a tool (`AgentTool(agent)`)", agent_tool, final=FINAL),
    door(
        "agent-tool-again",
        "an `AgentTool` called again and again (each call a new `Runner` and session)",
        agent_tool_again_and_again,
        budget=Budget(model_turns=3, tool_executions=2),
        stop_reason=None,
    ),
    door("runner-in-tool", "a `Runner.run_async` started inside a tool body", runner_in_tool, final=FINAL),
    door("sequential-agent", "a `SequentialAgent`'s sub-agents", sequential, final=FINAL),
    door("parallel-agent", "a `ParallelAgent`'s sub-agents (concurrent branches)", parallel_agents, stop_at=None),
    door("loop-agent", "a `LoopAgent` whose sub-agent calls `exit_loop`", loop_agent),
    door("transfer", "a transfer to a sub-agent (`transfer_to_agent`)", transfer, final=FINAL),
    door(
        "single-turn-agent",
        'a sub-agent with `mode="single_turn"` (called as a tool)',
        single_turn_sub_agent,
        final=FINAL,
    ),
    door(
        "task-agent", 'a sub-agent with `mode="task"` (delegated, ends with `finish_task`)', task_sub_agent, final=FINAL
    ),
    door(
        "conversation",
        "a session that gets three messages (each a run of the session's task)",
        conversation,
        final=FINAL,
    ),
    door(
        "confirmation",
        "ADK's tool confirmation (`require_confirmation=True`) answered, then the same answer again",
        confirmation,
        final=FINAL,
    ),
    door("max-llm-calls", "ADK's own `RunConfig(max_llm_calls=...)` beside the guard", max_llm_calls),
    door("ended-session", "a new message to a session whose task the guard ended", ended_session, stop_reason=None),
    door(
        "hosted-tool-opted-out",
        'a hosted tool (`google_search`) opted out (`unguarded={"google_search": "why"}`)',
        hosted_tool_opted_out,
        mark="outside",
        stop_reason=None,
    ),
    refused_door(
        "gemini-retries",
        "a model that retries inside one call (`Gemini(retry_options=...)`)",
        gemini_retries,
        "retry_options=None",
    ),
    refused_door(
        "client-retries",
        'a client that retries inside one call (`client_kwargs={"http_options": HttpOptions(retry_options=...)}`)',
        client_retries,
        "retry_options=None",
    ),
    refused_door(
        "request-retries",
        "requests that retry inside one call (`generate_content_config.http_options.retry_options`)",
        request_retries,
        "retry_options=None",
    ),
    refused_door(
        "agent-tool-without-plugins",
        "an `AgentTool(agent, include_plugins=False)` (the nested run without the plugin)",
        agent_tool_without_plugins,
        "keep include_plugins=True",
    ),
    refused_door(
        "hosted-tool", "a hosted tool (`google_search`) nobody opted out", hosted_tool, "unguarded={'google_search'"
    ),
    refused_door(
        "hosted-tool-declared",
        'a hosted tool declared by name (`tools={"google_search": declare_tool(...)}`) instead of opted out',
        hosted_tool_declared,
        "a declaration does not reach it",
    ),
    refused_door(
        "code-executor", "a code executor (`LlmAgent(code_executor=...)`)", code_executor, "unguarded={'code_executor'"
    ),
    refused_door("live", "a live run (`Runner.run_live`)", live, "Runner.run_async"),
    refused_door(
        "plugin-before-guard",
        "a plugin that answers tool calls listed before the guard (`ReflectAndRetryToolPlugin`)",
        plugin_before_guard,
        "plugin first",
    ),
    refused_door(
        "declared-twice",
        "a tool declared by `guarded_tool` and, differently, in `tools=`",
        declared_twice,
        "is declared twice",
    ),
]
