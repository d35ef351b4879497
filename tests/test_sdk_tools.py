"""Guarded tools: a drop-in for @function_tool, refusals that never run the body, and where the guard is found."""

from __future__ import annotations

import ast
import asyncio
import collections.abc
import copy as copy_module
import dataclasses
import functools
import inspect
import threading
import types
import typing
from typing import Any

import agents
import agents.tool
import pytest
from agents import Agent, FunctionTool, ModelSettings, RunContextWrapper, function_tool
from agents.exceptions import UserError
from agents.testing import ScriptedModel, assistant_message, function_call
from pydantic import BaseModel

from agents_loopguard import Budget, MemoryStore, OperationState, Reason, Status
from agents_loopguard.run import declare_tool
from agents_loopguard.sdk import current_guard, guard_tool, guarded_tool, run_guarded, tool_spec
from agents_loopguard.sdk import tools as tools_module
from tests.support.sdk import committed, sdk_tool_error, told

pytestmark = pytest.mark.timeout(30)
agents.set_tracing_disabled(True)

BUDGET = Budget(model_turns=10, tool_executions=10)
DONE = {"revision": 1, "done": True, "effect": "none"}


def calls(*turns: list[Any], final: str = "ok") -> ScriptedModel:
    return ScriptedModel([*turns, [assistant_message(final)]])


def run(agent: Agent[Any], **kwargs: Any) -> Any:
    kwargs.setdefault("budget", BUDGET)
    return asyncio.run(run_guarded(agent, "go", **kwargs))


# --- drop-in parity --------------------------------------------------------------------------------------


class Filter(BaseModel):
    city: str
    limit: int = 5


def weather(ctx: RunContextWrapper[Any], city: str, days: int = 1, flt: Filter | None = None) -> str:
    """Weather forecast.

    Args:
        city: The city.
        days: How many days.
        flt: An optional filter.
    """
    return f"sunny in {city}"


async def aweather(city: str) -> str:
    """Async weather."""
    return f"sunny in {city}"


async def ahumidity(city: str) -> str:
    """Async humidity."""
    return f"dry in {city}"


async def approve_big(_ctx: Any, params: dict[str, Any], _call_id: str) -> bool:
    return bool(params.get("amount", 0) > 10)


@pytest.mark.parametrize(
    ("func", "kwargs"),
    [
        (weather, {}),
        (weather, {"name_override": "forecast", "description_override": "Forecast.", "docstring_style": "google"}),
        (weather, {"strict_mode": False, "needs_approval": True}),
        (aweather, {"timeout": 2.5, "timeout_behavior": "raise_exception", "is_enabled": False}),
        (aweather, {"needs_approval": approve_big, "use_docstring_info": False}),
    ],
)
def test_guarded_tool_builds_the_same_tool_as_function_tool(func: Any, kwargs: dict[str, Any]) -> None:
    plain = function_tool(func, **kwargs)
    guarded = guarded_tool(**kwargs)(func)
    assert isinstance(guarded, FunctionTool)
    for attr in (
        "name",
        "description",
        "params_json_schema",
        "strict_json_schema",
        "needs_approval",
        "timeout_seconds",
        "timeout_behavior",
        "is_enabled",
    ):
        assert getattr(guarded, attr) == getattr(plain, attr), attr
    assert tool_spec(guarded) is not None and tool_spec(plain) is None


def test_bare_decorator_and_sync_timeout_rule_match_function_tool() -> None:
    assert guarded_tool(aweather).name == "aweather"
    with pytest.raises(ValueError, match="only supported for async"):
        function_tool(weather, timeout=1)
    with pytest.raises(ValueError, match="only supported for async"):
        guarded_tool(timeout=1)(weather)


GUARD_KEYWORDS = ["kind", "operation_id", "verify", "max_executions", "retry", "volatile_args", "probe", "progress_key"]


