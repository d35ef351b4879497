"""R22 retention: a prune removes finished history and never an ``unknown`` operation, a running or paused task, or
a committed operation inside its idempotency window; it keeps the metrics' tallies right; and a worker keeps
running guarded turns while it runs (real processes, SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents_loopguard import Budget, MemoryStore, OperationState, Store
from agents_loopguard.ops.retention import DAY, RetentionPolicy, prune
from agents_loopguard.store.base import TraceEntry
from agents_loopguard.store.sql import SQLStore
from agents_loopguard.values.errors import InputError
from tests.support import forked
from tests.support.bulk import fill, shape
from tests.support.cli import in_process

ROOT = Path(__file__).resolve().parents[1]
NOW = 1_800_000_000.0
KINDS = ("running", "ended", "pending", "decided", "resumed", "unknown", "committed")


@dataclass(frozen=True)
class Spec:
    kind: str
    days_ago: float
    op_days_ago: float


specs = st.lists(
    st.builds(
        Spec,
        st.sampled_from(KINDS),
        st.floats(0, 120, allow_nan=False),
        st.floats(0, 120, allow_nan=False),
    ),
    max_size=12,
)
policies = st.tuples(st.floats(0, 60, allow_nan=False), st.floats(0, 60, allow_nan=False))


def build(store: Store, n: int, spec: Spec) -> str:
    """Task ``t-n`` in the state ``spec`` says, last updated ``days_ago`` (its write, if any, ``op_days_ago``)."""
    task_id, at, op_at = f"t-{n}", NOW - spec.days_ago * DAY, NOW - spec.op_days_ago * DAY
    store.ensure_task(task_id, Budget(5, 5), now=min(at, op_at))
    store.reserve_turn(task_id, now=min(at, op_at))
    done = {"task_id": task_id, "status": "completed", "reason": "validated_done"}
    if spec.kind in ("unknown", "committed"):
        store.reserve_write(task_id, f"op-{n}", f"fp-{n}", "pay", max_repeats=2, now=op_at)
        if spec.kind == "committed":
            entry = TraceEntry(kind="tool", tool="pay", result_class="ok", at=op_at)
            store.record_execution(task_id, entry, revision=1, operation=(f"op-{n}", OperationState.COMMITTED, {}))
        else:
            done = {"task_id": task_id, "status": "needs_reconciliation", "reason": "executor_exception"}
    if spec.kind in ("pending", "decided", "resumed"):
        paused = {"task_id": task_id, "status": "needs_human", "reason": "approval"}
        calls = [{"call_id": "c1", "tool": "pay", "arguments": "{}", "operation_id": f"w-{n}"}]
        store.save_pause(task_id, f"p-{n}", "{}", calls, digest="d", outcome=paused, now=at)
        if spec.kind == "decided":
            store.decide_pause(f"p-{n}", who="ana", decisions={"c1": "approve"}, now=at)
        if spec.kind == "resumed":
            store.claim_pause(f"p-{n}", who="ana", decisions={"c1": "reject"}, now=at)
            store.finish(task_id, done, now=at)
    elif spec.kind != "running":
        store.finish(task_id, done, now=at)
    return task_id


def tally_of(store: Store) -> Counter[tuple[str, str, str]]:
    """The tallies' task counts, as the metrics read them."""
    return Counter({(g.family, g.status, g.reason): g.tasks for g in store.tallies().tasks})


def recounted(store: Store) -> Counter[tuple[str, str, str]]:
    """The same counts, read from every task (what the tallies must agree with)."""
    return Counter(
        (t.family, t.status, "" if t.status == "running" else str((t.outcome or {}).get("reason") or ""))
        for t in store.tasks()
    )


def check_prune(store: Store, tasks: list[Spec], policy: tuple[float, float]) -> None:
    age, extra = policy
    rule = RetentionPolicy(older_than_days=age, idempotency_days=age + extra)
    ids = [build(store, n, spec) for n, spec in enumerate(tasks)]
    before = {t.task_id: t for t in store.tasks()}
    ops_before = {o.operation_id: o for o in store.operations()}
    would = prune(store, rule, now=NOW, dry_run=True)["removed"]
    assert {t.task_id for t in store.tasks()} == set(before), "a dry run removes nothing"
    done = prune(store, rule, now=NOW, batch=2, pause=0)
    assert done["removed"] == would, "the dry run counted what the prune removed"
    kept = {t.task_id for t in store.tasks()}
    ops_after = {o.operation_id: o for o in store.operations()}
    finished_before, settled_before = NOW - age * DAY, NOW - rule.window_days * DAY
    for task_id, spec in zip(ids, tasks, strict=True):
        task = before[task_id]
        never = task.status == "running" or spec.kind in ("pending", "decided", "unknown")
        if never or task.updated_at >= finished_before:
            assert task_id in kept, (spec, "a running or paused task, or one with an unknown write, stays")
        else:
            assert task_id not in kept, (spec, "an ended task older than the prune age goes")
    for op_id, op in ops_before.items():
        if op.state is OperationState.UNKNOWN or op.updated_at >= settled_before or op.task_id in kept:
            assert op_id in ops_after, (op, "an unknown operation, or one inside its window, stays")
        else:
            assert op_id not in ops_after
    assert tally_of(store) == recounted(store), "the tallies follow the prune"
    for task_id in kept:
        assert store.trace(task_id), "a kept task keeps its trace"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tasks=specs, policy=policies)
