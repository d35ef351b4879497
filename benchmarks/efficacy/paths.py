"""One trajectory through the guard, by every path a call can take: the engine itself (a :class:`Guard` driven as the
guarded run drives it: reserve a turn, authorize, execute, verify, settle, the tool's retries with ``retry_of``), the
raw function-calling loop (the real ``openai`` client over HTTP against the scripted OpenAI-compatible server; Chat
Completions and Responses), the Agents SDK (``ScriptedModel``; ``run_guarded`` and ``run_guarded_streamed``), and
LangChain (``create_agent`` with ``ChatOpenAI`` over HTTP) and Google ADK (``Gemini`` over HTTP against the scripted
Gemini server) through the test suite's adapter harness (``tests/support/adapters.py``).

Each run gets a fresh :class:`~benchmarks.efficacy.world.World`; the guard's clock is the world's fake clock, so a
poll's wait and a retry's backoff take the same time in every path. What a run comes to is read from the world (the
tool bodies that really ran) and from the outcome.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agents_loopguard import Budget, Guard, Outcome, Policy, Reason, Status, Store, Verdict
from agents_loopguard.run.retry import RetryPolicy, TransientToolError
from agents_loopguard.values.calls import Call
from agents_loopguard.values.evidence import UNVERIFIED

from .corpus import ToolDef, Trajectory
from .world import FailedAttempt, World

__all__ = ["ADAPTER_PATHS", "BUDGET", "PATHS", "Ran", "fits", "run", "sample", "unguarded"]

BUDGET = Budget(model_turns=2000, tool_executions=2000)
"""A budget no trajectory reaches: the scores measure the loop rules, not the budget."""
ADAPTER_PATHS = ("chat", "responses", "sdk", "sdk-streamed", "langchain", "adk")
FACTS = "facts"
"""The progress key of every tool of the world: its verify counts the facts verified in the whole task."""
PATHS = ("engine", *ADAPTER_PATHS)
TRANSIENT = (TransientToolError, TimeoutError)


@dataclass(frozen=True)
class Ran:
    """What one trajectory came to on one path."""

    trajectory: Trajectory
    path: str
    outcome: Outcome
    bodies: int
    """Tool bodies that ran (counted in the world)."""


def run(
    trajectory: Trajectory,
    path: str = "engine",
    *,
    policy: Policy | None = None,
    store: Store | None = None,
    task_id: str | None = None,
    family: str | None = None,
) -> Ran:
    """Run ``trajectory`` on ``path`` under ``policy`` (default: ``Policy()``), in ``store`` (default: memory), as a
    task of ``family`` (default: the one its id gives)."""
    world = World(trajectory.world)
    task = task_id or f"{path}/{trajectory.id}"
    guard = Guard(budget=BUDGET, store=store, task_id=task, policy=policy, clock=world.now, family=family)
    if path == "engine":
        outcome = _engine(guard, world, trajectory, prefix=f"{task}/")
    else:
        outcome = _adapter(path, guard, world, trajectory, prefix=f"{task}/")
    return Ran(trajectory, path, outcome, len(world.ran))


def unguarded(trajectory: Trajectory) -> tuple[int, int]:
    """Without a guard: the tool bodies the whole script runs, and those it runs before its loop begins (each call
    once, plus its tool's retries of a transient failure)."""
    world = World(trajectory.world)
    before = 0
    for index, turn in enumerate(trajectory.turns):
        if index == trajectory.loop_start:
            before = len(world.ran)
        for name, args in turn:
            for _ in range(trajectory.tool(name).retries + 1):
                try:
                    world.call(name, dict(args))
                except TRANSIENT:
                    continue
                break
    return len(world.ran), (before if trajectory.loop_start is not None else len(world.ran))


def fits(trajectory: Trajectory, path: str) -> bool:
    """Whether the path's harness can run the trajectory to its end: LangChain's takes runs of at most 90 turns
    (LangGraph's recursion limit of 200 steps); a poll that never settles is cut by time within 75 polls when its
    polls are at least 8 s apart."""
    if path != "langchain":
        return True
    return len(trajectory.turns) <= 90 or (
        trajectory.shape == "poll-never-settles" and trajectory.world.poll_seconds >= 8
    )


def sample(corpus: list[Trajectory], per_shape: int | None, path: str) -> list[Trajectory]:
    """``per_shape`` trajectories of each shape that fit the path (all of them with ``None``), the quickest first:
    the shortest scripts, and of the polls that never settle the most spaced (cut by time after the fewest polls)."""
    shapes: dict[str, list[Trajectory]] = {}
    for trajectory in corpus:
        if fits(trajectory, path):
            shapes.setdefault(trajectory.shape, []).append(trajectory)
    chosen = []
    for group in shapes.values():
        if per_shape is not None:
            group = sorted(
                group, key=lambda t: -t.world.poll_seconds if t.shape == "poll-never-settles" else len(t.turns)
            )
        chosen.extend(group[:per_shape])
    return chosen


# --- the engine -----------------------------------------------------------------------------------------------------


def _call(trajectory: Trajectory, name: str, args: Mapping[str, Any], prefix: str) -> Call:
    tool = trajectory.tool(name)
    op = f"{prefix}confirm-order-{args['order']}" if tool.kind == "write" else None
    return Call(name, dict(args), tool.kind, op, volatile=tool.volatile, progress_key=FACTS)  # type: ignore[arg-type]


def _engine(guard: Guard, world: World, trajectory: Trajectory, *, prefix: str) -> Outcome:
    """The trajectory through the engine, as the guarded run drives it."""
    for turn in trajectory.turns:
        refused = guard.begin_turn()
        if refused is not None:
            return guard.end(refused)
        if not turn:
            detail = "the model answered; nothing verified the task done"
            return guard.end(Verdict(Status.PARTIAL, Reason.UNVERIFIED_FINAL, detail))
        for name, args in turn:
            verdict = _execute(guard, world, trajectory.tool(name), _call(trajectory, name, args, prefix))
            if verdict is not None:
                return guard.end(verdict)
    raise AssertionError("a trajectory ends with the model's final answer")


def _execute(guard: Guard, world: World, tool: ToolDef, call: Call) -> Verdict | None:
    """authorize -> execute -> verify -> settle, with the tool's retries of a transient failure without effect."""
    ticket = guard.authorize(call)
    for attempt in range(tool.retries + 1):
        if isinstance(ticket, Verdict):
            return ticket
        failure: BaseException | None = None
        if ticket.replay:
            output = ticket.result["output"]
        else:
            try:
                output = world.call(call.tool, dict(call.args))
            except TRANSIENT as exc:
                failure = exc
        if failure is None:
            result: dict[str, Any] = {"status": "ok", "output": output}
            evidence: Any = world.verify(call.tool, dict(call.args), output) if tool.verified else UNVERIFIED
        else:
            result = {"status": "retryable", "error": str(failure)}
            evidence = (
                world.verify(call.tool, dict(call.args), FailedAttempt(failure))
                if tool.kind == "write"
                else {"revision": guard.progress_revision(call, ticket), "done": False, "effect": "none"}
            )
        verdict = guard.settle(ticket, result, evidence=evidence)
        if verdict is not None or failure is None:
            return verdict
        if attempt < tool.retries:
            ticket = guard.authorize(call, retry_of=ticket)
    return None


# --- the adapters ---------------------------------------------------------------------------------------------------

_WORLDS: list[World] = []


def _world() -> World:
    return _WORLDS[-1]


def search(query: str, requested_at: str = "") -> list[str]:
    """Search the documents."""
    return _world().call("search", {"query": query, "requested_at": requested_at})  # type: ignore[no-any-return]


def fetch(record_id: str) -> dict[str, Any]:
    """Fetch one record by its id."""
    return _world().call("fetch", {"record_id": record_id})  # type: ignore[no-any-return]


def read_order(order: int) -> dict[str, Any]:
    """Read an order's state."""
    return _world().call("read_order", {"order": order})  # type: ignore[no-any-return]


def lookup(topic: str) -> str:
    """Look up internal notes on a topic."""
    return _world().call("lookup", {"topic": topic})  # type: ignore[no-any-return]


def next_batch(queue: str) -> dict[str, Any]:
    """Take the next batch of a work queue."""
    return _world().call("next_batch", {"queue": queue})  # type: ignore[no-any-return]


def confirm_order(order: int) -> str:
    """Confirm an order."""
    return _world().call("confirm_order", {"order": order})  # type: ignore[no-any-return]


def job_status(job: str) -> dict[str, Any]:
    """Ask how an export job is doing."""
    return _world().call("job_status", {"job": job})  # type: ignore[no-any-return]


def list_items(cursor: str = "", page_size: int = 20) -> dict[str, Any]:
    """List items, one page at a time."""
    return _world().call("list_items", {"cursor": cursor, "page_size": page_size})  # type: ignore[no-any-return]


BODIES: dict[str, Callable[..., Any]] = {
    fn.__name__: fn for fn in (search, fetch, read_order, lookup, next_batch, confirm_order, job_status, list_items)
}


def _tools(trajectory: Trajectory, prefix: str) -> list[Any]:
    from tests.support.adapters import Tool

    def verify_of(name: str) -> Callable[[Mapping[str, Any], Any], Any]:
        return lambda args, output: _world().verify(name, dict(args), output)

    return [
        Tool(
            BODIES[t.name],
            kind=t.kind,
            operation_id=(lambda a: f"{prefix}confirm-order-{a['order']}") if t.kind == "write" else None,
            verify=verify_of(t.name) if t.verified else None,
            retry=RetryPolicy(max_retries=t.retries, initial_delay=0.0, jitter=0.0),
            volatile_args=t.volatile,
            progress_key=FACTS,
        )
        for t in trajectory.tools
    ]


def _adapter(path: str, guard: Guard, world: World, trajectory: Trajectory, *, prefix: str) -> Outcome:
    from tests.support.adapters import Calls, Say, run_scenario

    steps = [Calls(*turn) if turn else Say("That is all I can do.") for turn in trajectory.turns]
    _WORLDS.append(world)
    try:
        extra: dict[str, Any] = {"max_turns": 10 * len(steps)} if path.startswith("sdk") else {}
        return run_scenario(path, steps, _tools(trajectory, prefix), guard=guard, **extra).outcome
    finally:
        _WORLDS.pop()