def _normalized(tp: Any) -> Any:
    """A type compared by meaning: unions as sets, ``X[Any]`` as the bare ``X``."""
    if isinstance(tp, list):  # the parameters of a Callable
        return tuple(_normalized(a) for a in tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return frozenset(_normalized(a) for a in args)
    if origin is None or not args:
        return tp
    if all(a is Any for a in args) and origin not in (list, dict, tuple, collections.abc.Callable):
        return origin
    return (origin, tuple(_normalized(a) for a in args))


def test_guarded_tool_passes_every_function_tool_keyword_through_instead_of_redeclaring_it() -> None:
    """guarded_tool declares only the guard's own keywords; ``function_tool``'s pass through as they are, so the
    tool it builds is the tool ``function_tool`` builds (name, description, schema, strictness, approval, timeout,
    guardrails, enablement...), and a keyword ``function_tool`` does not know is its own ``TypeError``."""
    ours = inspect.signature(guarded_tool).parameters
    assert [name for name, p in ours.items() if p.kind is p.KEYWORD_ONLY] == GUARD_KEYWORDS
    assert [p.kind for p in ours.values()][-1] is inspect.Parameter.VAR_KEYWORD
    sdk = inspect.signature(function_tool).parameters
    options: dict[str, Any] = {
        "name_override": "forecast",
        "description_override": "The forecast.",
        "strict_mode": False,
        "needs_approval": True,
        "is_enabled": False,
        "timeout": 2.5,
        "timeout_behavior": "raise_exception",
        "defer_loading": True,
    }
    assert set(options) <= set(sdk), "the test names function_tool's own keywords"
    plain, guarded = function_tool(aweather, **options), guarded_tool(aweather, **options)
    for field in ("name", "description", "params_json_schema", "strict_json_schema", "needs_approval", "is_enabled"):
        assert getattr(guarded, field) == getattr(plain, field), field
    for field in ("timeout_seconds", "timeout_behavior", "defer_loading"):
        assert getattr(guarded, field) == getattr(plain, field), field
    assert tool_spec(guarded) is not None and tool_spec(plain) is None
    with pytest.raises(TypeError, match="not_a_keyword"):
        guarded_tool(aweather, not_a_keyword=1)


def test_both_overloads_of_guarded_tool_name_the_guards_keywords() -> None:
    """What IDEs and type checkers read: the overloads, not the implementation."""
    tree = ast.parse(inspect.getsource(tools_module))
    defs = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "guarded_tool"]
    implementation = [a.arg for a in defs[-1].args.kwonlyargs]
    assert len(defs) == 3 and implementation == GUARD_KEYWORDS
    for overload in defs[:-1]:
        assert [d.id for d in overload.decorator_list if isinstance(d, ast.Name)] == ["overload"]
        assert [a.arg for a in overload.args.kwonlyargs] == implementation
        assert all(a.annotation is not None for a in overload.args.kwonlyargs)
        assert overload.args.kwarg is not None and overload.args.kwarg.arg == "function_tool_options"


def test_one_declaration_object_serves_several_tools_and_keywords_refine_it() -> None:
    """A ``ToolSpec`` (checked by ``declare_tool``) is the tool's declaration; keywords given beside it win."""
    write = declare_tool("refund", kind="write", operation_id=lambda a: f"refund-{a['city']}", verify=committed)
    one, two = guarded_tool(write)(aweather), guarded_tool(write, max_executions=1)(ahumidity)
    assert tool_spec(one).kind == tool_spec(two).kind == "write"  # type: ignore[union-attr]
    assert (tool_spec(one).max_executions, tool_spec(two).max_executions) == (None, 1)  # type: ignore[union-attr]
    assert tool_spec(one).operation_of({"city": "Oslo"}) == "refund-Oslo"  # type: ignore[union-attr]


def test_max_executions_is_declared_by_both_ways_of_guarding() -> None:
    declared = guarded_tool(max_executions=2)(aweather)
    assert tool_spec(declared).max_executions == 2  # type: ignore[union-attr]
    assert tool_spec(guard_tool(function_tool(aweather), max_executions=0)).max_executions == 0  # type: ignore[union-attr]
    assert tool_spec(guarded_tool(aweather)).max_executions is None  # type: ignore[union-attr]
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="max_executions must be an int >= 0"):
            guarded_tool(max_executions=bad)(aweather)  # type: ignore[call-overload]
        with pytest.raises(ValueError, match="max_executions must be an int >= 0"):
            guard_tool(function_tool(aweather), max_executions=bad)  # type: ignore[arg-type]


