"""LangChain v1's doors: ``create_agent`` with ``LoopGuardMiddleware``, ``ChatOpenAI`` talking to the scripted
OpenAI-compatible server over real HTTP (the real openai client), LangGraph's own checkpointers.

The same little shop as the other frameworks' rows, written as a LangChain user would: ``lookup`` (a read) and
``refund`` (a write, operation ``refund-<order>``, verified at the receiver) are ``@tool`` functions; the model looks
order 1 up, refunds it, asks for the same refund again (the ledger answers it), then answers. The task is the
LangGraph thread (``thread_id`` is the env's task). Each door changes one thing.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    HumanInTheLoopMiddleware,
    ModelCallLimitMiddleware,
    ModelRetryMiddleware,
    ToolCallLimitMiddleware,
    ToolRetryMiddleware,
)
from langchain.agents.structured_output import ToolStrategy
from langchain_core.tools import BaseTool, StructuredTool, ToolException, tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from pydantic import BaseModel

from agents_loopguard import Budget
from agents_loopguard.langchain import LoopGuardMiddleware, outcome_of
from agents_loopguard.run import ToolSpec, declare_tool
from tests.conformance.kit import Door, Env, Observed
from tests.support.scripted_openai import ScriptedOpenAIServer, final_text, function_call, http_error, tool_calls
from tests.support.shop import MODEL
from tests.support.wire import async_http_client, http_client

__all__ = ["DOORS"]

FINAL = "Refunded order 1."
APPROVE = {"decisions": [{"type": "approve"}]}


# --- the shop -------------------------------------------------------------------------------------------------


def shop(env: Env, *, lookup_fails: int = 0, refund_lost: bool = False, asynchronous: bool = False) -> list[BaseTool]:
    """``lookup`` (its first ``lookup_fails`` runs fail without effect) and ``refund`` (its answer lost after the
    effect when ``refund_lost``), whose bodies count themselves in ``env`` (``async def`` when ``asynchronous``)."""
    failures = [ConnectionError("the shop did not answer")] * lookup_fails
    if asynchronous:
        return _async_shop(env)

    @tool
    def lookup(order: int) -> str:
        """Look an order up."""
        env.body("lookup")
        if failures:
            raise failures.pop()
        return f"order {order}: paid"

    @tool
    def refund(order: int) -> str:
        """Refund an order."""
        env.body("refund", f"refund-{order}")
        if refund_lost:
            raise ConnectionError("the payment service did not answer")
        return f"refunded {order}"

    return [lookup, refund]


def _async_shop(env: Env) -> list[BaseTool]:
    @tool
    async def lookup(order: int) -> str:
        """Look an order up."""
        env.body("lookup")
        return f"order {order}: paid"

    @tool
    async def refund(order: int) -> str:
        """Refund an order."""
        env.body("refund", f"refund-{order}")
        return f"refunded {order}"

    return [lookup, refund]


def declared(env: Env) -> dict[str, ToolSpec]:
    """The guard's declarations: the lookup proves nothing; the refund is a write verified at the receiver."""

    def refunded(args: dict[str, Any], output: Any) -> dict[str, Any]:
        committed = env.committed(f"refund-{args['order']}")
        return {"revision": 2, "done": False, "effect": "committed" if committed else "unknown"}

    return {
        "lookup": declare_tool("lookup", verify=lambda a, out: {"revision": 1, "done": False, "effect": "none"}),
        "refund": declare_tool("refund", kind="write", operation_id=lambda a: f"refund-{a['order']}", verify=refunded),
    }


def script(*before_refund: Any, answer: str = FINAL) -> list[Any]:
    """Look order 1 up, (``before_refund``), refund it, ask for the same refund again, answer."""
    return [
        tool_calls(function_call("lookup", {"order": 1}, "c1")),
        *before_refund,
        tool_calls(function_call("refund", {"order": 1}, "c2")),
        tool_calls(function_call("refund", {"order": 1}, "c3")),
        final_text(answer),
    ]


