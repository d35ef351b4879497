"""A worker process for tests/test_store_processes.py: real Guards on a shared SQLStore, one OS process each.

Run as ``python -m tests.workers.store_worker MODE CONFIG_JSON``. Every tool execution appends one line to the
worker's own log file (flushed before the result is settled), so the test counts executions by reading the logs,
not by trusting the store. Workers that race wait on a start file so they begin together.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from agents_loopguard import Budget, Guard, Verdict, create_runner
from agents_loopguard.store import SQLStore
from agents_loopguard.values.calls import Ticket

BIG = Budget(model_turns=10**6, tool_executions=10**6)


def committed(call: Any, result: Any) -> dict[str, Any]:
    return {"revision": 0, "done": False, "effect": "committed"}


def read_only(call: Any, result: Any) -> dict[str, Any]:
    return {"revision": 0, "done": False, "effect": "none"}


def start_together(cfg: dict[str, Any]) -> None:
    """Say ready, then wait for the test's go."""
    Path(cfg["ready"]).write_text(str(os.getpid()))
    deadline = time.monotonic() + 60
    while not Path(cfg["go"]).exists():
        if time.monotonic() > deadline:
            raise SystemExit("no go signal within 60 s")
        time.sleep(0.002)


def first_units_taken(cfg: dict[str, Any], i: int) -> None:
    """A sharing barrier without timing: after its first unit (``i == 1``: one grant taken) a worker says so, then
    takes no further unit until every worker of the race has taken its first one. So each of them took at least one
    unit of the shared budget whatever the scheduler does; after that they race freely."""
    if "took" not in cfg or i != 1:
        return
    took = Path(cfg["took"])
    (took / str(cfg["worker"])).write_text(str(os.getpid()))
    deadline = time.monotonic() + 60
    while len(list(took.iterdir())) < cfg["workers"]:
        if time.monotonic() > deadline:
            raise SystemExit("the other workers took no first unit within 60 s")
        time.sleep(0.002)


def log_line(log: Any, text: str) -> None:
    log.write(text + "\n")
    log.flush()


def race(cfg: dict[str, Any]) -> dict[str, Any]:
    """Every worker walks the same operation ids in the same order; each id must execute exactly once."""
    store = SQLStore(cfg["url"])
    worker = cfg["worker"]
    guard = Guard(budget=BIG, store=store, task_id=f"race-w{worker}")
    outcomes: dict[str, str] = {}
    replayed: dict[str, str] = {}
    start_together(cfg)
    with open(cfg["log"], "a") as log:
        for i in range(cfg["operations"]):
            op = f"op-{i}"
            # the odd worker out proposes another payload for every tenth id: the same id, another action
            order = {"order": i, "amount": 7 if worker == cfg["workers"] - 1 and i % 10 == 0 else 5}
            ticket = guard.authorize({"tool": "confirm", "kind": "write", "operation_id": op, "args": order})
            if isinstance(ticket, Verdict):
                outcomes[op] = str(ticket.reason)
                continue
            if ticket.replay:
                outcomes[op] = "replayed"
                replayed[op] = ticket.result["receipt"]
                guard.settle(ticket, ticket.result, committed)
                continue
            receipt = f"{op}/w{worker}"
            log_line(log, f"{op} {receipt}")  # the execution itself
            outcomes[op] = "executed"
            guard.settle(ticket, {"status": "ok", "receipt": receipt}, committed)
    store.close()
    return {"outcomes": outcomes, "replayed": replayed}


def budget(cfg: dict[str, Any]) -> dict[str, Any]:
    """Workers share one task whose budget allows ``limit`` executions; each runs reads until refused."""
    store = SQLStore(cfg["url"])
    guard = Guard(budget=Budget(model_turns=0, tool_executions=cfg["limit"]), store=store, task_id=cfg["task"])
    start_together(cfg)
    reason = None
    with open(cfg["log"], "a") as log:
        for i in range(10**6):
            first_units_taken(cfg, i)
            ticket = guard.authorize({"tool": "search", "kind": "read", "args": {"q": f"w{cfg['worker']}-{i}"}})
            if isinstance(ticket, Verdict):
                reason = str(ticket.reason)
                break
            log_line(log, str(ticket.used.tools))
            guard.settle(ticket, {"status": "ok"}, read_only)
    store.close()
    return {"reason": reason}


def tool_limit(cfg: dict[str, Any]) -> dict[str, Any]:
    """Workers share one task; each alternates executions of two tools, one of them limited per task (``limit``),
    reads and writes alike, until the limited tool is refused; then runs the other tool once more."""
    store = SQLStore(cfg["url"])
    task, limit, worker = cfg["task"], ("send_email", cfg["limit"]), cfg["worker"]
    start_together(cfg)
    reason = None
    with open(cfg["log"], "a") as log:
        for i in range(10**6):
            first_units_taken(cfg, i)
            if i % 2:
                reservation = store.reserve_write(
                    task, f"mail-{worker}-{i}", f"fp-{worker}-{i}", "send_email", max_repeats=2, tool_limit=limit
                )
                grant = reservation.grant
                assert grant is not None
            else:
                grant = store.reserve_execution(task, f"fp-{worker}-{i}", max_repeats=2, tool_limit=limit)
            if not grant.granted:
                reason = str(grant.reason)
                break
            log_line(log, f"send_email {grant.used.tools}")
        other = store.reserve_execution(task, f"search-{worker}", max_repeats=2, tool_limit=("search", 100))
        if other.granted:
            log_line(log, f"search {other.used.tools}")
    store.close()
    return {"reason": reason}