def test_declarations_are_checked_when_the_tool_is_made() -> None:
    with pytest.raises(ValueError, match="needs operation_id"):
        guarded_tool(kind="write", verify=committed)(aweather)
    with pytest.raises(ValueError, match="needs verify"):
        guarded_tool(kind="write", operation_id=lambda a: "x")(aweather)
    with pytest.raises(ValueError, match="only applies to kind='write'"):
        guarded_tool(kind="read", operation_id=lambda a: "x")(aweather)
    with pytest.raises(ValueError, match="kind 'delete'"):
        guarded_tool(kind="delete")(aweather)  # type: ignore[call-overload]


def test_guard_tool_wraps_an_existing_function_tool_without_changing_it() -> None:
    ran: list[str] = []

    @function_tool(name_override="lookup", strict_mode=False, failure_error_function=None)
    def original(city: str) -> str:
        """Look up a city."""
        ran.append(city)
        return f"found {city}"

    guarded = guard_tool(original, kind="read", verify=lambda a, out: DONE)
    assert tool_spec(original) is None
    assert (guarded.name, guarded.params_json_schema, guarded.strict_json_schema) == (
        "lookup",
        original.params_json_schema,
        False,
    )
    model = calls([function_call("lookup", {"city": "Oslo"}, call_id="c1")])
    outcome = run(Agent(name="a", model=model, tools=[guarded]))
    assert (outcome.status, outcome.value, ran) == (Status.COMPLETED, "found Oslo", ["Oslo"])
    regarded = guard_tool(guarded, kind="poll")  # declaring again replaces the declaration
    assert tool_spec(regarded) is not None and tool_spec(regarded).kind == "poll"  # type: ignore[union-attr]


def test_guard_tool_on_an_opaque_function_tool_counts_the_invoker_as_the_body() -> None:
    ran: list[str] = []

    async def invoke(_ctx: Any, args_json: str) -> str:
        ran.append(args_json)
        return "raw"

    tool = FunctionTool(
        name="raw",
        description="hand made",
        params_json_schema={"type": "object", "properties": {}, "additionalProperties": False, "required": []},
        on_invoke_tool=invoke,
    )
    model = calls(*[[function_call("raw", {}, call_id=f"c{i}")] for i in range(4)])
    outcome = run(Agent(name="a", model=model, tools=[guard_tool(tool)]))
    assert (outcome.reason, outcome.used.tools, len(ran)) == (Reason.SAME_CALL, 2, 2)


# --- refusals never run the body ---------------------------------------------------------------------------


def test_a_refused_call_never_runs_the_body() -> None:
    """Rules: R1 (gate before execution), R7 (repetition and stall)."""
    ran: list[str] = []

    @guarded_tool
    def search(query: str) -> str:
        """Search."""
        ran.append(query)
        return "nothing"

    model = calls(*[[function_call("search", {"query": "x"}, call_id=f"c{i}")] for i in range(5)])
    outcome = run(Agent(name="a", model=model, tools=[search]))
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.SAME_CALL)
    assert ran == ["x", "x"] and outcome.used.tools == 2


@pytest.mark.parametrize("raw", ["{not json", "[1, 2]", '"text"', '{"q": NaN}'])
def test_malformed_arguments_are_an_invalid_call_not_a_crash(raw: str) -> None:
    """Rules: R1 (gate before execution), R11 (outcomes)."""
    ran: list[Any] = []

    @guarded_tool
    def search(q: float = 0) -> str:
        """Search."""
        ran.append(q)
        return "hit"

    model = calls([function_call("search", raw, call_id="c1")])
    outcome = run(Agent(name="a", model=model, tools=[search]))
    assert (outcome.status, outcome.reason, outcome.used.tools, ran) == (Status.STOPPED, Reason.INVALID_CALL, 0, [])


def test_malformed_arguments_in_continue_mode_tell_the_model_and_go_on() -> None:
    @guarded_tool(verify=lambda a, out: DONE)
    def search(q: str) -> str:
        """Search."""
        return "hit"

    model = calls([function_call("search", "{oops", call_id="c1")], [function_call("search", {"q": "x"}, call_id="c2")])
    outcome = run(Agent(name="a", model=model, tools=[search]), on_refusal="continue")
    assert (outcome.status, outcome.used.tools) == (Status.COMPLETED, 1)
    told = [i for i in model.calls[1].input if isinstance(i, dict) and i.get("type") == "function_call_output"]
    assert "invalid_call" in told[0]["output"] and "not valid JSON" in told[0]["output"]