def test_r22_prune_never_removes_what_must_stay_memory(tasks: list[Spec], policy: tuple[float, float]) -> None:
    check_prune(MemoryStore(), tasks, policy)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tasks=specs, policy=policies)
def test_r22_prune_never_removes_what_must_stay_sqlite(tasks: list[Spec], policy: tuple[float, float]) -> None:
    with tempfile.TemporaryDirectory() as folder, SQLStore(f"sqlite:///{folder}/lg.db") as store:
        check_prune(store, tasks, policy)


@pytest.mark.postgres
def test_r22_prune_never_removes_what_must_stay_postgres(pg_schema_url: str) -> None:
    """Every kind of task, at ages on both sides of the cutoffs, on PostgreSQL (one fixed scenario)."""
    tasks = [Spec(kind, days, op_days) for kind in KINDS for days in (1, 50, 110) for op_days in (1, 110)]
    with SQLStore(pg_schema_url) as store:
        check_prune(store, tasks, (30, 30))


def test_the_idempotency_window_is_never_shorter_than_the_prune_age() -> None:
    assert RetentionPolicy(older_than_days=10).window_days == 30
    with pytest.raises(InputError, match="may not be shorter than the prune age"):
        RetentionPolicy(older_than_days=10, idempotency_days=5)
    with pytest.raises(InputError):
        RetentionPolicy(older_than_days=-1)


def test_a_write_whose_record_was_pruned_is_a_new_write_and_a_pruned_task_id_a_new_task(store: Store) -> None:
    """What the docs say of forgetting: within the window a committed write answers from the ledger; once pruned,
    the same operation id is reserved again (a new write), and the task id starts a new task."""
    build(store, 1, Spec("committed", 100, 100))
    claim = store.reserve_operation("t-x", "op-1", "fp-1", "pay", now=NOW)
    assert not claim.claimed and claim.record.state is OperationState.COMMITTED, "inside the window: answered"
    prune(store, RetentionPolicy(older_than_days=30, idempotency_days=90), now=NOW)
    assert store.lookup_operation("op-1") is None and store.task("t-1") is None
    claim = store.reserve_operation("t-x", "op-1", "fp-1", "pay", now=NOW)
    assert claim.claimed and claim.record.state is OperationState.UNKNOWN, "forgotten: a new write"
    assert store.ensure_task("t-1", Budget(5, 5), now=NOW).created, "a new task"


# --- a worker keeps running while a prune runs (real processes) --------------------------------------------------


def _prune_beside_a_worker(url: str, tmp_path: Path) -> None:
    fill(url, 3_000, calls=4, start=NOW - 200 * DAY, days=100)
    log, go = tmp_path / "turns.log", tmp_path / "go"
    log.touch()
    turns = 300
    worker = forked.ForkedPopen(
        [sys.executable, "-m", "tests.workers.turns_worker", url, "live-1", str(turns), str(log), str(go)],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[int] = []  # the worker's steps at each batch: the two ran side by side
    with SQLStore(url) as store:
        go.touch()
        while not log.read_text() and worker.poll() is None:
            time.sleep(0.005)
        policy = RetentionPolicy(older_than_days=30)
        done = prune(store, policy, batch=50, pause=0.01, on_batch=lambda _: seen.append(len(log.read_text().split())))
        _, err = worker.communicate(timeout=240)
        assert worker.returncode == 0, err
        assert log.read_text().split() == [str(n) for n in range(1, turns + 1)], "every step ran, once"
        live = store.task("live-1")
        assert live is not None and live.used.tools == turns and live.status == "completed"
        assert done["removed"]["tasks"] == 3_000 - 60 - 60 and done["batches"] >= 57
        assert any(0 < n < turns for n in seen), ("the prune ran while the worker's turns ran", seen)
        left = {t.status for t in store.tasks() if t.task_id != "live-1"}
        assert left == {"running", "needs_reconciliation"}, "running tasks and unknown writes stay"
        assert tally_of(store) == recounted(store)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_r22_a_worker_keeps_running_guarded_turns_while_a_prune_runs_sqlite(tmp_path: Path) -> None:
    _prune_beside_a_worker(f"sqlite:///{tmp_path / 'lg.db'}", tmp_path)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(600)
def test_r22_a_worker_keeps_running_guarded_turns_while_a_prune_runs_postgres(
    pg_schema_url: str, tmp_path: Path
) -> None:
    _prune_beside_a_worker(pg_schema_url, tmp_path)


def test_prune_on_the_command_line_dry_run_then_for_real(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lg.db'}"
    fill(url, 200, calls=2, start=time.time() - 100 * DAY, days=50)
    command = ["--db", url]  # the command run in this process (tests/support/cli.py)
    ended = sum(shape(i).status not in ("running", "needs_reconciliation") for i in range(200))
    dry = in_process([*command, "prune", "--older-than", "30", "--dry-run"])
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith(f"would remove {ended} tasks, {2 * ended} trace"), dry.stdout
    real = in_process([*command, "--json", "prune", "--older-than", "30"])
    assert real.returncode == 0, real.stderr
    assert json.loads(real.stdout)["removed"]["tasks"] == ended
    again = in_process([*command, "prune", "--older-than", "30", "--dry-run"])
    assert again.stdout.startswith("would remove nothing"), again.stdout
    bad = in_process([*command, "prune", "--older-than", "30", "--idempotency-window", "1"])
    assert bad.returncode == 2 and "may not be shorter" in bad.stderr