def stop_loop(cfg: dict[str, Any]) -> dict[str, Any]:
    """Reserve model turns and tool executions in a loop until the task's stop mark refuses one."""
    store = SQLStore(cfg["url"])
    guard = Guard(budget=BIG, store=store, task_id=cfg["task"])
    start_together(cfg)
    refusal: dict[str, Any] = {}
    grants: Counter[str] = Counter()
    with open(cfg["log"], "a") as log:
        for i in range(10**6):
            refused = guard.begin_turn()
            if refused is not None:
                refusal = {"at": "turn", "reason": str(refused.reason)}
                break
            log_line(log, f"turn {guard.used.models}")  # the count this grant took
            grants["turn"] += 1
            ticket = guard.authorize({"tool": "search", "kind": "read", "args": {"q": f"w{cfg['worker']}-{i}"}})
            if isinstance(ticket, Verdict):
                refusal = {"at": "tool", "reason": str(ticket.reason)}
                break
            log_line(log, f"tool {ticket.used.tools}")
            grants["tool"] += 1
            guard.settle(ticket, {"status": "ok"}, read_only)
    store.close()
    return {"refusal": refusal, "grants": dict(grants)}


def stopper(cfg: dict[str, Any]) -> dict[str, Any]:
    """Wait until the workers are busy, then set the stop mark and report the counters at its commit."""
    store = SQLStore(cfg["url"])
    start_together(cfg)
    while True:
        task = store.task(cfg["task"])
        if task is not None and task.used.tools >= cfg["after"]:
            break
        time.sleep(0.002)
    snapshot = store.request_stop(cfg["task"], "operator: stop")  # the counters read in the same statement
    store.close()
    return {"models": snapshot.used.models, "tools": snapshot.used.tools, "stop_reason": snapshot.stop_reason}


def hang_write(cfg: dict[str, Any]) -> dict[str, Any]:
    """Reserve a write, say so from inside the execution, and hang there until killed."""
    store = SQLStore(cfg["url"])
    guard = Guard(budget=BIG, store=store, task_id=cfg["task"])
    ticket = guard.authorize(cfg["call"])
    if not isinstance(ticket, Ticket) or ticket.replay:
        return {"unexpected": repr(ticket)}
    with open(cfg["log"], "a") as log:
        log_line(log, "executing")  # inside execute, before the receiver answers
        Path(cfg["ready"]).write_text(str(os.getpid()))
        time.sleep(300)
    return {"unexpected": "not killed"}


def retry_write(cfg: dict[str, Any]) -> dict[str, Any]:
    """The next workers: the same write, on the killed worker's task and on a fresh task."""
    store = SQLStore(cfg["url"])
    answers = {}
    with open(cfg["log"], "a") as log:

        def execute(call: Any) -> Any:
            log_line(log, "executing")
            return {"status": "ok", "receipt": "second"}

        for task in (cfg["task"], cfg["task"] + "-other"):
            run = create_runner(budget=BIG, store=store, execute=execute, verify=committed, task_id=task)
            outcome = run([cfg["call"]])
            answers[task] = {"status": str(outcome.status), "reason": str(outcome.reason), "op": outcome.operation_id}
    store.close()
    return {"answers": answers}


def finish(cfg: dict[str, Any]) -> dict[str, Any]:
    """Workers of one task end it at the same moment, each with its own verdict; each reports what ``end`` returned."""
    from agents_loopguard import Reason, Status

    store = SQLStore(cfg["url"])
    guard = Guard(budget=Budget(model_turns=5, tool_executions=5), store=store, task_id=cfg["task"])
    verdict = Verdict(Status(cfg["status"]), Reason(cfg["reason"]), f"worker {cfg['worker']}")
    start_together(cfg)
    outcome = guard.end(verdict)
    again = guard.begin_turn()  # the guard is sticky with what the store kept, not with its own verdict
    store.close()
    return {
        "outcome": [str(outcome.status), str(outcome.reason), outcome.detail],
        "next_turn": None if again is None else [str(again.reason), again.detail],
    }


def read_then_step(cfg: dict[str, Any]) -> dict[str, Any]:
    """A turn whose verified read moves the revision to 5; say so and wait for the test's go (or hang until killed:
    ``hang``), then take the next step, a model turn, and say so."""
    store = SQLStore(cfg["url"])
    guard = Guard(budget=BIG, store=store, task_id=cfg["task"])
    assert guard.begin_turn() is None
    ticket = guard.authorize({"tool": "search", "kind": "read", "args": {"q": 1}})
    assert isinstance(ticket, Ticket)
    verdict = guard.settle(ticket, {"status": "ok"}, lambda c, r: {"revision": 5, "done": False, "effect": "none"})
    assert verdict is None and guard.revision == 5
    if cfg.get("hang"):
        Path(cfg["ready"]).write_text(str(os.getpid()))
        time.sleep(300)
    start_together(cfg)
    assert guard.begin_turn() is None
    with open(cfg["log"], "a") as log:
        log_line(log, "stepped")
    while not Path(cfg["done"]).exists():
        time.sleep(0.002)
    store.close()
    return {"revision": guard.revision}


MODES = {
    f.__name__: f
    for f in (race, budget, tool_limit, stop_loop, stopper, hang_write, retry_write, finish, read_then_step)
}


def main() -> None:
    mode, raw = sys.argv[1], sys.argv[2]
    cfg = json.loads(raw)
    result = MODES[mode](cfg)
    if "result" in cfg:
        Path(cfg["result"]).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