def test_arguments_the_schema_rejects_are_refused_before_the_reservation() -> None:
    ran: list[int] = []

    @guarded_tool
    def fetch(n: int) -> str:
        """Fetch."""
        ran.append(n)
        return "x"

    model = calls([function_call("fetch", {"n": "not a number"}, call_id="c1")])
    outcome = run(Agent(name="a", model=model, tools=[fetch]))
    assert (outcome.reason, outcome.used.tools, ran) == (Reason.INVALID_CALL, 0, [])


def test_a_committed_write_returns_its_stored_result_without_running_again() -> None:
    """Rules: R5 (call identity), R10 (writes and the ledger)."""
    sent: list[int] = []

    @guarded_tool(kind="write", operation_id=lambda a: f"pay-{a['order']}", verify=committed)
    def pay(order: int, amount: float) -> dict[str, Any]:
        """Pay an order."""
        sent.append(order)
        return {"receipt": f"r-{order}"}

    store = MemoryStore()
    script = [
        [function_call("pay", {"order": 42, "amount": 5}, call_id="c1")],
        [function_call("pay", {"amount": 5.0, "order": 42}, call_id="c2")],  # same action, other key order
    ]
    first = run(Agent(name="a", model=calls(*script), tools=[pay]), store=store, task_id="t1")
    assert sent == [42] and first.used.tools == 1
    # a second task (another run, same ledger) asks for the same business operation
    second = run(Agent(name="a", model=calls(script[0]), tools=[pay]), store=store, task_id="t2")
    assert sent == [42] and second.used.tools == 0
    (record,) = store.operations()
    assert (record.operation_id, record.state, record.result["output"]) == (
        "pay-42",
        OperationState.COMMITTED,
        {"receipt": "r-42"},
    )


def test_a_write_whose_arguments_do_not_name_the_operation_is_refused() -> None:
    @guarded_tool(kind="write", operation_id=lambda a: f"pay-{a['order']}", verify=committed)
    def pay(amount: float, order: int = 0) -> str:
        """Pay."""
        raise AssertionError("must not run")

    bad = ScriptedModel([[function_call("pay", {"amount": 5}, call_id="c1")], [assistant_message("x")]])
    outcome = run(Agent(name="a", model=bad, tools=[pay]))
    assert (outcome.reason, outcome.used.tools) == (Reason.MISSING_OPERATION_ID, 0)
    assert "KeyError" in outcome.detail


def test_a_guarded_tool_outside_a_guarded_run_says_what_to_do() -> None:
    from agents import Runner

    @guarded_tool
    def search(q: str) -> str:
        """Search."""
        return "x"

    agent = Agent(name="a", model=calls([function_call("search", {"q": "x"}, call_id="c1")]), tools=[search])
    with pytest.raises(UserError, match="outside a guarded run") as raised:
        asyncio.run(Runner.run(agent, "go"))
    hint = str(raised.value)  # issue 28: it named only run_guarded, not the fix for the application's own Runner.run
    for fix in (
        "run_guarded(agent, input, budget=...)",
        "run_guarded_sync",
        "run_guarded_streamed",
        "hooks=guard.hooks(), run_config=guard.run_config()",
        "LoopGuard(input, budget=...)",
        "run_guarded_dbos / run_guarded_restate / run_guarded_temporal",
        "agents_loopguard.sdk.testing.call_tool",
    ):
        assert fix in hint, fix


# --- the failure policy is the invoked tool's -------------------------------------------------------------


class Backend:
    """A callable object: the SDK adapts it, so the guard wraps its whole invoker."""

    def __init__(self, ran: list[str]) -> None:
        self.ran = ran

    async def __call__(self, q: str) -> str:
        """Ask the backend."""
        self.ran.append(q)
        raise RuntimeError("backend down")


def _failing_tools(ran: list[str]) -> dict[str, FunctionTool]:
    async def backend(q: str) -> str:
        """Ask the backend."""
        ran.append(q)
        raise RuntimeError("backend down")

    return {
        "guarded_tool": guarded_tool(backend),
        "guard_tool": guard_tool(function_tool(backend)),
        "callable object": guarded_tool(name_override="backend")(Backend(ran)),
    }


