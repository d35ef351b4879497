"""R21, measured: the labelled corpus of ``benchmarks/efficacy`` (580 trajectories, 15 shapes) through the guard with
``Policy()``'s defaults, its figures asserted: false-stop rate at most 1%, recall at least 99%, a stubborn identical
call run at most twice. The whole corpus goes through the engine; a sample of every shape through the Agents SDK,
the raw function-calling loop over HTTP, LangChain and Google ADK, each of whose runs must come to what the engine
came to (the same end, the same tool bodies run).

The corpus is generated at test time from a fixed seed (``benchmarks/efficacy/corpus.py``): the generator is the
source, reviewed like code; a stored copy would be 19,000 calls of data to keep in step with it. ``python
benchmarks/efficacy/run.py --dump corpus.jsonl`` writes it out for reading, and ``--paths all`` runs every
trajectory on every path (the figures of docs/efficacy.md)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import pytest

from agents_loopguard import Policy
from benchmarks.efficacy.corpus import build
from benchmarks.efficacy.paths import Ran, run, sample
from benchmarks.efficacy.policies import LEGACY
from benchmarks.efficacy.score import Judged, figures, judge

pytestmark = pytest.mark.timeout(240)

CORPUS = build()


def scored(runs: Iterable[Ran]) -> list[Judged]:
    return [judge(ran) for ran in runs]


@pytest.fixture(scope="module")
def engine() -> list[Judged]:
    return scored(run(t, "engine") for t in CORPUS)


def test_r21_the_corpus_is_labelled_and_covers_every_shape() -> None:
    """R21: at least 500 trajectories, each labelled loop or legit with its shape; every legitimate and every loop
    shape of the issue is there."""
    shapes = Counter((t.label, t.shape) for t in CORPUS)
    assert len(CORPUS) >= 500 and len({t.id for t in CORPUS}) == len(CORPUS)
    legit = {shape for label, shape in shapes if label == "legit"}
    loops = {shape for label, shape in shapes if label == "loop"}
    assert legit == {
        "long-poll", "pagination", "transient-retry", "reread-after-write", "fan-out", "multi-tool",
        "repeat-with-progress",
    }  # fmt: skip
    assert loops == {
        "identical", "cycle", "near-duplicate", "error-storm", "pagination-cycle", "poll-never-settles",
        "lost-answer", "asks-after-done",
    }  # fmt: skip
    assert all(t.loop_start is not None for t in CORPUS if t.label == "loop")


def test_r21_with_the_defaults_every_loop_is_cut_and_no_legitimate_work_is_stopped(engine: list[Judged]) -> None:
    """R21: the whole corpus through the engine with ``Policy()``: false-stop rate <= 1%, recall >= 99%, precision
    >= 99%; a stubborn identical call runs at most twice (one execution wasted after the first)."""
    got = figures(engine)
    assert got.false_stop_rate <= 0.01, [j.ran.trajectory.id for j in engine if j.label == "legit" and j.stopped]
    assert got.recall >= 0.99, [j.ran.trajectory.id for j in engine if j.label == "loop" and not j.stopped]
    assert got.precision >= 0.99
    identical = [j for j in engine if j.ran.trajectory.shape == "identical"]
    assert max(j.wasted for j in identical) <= 1 and all(j.reason == "stopped/same_call" for j in identical)


def test_r21_the_defaults_before_this_work_fail_on_the_corpus_as_the_outside_benchmark_found() -> None:
    """R21: the corpus has teeth: the former defaults (the prototype's rules, 10 polls, 16 unverified reads) stop
    legitimate work (long polls, transient retries, unverified fan-outs) more than one time in five."""
    before = scored(run(t, "engine", policy=LEGACY) for t in CORPUS)
    got = figures(before)
    assert got.false_stop_rate >= 0.2 and got.recall >= 0.99
    stopped = Counter(j.ran.trajectory.shape for j in before if j.label == "legit" and j.stopped)
    assert {"long-poll", "transient-retry", "fan-out"} <= set(stopped), stopped
    assert Policy() != LEGACY


@pytest.mark.parametrize(
    ("path", "per_shape"),
    [("sdk", 2), ("chat", 1), ("langchain", 1), ("adk", 1)],
    ids=["sdk", "chat", "langchain", "adk"],
)
def test_r21_every_adapter_comes_to_what_the_engine_came_to_on_a_sample_of_every_shape(
    path: str, per_shape: int, engine: list[Judged]
) -> None:
    """R21: a sample of every shape through the Agents SDK (``ScriptedModel``), the raw loop (the real ``openai``
    client over HTTP), LangChain and Google ADK: each run ends as the engine's run of the same trajectory (status,
    reason) with the same tool bodies run, and the sample's figures meet the same thresholds."""
    by_id = {j.ran.trajectory.id: j for j in engine}
    runs = scored(run(t, path) for t in sample(CORPUS, per_shape, path))
    differ = {
        j.ran.trajectory.id: (
            j.reason,
            j.ran.bodies,
            by_id[j.ran.trajectory.id].reason,
            by_id[j.ran.trajectory.id].ran.bodies,
        )
        for j in runs
        if (j.reason, j.ran.bodies) != (by_id[j.ran.trajectory.id].reason, by_id[j.ran.trajectory.id].ran.bodies)
    }
    assert differ == {}
    got = figures(runs)
    assert len({j.ran.trajectory.shape for j in runs}) == 15
    assert (got.false_stops, got.cut) == (0, got.loops)