def chat(server: ScriptedOpenAIServer, **options: Any) -> ChatOpenAI:
    """``ChatOpenAI`` over HTTP to the scripted server (its own retries off unless ``options`` say otherwise)."""
    settings = {"max_retries": 0, **options}
    return ChatOpenAI(
        model=MODEL,
        base_url=server.base_url,
        api_key="test",
        http_client=http_client(),
        http_async_client=async_http_client(),
        **settings,
    )


def guard_for(env: Env, **options: Any) -> LoopGuardMiddleware:
    """The guard of the env's budget and store (the task is the thread: no ``task_id=``)."""
    return LoopGuardMiddleware(budget=env.budget, store=env.store, tools=declared(env), **options)


def thread(env: Env, **configurable: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": env.task_id, **configurable}, "recursion_limit": 100}


def ask(text: str = "Refund order 1.") -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def invoke(agent: Any, how: str, payload: Any, config: dict[str, Any]) -> Any:
    """Run ``agent`` the way ``how`` says: ``invoke``, ``ainvoke``, ``stream`` (updates) or ``astream`` (the
    model's tokens, ``stream_mode="messages"``); the final state comes back."""
    if how == "invoke":
        return agent.invoke(payload, config)
    if how == "ainvoke":
        return asyncio.run(agent.ainvoke(payload, config))
    if how == "stream":
        for _ in agent.stream(payload, config, stream_mode="updates"):
            pass
    else:

        async def main() -> None:
            async for _ in agent.astream(payload, config, stream_mode="messages"):
                pass

        asyncio.run(main())
    return agent.get_state(config).values


def run_agent(
    env: Env,
    steps: Sequence[Any],
    *,
    how: str = "invoke",
    before: Sequence[AgentMiddleware[Any, Any, Any]] = (),
    after: Sequence[AgentMiddleware[Any, Any, Any]] = (),
    tools: list[BaseTool] | None = None,
    model_options: dict[str, Any] | None = None,
    guard_options: dict[str, Any] | None = None,
    **agent_options: Any,
) -> Observed:
    """One agent run through the door: ``before``/``after`` list middleware around the guard."""
    tools = shop(env) if tools is None else tools
    guard = guard_for(env, **(guard_options or {}))
    with ScriptedOpenAIServer(steps) as server:
        env.count_requests(lambda: len(server.requests))
        checkpointer = agent_options.pop("checkpointer", None)
        if how in ("stream", "astream") and checkpointer is None:
            checkpointer = InMemorySaver()  # the final state is read back from the thread
        agent = create_agent(
            chat(server, **(model_options or {})),
            tools=tools,
            middleware=[*before, guard, *after],
            checkpointer=checkpointer,
            **agent_options,
        )
        result = invoke(agent, how, ask(), thread(env))
        return env.observe(guard.outcome(result))


def runs(how: str) -> Callable[[Env], Observed]:
    def build(env: Env) -> Observed:
        return run_agent(env, script(), how=how)

    return build


# --- retry layers ---------------------------------------------------------------------------------------------


def tool_retry_after_lost_write(env: Env) -> Observed:
    """Issue 26 item 2: a ``ToolRetryMiddleware`` listed after the guard re-sent a write whose answer was lost (3
    refund bodies under one reservation). Each run of the body is now a proposal: the second is refused
    ``unknown_commit`` (the run needs reconciliation), the refund ran once."""
    retry = ToolRetryMiddleware(max_retries=2, initial_delay=0, jitter=False)
    return run_agent(env, script(), after=[retry], tools=shop(env, refund_lost=True))


def tool_retry_after_read(env: Env) -> Observed:
    """A ``ToolRetryMiddleware`` after the guard retries a lookup that failed without effect: each run of the body
    reserved, the run goes on."""
    retry = ToolRetryMiddleware(max_retries=2, initial_delay=0, jitter=False)
    return run_agent(env, script(), after=[retry], tools=shop(env, lookup_fails=1))


def tool_retry_before(env: Env) -> Observed:
    """A ``ToolRetryMiddleware`` listed before the guard reads the guard's answer (a failed lookup is the run's
    failure, reported as a ``ToolMessage``), never the exception: nothing is retried."""
    retry = ToolRetryMiddleware(max_retries=2, initial_delay=0, jitter=False)
    return run_agent(env, script(), before=[retry], tools=shop(env, lookup_fails=1))


def model_retry_after(env: Env) -> Observed:
    """Issue 26 item 2: a ``ModelRetryMiddleware`` listed after the guard re-sent failed requests unseen (the server
    got more requests than the task counted). Each of its attempts now goes through the guarded model."""
    retry = ModelRetryMiddleware(max_retries=3, initial_delay=0, jitter=False)
    steps = [http_error(500, retry_after_ms=1), http_error(500, retry_after_ms=1), *script()]
    return run_agent(env, steps, after=[retry], model_options={"max_retries": 1})


def model_retry_before(env: Env) -> Observed:
    """A ``ModelRetryMiddleware`` listed before the guard: the guard already made the client's retries (each
    reserved) and ends a request that failed for good, so the layer outside it has nothing left to retry."""
    retry = ModelRetryMiddleware(max_retries=3, initial_delay=0, jitter=False)
    steps = [http_error(500, retry_after_ms=1), *script()]
    return run_agent(env, steps, before=[retry], model_options={"max_retries": 1})


def client_retries(env: Env) -> Observed:
    """``ChatOpenAI(max_retries=2)``: the client's own retries are taken over, each HTTP attempt reserved."""
    steps = [http_error(503, retry_after_ms=1), http_error(503, retry_after_ms=1), *script()]
    return run_agent(env, steps, model_options={"max_retries": 2})


# --- conversations ----------------------------------------------------------------------------------------------


def conversation(env: Env, answers: Sequence[str], *, expect_requests: int) -> Observed:
    """Three messages on one thread with a checkpointer: the thread is one task, each message a run of its own on
    it (a run that ended with an answer is reopened by the next message), the budget bounding the whole thread. The
    first one looks order 1 up."""
    lookup = shop(env)[0]
    steps = [tool_calls(function_call("lookup", {"order": 1}, "c1")), *(final_text(a) for a in answers)]
    guard = guard_for(env)
    with ScriptedOpenAIServer(steps) as server:
        env.count_requests(lambda: len(server.requests))
        agent = create_agent(chat(server), tools=[lookup], middleware=[guard], checkpointer=InMemorySaver())
        replies, outcome, first_run = [], None, 0
        for text in ("Is order 1 paid?", "And when?", "Thanks."):
            result = agent.invoke(ask(text), thread(env))
            replies.append(str(result["messages"][-1].content))
            outcome = guard.outcome(result)
            first_run = first_run or len(server.requests)
        expected = expect_requests if env.variant == "run" else first_run  # stopped: the task stays ended
        assert len(server.requests) == expected, replies
        if env.variant == "run":
            assert "Thanks." not in replies and all(replies), replies  # every message got an answer
            reopened = [t.kind for t in env.store.transitions(env.task_id)]
            assert reopened == ["message", "message"], reopened  # each later message reopened the one task
        else:
            assert all(r.startswith("Stopped by loopguard (stopped/stop_requested)") for r in replies), replies
        return env.observe(outcome, final=replies[-1])


def chat_three_messages(env: Env) -> Observed:
    """Issue 26 item 5: messages 2 and 3 on a thread sent nothing and returned the user's own message. Each gets
    its answer now."""
    seen = conversation(env, ["Order 1 is paid.", "Yesterday.", "You are welcome."], expect_requests=4)
    if env.variant == "run":
        assert seen.final == "You are welcome." and seen.outcome is not None and seen.outcome.used.models == 4
    return seen


def chat_budget(env: Env) -> Observed:
    """The thread's budget (3 model turns) still bounds it: the third message finds none left and its run says so
    (``stopped/model_budget``), sending nothing."""
    seen = conversation(env, ["Order 1 is paid.", "Yesterday."], expect_requests=3)
    if env.variant == "run":
        assert str(seen.final).startswith("Stopped by loopguard (stopped/model_budget)"), seen.final
    return seen


def chat_approval(env: Env) -> Observed:
    """A thread whose second message asks for the refund: the guarded review pauses the one task (the interrupted
    result tells ``needs_human/approval``), ``Command(resume=...)`` runs the refund once, a third message is answered,
    and resuming the interrupted checkpoint again runs nothing twice."""
    steps = [
        tool_calls(function_call("lookup", {"order": 1}, "c1")),
        final_text("Order 1 is paid."),
        tool_calls(function_call("refund", {"order": 1}, "c2")),
        final_text(FINAL),
        final_text("You are welcome."),
    ]
    guard = guard_for(env)
    review = guard.human_in_the_loop({"refund": True})
    with ScriptedOpenAIServer(steps) as server, checkpointer_for(env) as saver:
        env.count_requests(lambda: len(server.requests))
        agent = create_agent(chat(server), tools=shop(env), middleware=[guard, review], checkpointer=saver)
        replies = [str(agent.invoke(ask("Is order 1 paid?"), thread(env))["messages"][-1].content)]
        paused = agent.invoke(ask("Refund it."), thread(env))
        interrupted = agent.get_state(thread(env)).config
        assert "__interrupt__" in paused or env.variant == "stop", paused["messages"][-1]
        if "__interrupt__" in paused:
            waiting = outcome_of(paused)
            assert waiting is not None and str(waiting.reason) == "approval", waiting
            paused = agent.invoke(Command(resume=APPROVE), thread(env))
        replies.append(str(paused["messages"][-1].content))
        last = agent.invoke(ask("Thanks."), thread(env))
        replies.append(str(last["messages"][-1].content))
        outcome = guard.outcome(last)
        if env.variant == "run":
            assert replies == ["Order 1 is paid.", FINAL, "You are welcome."], replies
            agent.invoke(Command(resume=APPROVE), {**interrupted, "recursion_limit": 100})  # the old checkpoint
            assert env.writes["refund-1"] == 1 and len(server.requests) == 5
        return env.observe(outcome, final=replies[-1])


# --- approvals ---------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def checkpointer_for(env: Env) -> Iterator[Any]:
    """LangGraph's checkpointer on the env's backend: in memory, a SQLite file, or PostgreSQL in a schema of its own
    (a loopguard store refuses a schema that holds other tables)."""
    from tests.support.langchain_shop import checkpointer

    if env.store_kind == "memory" or env.store_url is None:
        yield InMemorySaver()
    elif env.store_kind == "sqlite":
        yield checkpointer(str(env.tmp_path / "checkpoints.sqlite"))
    else:
        import psycopg

        from tests.conftest import libpq_url, with_search_path

        base = env.store_url.split("?", 1)[0]
        schema = f"lg_cp_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(libpq_url(base), autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        saver = checkpointer(libpq_url(with_search_path(base, schema)))
        try:
            yield saver
        finally:
            saver.conn.close()
            with psycopg.connect(libpq_url(base), autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def approved(env: Env, review: Callable[[LoopGuardMiddleware], AgentMiddleware[Any, Any, Any]]) -> Observed:
    """The refund waits for a human (``review``); ``Command(resume=...)`` approves it on the same thread."""
    guard = guard_for(env)
    with ScriptedOpenAIServer(script()) as server, checkpointer_for(env) as saver:
        env.count_requests(lambda: len(server.requests))
        agent = create_agent(chat(server), tools=shop(env), middleware=[guard, review(guard)], checkpointer=saver)
        result = agent.invoke(ask(), thread(env))
        for _ in range(3):  # each proposal of the refund waits for the human, who approves it
            if "__interrupt__" not in result:
                break
            result = agent.invoke(Command(resume=APPROVE), thread(env))
        return env.observe(guard.outcome(result))


def guarded_review(env: Env) -> Observed:
    return approved(env, lambda guard: guard.human_in_the_loop({"refund": True}))


def plain_review(env: Env) -> Observed:
    """LangChain's own ``HumanInTheLoopMiddleware`` beside the guard: its pause is LangGraph's alone. When the human
    approves, the guard refuses the reviewed refund (nothing runs) and the run ends naming the fix."""
    seen = approved(env, lambda guard: HumanInTheLoopMiddleware({"refund": True}))
    if env.variant == "run":
        assert seen.outcome is not None and "guard.human_in_the_loop" in seen.outcome.detail, seen.outcome
    return seen


def interrupt_in_tool(env: Env) -> Observed:
    """A tool body that asks a human itself (``interrupt()``): each run of the body is reserved, the interrupted
    one and the resumed one."""
    from langgraph.types import interrupt

    @tool
    def lookup(order: int) -> str:
        """Look an order up, once a human agrees."""
        env.body("lookup")
        agreed = interrupt({"question": f"look order {order} up?"})
        return f"order {order}: paid ({agreed})"

    guard = guard_for(env)
    with ScriptedOpenAIServer([*script()[:1], final_text(FINAL)]) as server, checkpointer_for(env) as saver:
        env.count_requests(lambda: len(server.requests))
        agent = create_agent(chat(server), tools=[lookup], middleware=[guard], checkpointer=saver)
        paused = agent.invoke(ask(), thread(env))
        result = agent.invoke(Command(resume="yes"), thread(env)) if "__interrupt__" in paused else paused
        return env.observe(guard.outcome(result))


# --- nested agents -------------------------------------------------------------------------------------------------


def subagent(guarded: bool, how: str = "invoke") -> Callable[[Env], Observed]:
    """A subagent as a tool (``create_agent`` invoked inside a ``@tool``): with the guard, it joins the parent's
    task (its lookup and requests counted there, the parent's answer comes back); without one, nothing of it is
    seen (its own server, its own uncounted tool)."""

    def build(env: Env) -> Observed:
        guard = guard_for(env)
        sub_steps = [tool_calls(function_call("lookup", {"order": 1}, "s1")), final_text("order 1 is paid")]
        parent_steps = [tool_calls(function_call("research", {"question": "Is order 1 paid?"}, "p1"))]
        parent_steps.append(final_text(FINAL))
        with ScriptedOpenAIServer(parent_steps) as server, ScriptedOpenAIServer(sub_steps) as sub_server:
            env.count_requests(lambda: len(server.requests))
            if guarded:
                env.count_requests(lambda: len(sub_server.requests))
                sub = create_agent(chat(sub_server), tools=shop(env)[:1], middleware=[guard])
            else:

                @tool
                def lookup(order: int) -> str:
                    """Look an order up (not counted: this agent has no guard)."""
                    return f"order {order}: paid"

                sub = create_agent(chat(sub_server), tools=[lookup])

            @tool
            async def research(question: str) -> str:
                """Ask the research agent."""
                env.checkpoint()
                found = await sub.ainvoke(ask(question))
                return str(found["messages"][-1].content)

            @tool("research")
            def research_sync(question: str) -> str:
                """Ask the research agent."""
                env.checkpoint()
                return str(sub.invoke(ask(question))["messages"][-1].content)

            tool_ = research if how == "ainvoke" else research_sync
            agent = create_agent(chat(server), tools=[tool_], middleware=[guard])
            return env.observe(guard.outcome(invoke(agent, how, ask(), thread(env))))

    return build


# --- LangChain's own limits, output, tools --------------------------------------------------------------------------


def tool_call_limit(env: Env) -> Observed:
    return run_agent(env, script(), before=[ToolCallLimitMiddleware(run_limit=2, exit_behavior="continue")])


def model_call_limit(env: Env) -> Observed:
    """LangChain's model-call limit ends the run first (its sentence is the last message): the guard counted the
    requests it let through."""
    return run_agent(env, script(), before=[ModelCallLimitMiddleware(run_limit=3, exit_behavior="end")])


class Refund(BaseModel):
    order: int
    refunded: bool


def structured_output(env: Env) -> Observed:
    """``response_format=ToolStrategy(Refund)``: the answer is a structured response (it used to end the run
    ``stopped/fatal``, "without an answer")."""
    steps = [*script()[:-1], tool_calls(function_call("Refund", {"order": 1, "refunded": True}, "c4"))]
    seen = run_agent(env, steps, response_format=ToolStrategy(Refund))
    if env.variant == "run":
        assert seen.outcome is not None and seen.outcome.final_output == {"order": 1, "refunded": True}, seen.outcome
    return seen


def tool_error_handled(env: Env) -> Observed:
    """A tool that handles its own error (``handle_tool_error=True``, ``ToolException``): the body ran, reserved;
    the model reads the error."""

    def lookup(order: int) -> str:
        """Look an order up."""
        env.body("lookup")
        raise ToolException("the shop is closed")

    handled = StructuredTool.from_function(lookup, handle_tool_error=True)
    return run_agent(env, script(), tools=[handled, shop(env)[1]])


class Registers(AgentMiddleware[Any, Any, Any]):
    """A middleware that brings a tool at run time (LangChain's dynamic tools): it offers it to the model and hands
    it to the tool node when the model calls it."""

    def __init__(self, tool_: BaseTool) -> None:
        super().__init__()
        self.dynamic = tool_

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return handler(request.override(tools=[*request.tools, self.dynamic]))

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        if request.tool is None and request.tool_call["name"] == self.dynamic.name:
            request = request.override(tool=self.dynamic)
        return handler(request)


def dynamic_tool(env: Env) -> Observed:
    lookup, refund = shop(env)
    return run_agent(env, script(), before=[Registers(refund)], tools=[lookup])


def parallel_calls(how: str) -> Callable[[Env], Observed]:
    """One response with the lookup and the refund side by side."""

    def build(env: Env) -> Observed:
        both = tool_calls(function_call("lookup", {"order": 1}, "c1"), function_call("refund", {"order": 1}, "c2"))
        tools = shop(env, asynchronous=how == "ainvoke")
        return run_agent(env, [both, final_text(FINAL)], how=how, tools=tools)

    return build


def bound_model(env: Env) -> Observed:
    """A chat model bound before ``create_agent`` (``llm.bind_tools(...)``): guarded at the chat model it binds."""
    with ScriptedOpenAIServer(script()) as server:
        env.count_requests(lambda: len(server.requests))
        tools = shop(env)
        guard = guard_for(env)
        agent = create_agent(chat(server).bind_tools(tools), tools=tools, middleware=[guard])
        return env.observe(guard.outcome(agent.invoke(ask(), thread(env))))


def with_fallbacks(env: Env) -> Observed:
    """``llm.with_fallbacks([other])``: two models behind one, none of which the guard could reserve alone."""
    with ScriptedOpenAIServer(script()) as server:
        env.count_requests(lambda: len(server.requests))
        guard = guard_for(env)
        agent = create_agent(chat(server).with_fallbacks([chat(server)]), tools=shop(env), middleware=[guard])
        try:
            agent.invoke(ask(), thread(env))
        except ValueError as exc:
            seen = env.observe(None)
            seen.refused = str(exc)
            return seen
        return env.observe(None)


HOSTED = {"type": "web_search_preview"}


def hosted_tool(env: Env) -> Observed:
    """A provider's built-in tool among the agent's tools: it runs at the model provider, where no guard reaches."""
    try:
        run_agent(env, script(), tools=[*shop(env), HOSTED])  # type: ignore[list-item]
    except ValueError as exc:
        seen = env.observe(None)
        seen.refused = str(exc)
        return seen
    return env.observe(None)


def hosted_tool_opted_out(env: Env) -> Observed:
    """The same, opted out on purpose (``unguarded={...: why}``, recorded in the task's trace): langchain-openai
    talks to the Responses API; the requests and the agent's own tools are still guarded."""
    seen = run_agent(
        env,
        script(),
        tools=[*shop(env), HOSTED],  # type: ignore[list-item]
        guard_options={"unguarded": {"web_search_preview": "a read-only search at the provider"}},
    )
    assert any(e.kind == "unguarded" for e in env.store.trace(env.task_id))
    return seen


def unknown_tool(env: Env) -> Observed:
    """The model calls a tool the agent does not have: ``invalid_call``, read by the model; nothing runs."""
    steps = [tool_calls(function_call("delete_everything", {}, "c0")), *script()]
    return run_agent(env, steps, guard_options={"on_refusal": "continue"})


def door(name: str, doc: str, build: Callable[[Env], Observed], **more: Any) -> Door:
    return Door("langchain", name, doc, build, **more)


DOORS = [
    door("invoke", "`create_agent(...).invoke` with `ChatOpenAI`", runs("invoke"), final=FINAL),
    door("ainvoke", "`ainvoke`", runs("ainvoke"), final=FINAL),
    door("stream", '`stream(..., stream_mode="updates")`', runs("stream"), final=FINAL),
    door("astream-tokens", '`astream(..., stream_mode="messages")`: the model streams its tokens', runs("astream")),
    door(
        "tool-retry-after-write",
        "a `ToolRetryMiddleware` listed after the guard, around a write whose answer was lost",
        tool_retry_after_lost_write,
    ),
    door(
        "tool-retry-after-read",
        "a `ToolRetryMiddleware` listed after the guard, around a read that failed once",
        tool_retry_after_read,
        final=FINAL,
    ),
    door("tool-retry-before", "a `ToolRetryMiddleware` listed before the guard", tool_retry_before, stop_reason=None),
    door("model-retry-after", "a `ModelRetryMiddleware` listed after the guard", model_retry_after, final=FINAL),
    door("model-retry-before", "a `ModelRetryMiddleware` listed before the guard", model_retry_before, stop_at=None),
    door("client-retries", "`ChatOpenAI(max_retries=2)`: the client's own retries", client_retries, final=FINAL),
    door("chat", "a three-message chat on one thread (a checkpointer)", chat_three_messages),
    door(
        "chat-budget",
        "a chat whose thread runs out of its budget",
        chat_budget,
        budget=Budget(model_turns=3, tool_executions=6),
    ),
    door(
        "chat-approval",
        "a chat whose second message waits for an approval (`guard.human_in_the_loop`), resumed once",
        chat_approval,
    ),
    door(
        "human-in-the-loop",
        "`guard.human_in_the_loop(...)` and `Command(resume=...)` (InMemorySaver, SqliteSaver, PostgresSaver)",
        guarded_review,
        final=FINAL,
    ),
    door(
        "plain-human-in-the-loop",
        "LangChain's own `HumanInTheLoopMiddleware` beside the guard",
        plain_review,
        stop_reason=None,
    ),
    door(
        "interrupt-in-tool",
        "a tool body that calls `interrupt()`, resumed with `Command(resume=...)`",
        interrupt_in_tool,
    ),
    door(
        "subagent",
        "a subagent as a tool: `create_agent` with the guard, invoked inside a `@tool`",
        subagent(True),
        final=FINAL,
    ),
    door(
        "subagent-async",
        "a subagent as an async tool (`ainvoke` inside an async `@tool`)",
        subagent(True, "ainvoke"),
        final=FINAL,
    ),
    door(
        "subagent-unguarded",
        "a subagent built without the guard, invoked inside a `@tool`",
        subagent(False),
        mark="outside",
        final=FINAL,
    ),
    door("tool-call-limit", "`ToolCallLimitMiddleware` beside the guard", tool_call_limit),
    door("model-call-limit", "`ModelCallLimitMiddleware` beside the guard", model_call_limit),
    door("structured-output", "`response_format=ToolStrategy(...)`: a structured answer", structured_output),
    door("tool-error-handled", "a tool that handles its own error (`handle_tool_error=True`)", tool_error_handled),
    door("dynamic-tool", "a tool a middleware listed before the guard brings at run time", dynamic_tool, final=FINAL),
    door("parallel-calls", "two tool calls in one response (sync: one at a time)", parallel_calls("invoke")),
    door(
        "parallel-calls-async",
        "two tool calls in one response, on the event loop (concurrently)",
        parallel_calls("ainvoke"),
        stop_at=None,  # both calls are reserved before either body runs: a mark set by one cannot stop the other
    ),
    door("bound-model", "a chat model bound before `create_agent` (`llm.bind_tools(...)`)", bound_model, final=FINAL),
    door(
        "with-fallbacks",
        "a model with fallbacks (`llm.with_fallbacks([...])`)",
        with_fallbacks,
        mark="refused",
        refusal="pass the chat model itself to create_agent",
    ),
    door("unknown-tool", "a call of a tool the agent does not have", unknown_tool),
    door(
        "hosted-tool",
        'a provider\'s built-in tool (`{"type": "web_search_preview"}`) among the tools',
        hosted_tool,
        mark="refused",
        refusal="Do its work in a @tool the agent runs",
    ),
    door(
        "hosted-tool-opted-out",
        'a provider\'s built-in tool opted out (`unguarded={"web_search_preview": "why"}`)',
        hosted_tool_opted_out,
        mark="outside",
        final=FINAL,
    ),
]