def _with_policy(tool: FunctionTool, policy: Any) -> FunctionTool:
    """A copy with another failure policy, as openai-agents 0.22 to 0.24 spell it (``failure_error_function`` is
    stored in private fields: its own tests copy tools this way)."""
    return dataclasses.replace(tool, _failure_error_function=policy, _use_default_failure_error_function=False)


def _told(model: ScriptedModel) -> list[str]:
    return told(model.calls[1].input)


@pytest.mark.parametrize("made_by", ["guarded_tool", "guard_tool", "callable object"])
def test_a_copy_with_another_failure_error_function_formats_errors_its_way(made_by: str) -> None:
    ran: list[str] = []
    original = _failing_tools(ran)[made_by]

    async def apologise(_ctx: RunContextWrapper[Any], error: Exception) -> str:
        return f"sorry: {error}"

    copy = _with_policy(original, apologise)
    assert tool_spec(copy) == tool_spec(original)
    told = {}
    for label, tool in (("copy", copy), ("original", original)):
        model = calls([function_call("backend", {"q": label}, call_id="c1")])
        outcome = run(Agent(name="a", model=model, tools=[tool]), on_refusal="continue")
        assert (outcome.status, outcome.reason, outcome.used.tools) == (Status.PARTIAL, Reason.UNVERIFIED_FINAL, 1)
        told[label] = _told(model)
    assert told == {
        "copy": ["sorry: backend down"],
        "original": [sdk_tool_error(RuntimeError("backend down"))],
    }
    assert ran == ["copy", "original"]


@pytest.mark.parametrize("made_by", ["guarded_tool", "guard_tool", "callable object"])
def test_a_copy_with_failure_error_function_none_re_raises_and_the_run_ends_with_the_failure(made_by: str) -> None:
    ran: list[str] = []
    original = _failing_tools(ran)[made_by]
    raising = _with_policy(original, None)
    store = MemoryStore()
    model = calls([function_call("backend", {"q": "x"}, call_id="c1")])
    outcome = run(Agent(name="a", model=model, tools=[raising]), on_refusal="continue", store=store, task_id="t")
    # the guard recorded the body's failure before the SDK re-raised it: the outcome, never a crash
    assert (outcome.status, outcome.reason, outcome.used.tools, ran) == (
        Status.STOPPED,
        Reason.EXECUTOR_EXCEPTION,
        1,
        ["x"],
    )
    assert len(model.calls) == 1 and "RuntimeError" in outcome.detail
    assert store.task("t").outcome["reason"] == "executor_exception"  # type: ignore[index,union-attr]
    # and the original keeps its own policy: the model reads the SDK's message and the run goes on
    model = calls([function_call("backend", {"q": "y"}, call_id="c1")])
    outcome = run(Agent(name="a", model=model, tools=[original]), on_refusal="continue")
    assert (outcome.status, _told(model)) == (
        Status.PARTIAL,
        [sdk_tool_error(RuntimeError("backend down"))],
    )


def test_guarding_a_tool_keeps_its_failure_policy_and_a_copy_of_a_copy_keeps_following() -> None:
    def shout(_ctx: RunContextWrapper[Any], error: Exception) -> str:
        return f"FAILED: {error}"

    async def backend(q: str) -> str:
        """Ask the backend."""
        raise RuntimeError("down")

    guarded = guard_tool(function_tool(backend, failure_error_function=shout))
    relabelled = dataclasses.replace(copy_module.copy(guarded), description="Ask the backend, politely.")
    for tool in (guarded, relabelled):
        model = calls([function_call("backend", {"q": "x"}, call_id="c1")])
        run(Agent(name="a", model=model, tools=[tool]), on_refusal="continue")
        assert _told(model) == ["FAILED: down"]


# --- evidence ----------------------------------------------------------------------------------------------


def test_verify_may_be_async_and_sees_the_arguments_and_the_output() -> None:
    seen: list[tuple[dict[str, Any], Any]] = []

    async def verify(args: dict[str, Any], output: Any) -> dict[str, Any]:
        seen.append((args, output))
        return {"revision": 3, "done": args["q"] == "final", "effect": "none"}

    @guarded_tool(verify=verify)
    async def search(q: str) -> str:
        """Search."""
        return f"hits for {q}"

    model = calls(
        [function_call("search", {"q": "first"}, call_id="c1")],
        [function_call("search", {"q": "final"}, call_id="c2")],
    )
    outcome = run(Agent(name="a", model=model, tools=[search]))
    assert (outcome.status, outcome.revision, outcome.value) == (Status.COMPLETED, 3, "hits for final")
    assert seen == [({"q": "first"}, "hits for first"), ({"q": "final"}, "hits for final")]


def test_a_verifier_that_raises_or_lies_is_invalid_evidence() -> None:
    @guarded_tool(verify=lambda a, out: {"revision": -1, "done": "yes", "effect": "none"})
    def lying(q: str) -> str:
        """Lie."""
        return "x"

    def boom(a: dict[str, Any], out: Any) -> Any:
        raise RuntimeError("verifier down")

    @guarded_tool(verify=boom)
    def broken(q: str) -> str:
        """Break."""
        return "x"

    for tool in (lying, broken):
        model = calls([function_call(tool.name, {"q": "x"}, call_id="c1")])
        outcome = run(Agent(name="a", model=model, tools=[tool]))
        assert (outcome.status, outcome.reason, outcome.used.tools) == (Status.STOPPED, Reason.INVALID_EVIDENCE, 1)


class Receipt(BaseModel):
    id: str


def test_structured_outputs_are_stored_as_json() -> None:
    @guarded_tool(kind="write", operation_id=lambda a: f"op-{a['n']}", verify=committed)
    def save(n: int) -> Receipt:
        """Save."""
        return Receipt(id=f"r{n}")

    store = MemoryStore()
    run(Agent(name="a", model=calls([function_call("save", {"n": 1}, call_id="c1")]), tools=[save]), store=store)
    assert store.operations()[0].result == {"status": "ok", "output": {"id": "r1"}}


# --- where the guard lives during a run -------------------------------------------------------------------


def test_the_guard_reaches_parallel_calls_and_sync_tools_in_threads() -> None:
    seen: list[tuple[str, str | None, bool]] = []
    gate = threading.Barrier(2, timeout=5)

    @guarded_tool
    def sync_probe(n: int) -> str:
        """Sync probe."""
        guard = current_guard()
        seen.append((threading.current_thread().name, guard.task_id if guard else None, True))
        gate.wait()  # both sync calls run at once, in two threads
        return "s"

    @guarded_tool
    async def async_probe(n: int) -> str:
        """Async probe."""
        await asyncio.sleep(0)
        guard = current_guard()
        seen.append(("loop", guard.task_id if guard else None, False))
        return "a"

    turn = [
        function_call("sync_probe", {"n": 1}, call_id="c1"),
        function_call("sync_probe", {"n": 2}, call_id="c2"),
        function_call("async_probe", {"n": 3}, call_id="c3"),
    ]
    outcome = run(Agent(name="a", model=calls(turn), tools=[sync_probe, async_probe]), task_id="ctx-task")
    assert outcome.used.tools == 3
    assert sorted(task for _, task, _ in seen) == ["ctx-task"] * 3
    threads = {name for name, _, is_sync in seen if is_sync}
    assert len(threads) == 2 and threading.main_thread().name not in threads


def test_two_concurrent_guarded_runs_keep_their_own_guards() -> None:
    @guarded_tool
    async def whoami(n: int) -> str:
        """Who am I."""
        await asyncio.sleep(0.01)
        guard = current_guard()
        return guard.task_id if guard else "none"

    async def both() -> list[Any]:
        runs = [
            run_guarded(
                Agent(name="a", model=calls([function_call("whoami", {"n": i}, call_id="c1")]), tools=[whoami]),
                "go",
                budget=BUDGET,
                task_id=f"task-{i}",
            )
            for i in range(2)
        ]
        return await asyncio.gather(*runs)

    first, second = asyncio.run(both())
    assert (first.value, second.value) == ("task-0", "task-1")  # the last verified output of each run


def test_tool_choice_of_the_agent_is_not_touched() -> None:
    agent = Agent(
        name="a",
        model=calls(),
        model_settings=ModelSettings(tool_choice="required"),
        reset_tool_choice=False,
    )
    run(agent)
    assert agent.model_settings.tool_choice == "required"


def test_context_parameters_and_callable_objects_work_as_with_function_tool() -> None:
    @guarded_tool(verify=lambda a, out: DONE)
    def tenant_of(ctx: RunContextWrapper[Any], q: str) -> str:
        """Which tenant asks."""
        return f"{ctx.context['tenant']}:{q}"

    class Lookup:
        async def __call__(self, q: str) -> str:
            """Look up asynchronously."""
            await asyncio.sleep(0)
            return f"found {q}"

    lookup = guarded_tool(name_override="lookup", verify=lambda a, out: DONE)(Lookup())
    assert lookup.params_json_schema == function_tool(Lookup(), name_override="lookup").params_json_schema
    for tool, expected in ((tenant_of, "t-1:x"), (lookup, "found x")):
        model = calls([function_call(tool.name, {"q": "x"}, call_id="c1")])
        outcome = run(Agent(name="a", model=model, tools=[tool]), context={"tenant": "t-1"})
        assert (outcome.status, outcome.value) == (Status.COMPLETED, expected)
    with pytest.raises(UserError, match="partial"):
        guarded_tool(functools.partial(aweather, "Oslo"))


# --- the application's own hooks see the bodies that ran ---------------------------------------------------


class Journal(agents.RunHooks[Any]):
    """The application's own run hooks: what they were told started and ended."""

    def __init__(self) -> None:
        self.starts: list[str] = []
        self.ends: list[str] = []

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        self.starts.append(context.tool_call_id)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
        self.ends.append(context.tool_call_id)


async def _run_with(door: str, agent: Agent[Any], journal: Journal) -> Any:
    from agents import Runner

    from agents_loopguard.sdk import LoopGuard

    if door == "run_guarded":
        return await run_guarded(agent, "go", budget=BUDGET, store=MemoryStore(), hooks=journal)
    guard = LoopGuard("go", budget=BUDGET, store=MemoryStore())
    try:
        result = await Runner.run(agent, guard.input, hooks=guard.hooks(journal), run_config=guard.run_config())
    except Exception as exc:
        return await guard.outcome(exc)
    return await guard.outcome(result)


@pytest.mark.parametrize("door", ["run_guarded", "Runner.run with guard.hooks()"])
def test_the_applications_on_tool_start_fires_only_for_calls_whose_body_runs(door: str) -> None:
    """Issue 28: the user's ``on_tool_start`` fired for calls the guard then refused (5 starts for 4 executions).
    A loop of identical searches (the third is refused before it runs), and a refund proposed twice (the second is
    answered from the ledger): the hooks hear of exactly the bodies that ran, each start with its end."""
    bodies: list[str] = []

    @guarded_tool(verify=lambda a, out: {"revision": 1, "done": False, "effect": "none"})
    def search(q: str) -> str:
        """Search."""
        bodies.append("search")
        return "doc-14"

    @guarded_tool(
        kind="write",
        operation_id=lambda a: f"refund-{a['order']}",
        verify=lambda a, out: {"revision": 1, "done": False, "effect": "committed"},
    )
    def refund(order: int) -> str:
        """Refund."""
        bodies.append("refund")
        return "refunded"

    searches = [[function_call("search", {"q": "refund policy"}, call_id=f"s{n}")] for n in range(4)]
    looping = Agent(name="a", model=calls(*searches), tools=[search])
    journal = Journal()
    outcome = asyncio.run(_run_with(door, looping, journal))
    assert outcome.reason is Reason.SAME_CALL, outcome  # the third search was refused before it ran
    assert bodies == ["search", "search"] and journal.starts == journal.ends == ["s0", "s1"]

    bodies.clear()
    twice = [[function_call("refund", {"order": 7}, call_id=f"r{n}")] for n in range(2)]
    refunding = Agent(name="a", model=calls(*twice), tools=[refund])
    journal = Journal()
    outcome = asyncio.run(_run_with(door, refunding, journal))
    assert outcome.used.tools == 1, outcome  # the second proposal is answered from the ledger
    assert bodies == ["refund"] and journal.starts == journal.ends == ["r0"]
