"""The labelled corpus: trajectories of legitimate work and of loops, each with its shape, generated from a seed.

A trajectory is what a scripted model proposes, turn by turn (one or more tool calls, or the final answer), the tools
it may call (verified or not, with their retries and their volatile arguments) and how the receivers behave
(:class:`~benchmarks.efficacy.world.WorldSpec`). Loops also say where the loop begins (``loop_start``: the first turn
a model that saw the results would not have asked for); after it the script goes on until the model gives up, as
models do. Nothing is stored: :func:`build` generates the same corpus from the same seed, on every machine.

Legitimate shapes: long polls within their wait policy, pagination over large sets, transient failures retried with
backoff (by the adapter or by the model), re-reads after a write, fan-out over many ids, multi-tool workflows,
repeats that make progress. Loops: identical repeats, cycles (A-B-A-B and longer), near-duplicates (a changing
timestamp, a changing page size, reworded queries), error storms, pagination cycles, polls that never settle, writes
sent again after a lost answer, a model that keeps asking after the task is done.

>>> corpus = build()
>>> len(corpus) >= 500, {t.label for t in corpus} == {"loop", "legit"}
(True, True)
>>> build()[7] == corpus[7]  # the same seed gives the same corpus
True
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .world import KINDS, WorldSpec

__all__ = ["SEED", "Label", "ToolDef", "Trajectory", "build", "counts"]

SEED = 29
Label = Literal["loop", "legit"]
Call = tuple[str, dict[str, Any]]
Turn = tuple[Call, ...]
"""One model turn: its tool calls; the empty turn is the model's final answer."""


@dataclass(frozen=True)
class ToolDef:
    """A tool as a trajectory declares it to the guard."""

    name: str
    verified: bool = True
    retries: int = 0
    """Retries the adapter makes of a transient failure (``RetryPolicy.max_retries``)."""
    volatile: tuple[str, ...] = ()
    """Arguments declared as not part of the action (left out of the call's identity)."""

    @property
    def kind(self) -> str:
        return KINDS[self.name]


@dataclass(frozen=True)
class Trajectory:
    """One labelled trajectory."""

    id: str
    label: Label
    shape: str
    variant: str
    tools: tuple[ToolDef, ...]
    turns: tuple[Turn, ...]
    """The model's turns; the last one is its final answer (an empty turn)."""
    world: WorldSpec
    loop_start: int | None = None
    """For a loop: the index of the first turn of the loop (``None`` for legitimate work)."""

    def tool(self, name: str) -> ToolDef:
        return next(t for t in self.tools if t.name == name)

    @property
    def calls(self) -> int:
        return sum(len(turn) for turn in self.turns)


# --- building blocks ----------------------------------------------------------------------------------------------


@dataclass
class Script:
    """A trajectory being written: turns, tools, the world, and where the loop begins."""

    rng: random.Random
    turns: list[Turn] = field(default_factory=list)
    tools: dict[str, ToolDef] = field(default_factory=dict)
    world: dict[str, Any] = field(default_factory=dict)
    loop_start: int | None = None

    def use(self, name: str, *, verified: bool = True, retries: int = 0, volatile: tuple[str, ...] = ()) -> None:
        self.tools.setdefault(name, ToolDef(name, verified, retries, volatile))

    def ask(self, *calls: Call) -> None:
        for name, _ in calls:
            self.use(name)
        self.turns.append(tuple(calls))

    def loop_here(self) -> None:
        self.loop_start = len(self.turns)

    def table(self, name: str) -> dict[Any, Any]:
        table: dict[Any, Any] = self.world.setdefault(name, {})
        return table

    def finish(self, uid: str, label: Label, shape: str, variant: str) -> Trajectory:
        turns = (*self.turns, ())
        return Trajectory(
            uid, label, shape, variant, tuple(self.tools.values()), turns, WorldSpec(**self.world), self.loop_start
        )


def search(query: str) -> Call:
    return ("search", {"query": query})


def fetch(record: str) -> Call:
    return ("fetch", {"record_id": record})


def read_order(order: int) -> Call:
    return ("read_order", {"order": order})


def confirm(order: int) -> Call:
    return ("confirm_order", {"order": order})


def poll(job: str) -> Call:
    return ("job_status", {"job": job})


def page(cursor: str, size: int = 20) -> Call:
    return ("list_items", {"cursor": cursor, "page_size": size})


def lookup(topic: str) -> Call:
    return ("lookup", {"topic": topic})


def batch(queue: str) -> Call:
    return ("next_batch", {"queue": queue})


def setup_reads(s: Script, tag: str) -> None:
    """0 to 2 ordinary reads that find something new: the work before a loop."""
    for n in range(s.rng.randint(0, 2)):
        s.ask(search(f"{tag} background {n}"))


def paginate(s: Script, tag: str, pages: int, per_page: tuple[int, int] = (5, 20)) -> str:
    """Pages ``pages`` of a listing into the world and the script; returns the last page's cursor."""
    table = s.table("pages")
    cursor, first = "", 0
    for n in range(pages):
        count = s.rng.randint(*per_page)
        nxt = f"{tag}-p{n + 1}" if n + 1 < pages else None
        table[cursor] = (tuple(f"{tag}-r{first + k}" for k in range(count)), nxt)
        first += count
        s.ask(page(cursor))
        if nxt is not None:
            cursor = nxt
    return cursor


# --- legitimate work -------------------------------------------------------------------------------------------------


def long_poll(s: Script, uid: str) -> str:
    """A job polled until done within its wait policy (at most 540 s of a 600 s wait)."""
    job = f"{uid}-job"
    pending = s.rng.randint(5, 60)
    s.world["poll_seconds"] = round(s.rng.uniform(0.5, min(12.0, 540.0 / (pending + 1))), 2)
    s.table("settle_after")[job] = pending
    if s.rng.random() < 0.4:
        s.ask(search(f"{uid} how to run the export"))
    for _ in range(pending + 1):
        s.ask(poll(job))
    if s.rng.random() < 0.5:
        s.world["goal"] = f"job:{job}"
        return "done-on-settle"
    s.ask(fetch(f"{job}-result"))
    s.world["goal"] = f"rec:{job}-result"
    return "fetch-result"


def pagination(s: Script, uid: str) -> str:
    verified = s.rng.random() < 0.8
    s.use("list_items", verified=verified)
    paginate(s, uid, s.rng.randint(3, 40))
    s.world["goal"] = "list:end" if verified else None
    return "verified" if verified else "unverified"


def transient_retry(s: Script, uid: str) -> str:
    """Records fetched through transient failures (429s, timeouts), retried with backoff by the adapter or by the
    model re-proposing the call."""
    by_adapter = s.rng.random() < 0.5
    s.use("fetch", retries=3 if by_adapter else 0)
    s.world["backoff_seconds"] = round(s.rng.uniform(0.5, 8.0), 2)
    failures = s.table("failures")
    ids = [f"{uid}-r{n}" for n in range(s.rng.randint(2, 8))]
    burst = by_adapter and s.rng.random() < 0.3
    if burst:  # a rate limit hits a parallel fan-out: each call fails once, each is retried
        width = s.rng.randint(2, 4)
        for record in ids[:width]:
            failures[f"fetch:{record}"] = 1
        s.ask(*(fetch(r) for r in ids[:width]))
        ids = ids[width:]
    for record in ids:
        fails = s.rng.choice([0, 0, 1, 1, 2, 3])
        if fails:
            failures[f"fetch:{record}"] = fails
        for _ in range(1 if by_adapter else fails + 1):
            s.ask(fetch(record))
    return ("adapter-burst" if burst else "adapter") if by_adapter else "model"


def reread_after_write(s: Script, uid: str) -> str:
    verified = s.rng.random() < 0.7
    s.use("read_order", verified=verified)
    orders = [1000 + n for n in range(s.rng.randint(1, 3))]
    twice = s.rng.random() < 0.3
    for order in orders:
        s.ask(read_order(order))
        s.ask(confirm(order))
        s.ask(read_order(order))
        if twice:
            s.ask(read_order(order))
    s.world["goal"] = f"order:{orders[-1]}:confirmed" if verified else None
    return ("verified" if verified else "unverified") + ("-read-twice" if twice else "")


def fan_out(s: Script, uid: str) -> str:
    verified = s.rng.random() < 0.7
    count = s.rng.randint(5, 60 if verified else 40)
    width = s.rng.choice([1, 5, 10])
    s.use("fetch", verified=verified)
    if s.rng.random() < 0.5:
        s.ask(search(f"{uid} which records"))
    ids = [f"{uid}-id{n}" for n in range(count)]
    for start in range(0, count, width):
        s.ask(*(fetch(r) for r in ids[start : start + width]))
    return f"{'verified' if verified else 'unverified'}-width-{width}"


def multi_tool(s: Script, uid: str) -> str:
    """Search, read what it found, consult notes (unverified), page a listing, confirm an order and read it back."""
    notes_verified = s.rng.random() < 0.3
    s.use("lookup", verified=notes_verified)
    order = 2000 + s.rng.randint(0, 99)
    blocks: list[Callable[[], None]] = [
        lambda: s.ask(search(f"{uid} customer history")),
        lambda: [s.ask(fetch(f"{uid}-doc{n}")) for n in range(s.rng.randint(1, 5))],
        lambda: [s.ask(lookup(f"{uid} topic {n}")) for n in range(s.rng.randint(1, 4))],
        lambda: paginate(s, f"{uid}-list", s.rng.randint(1, 3)),
        lambda: s.ask(fetch(f"{uid}-doc0"), lookup(f"{uid} policy")),
    ]
    s.rng.shuffle(blocks)
    for block in blocks[: s.rng.randint(3, 5)]:
        block()
    s.ask(read_order(order))
    s.ask(confirm(order))
    s.ask(read_order(order))
    s.world["goal"] = f"order:{order}:confirmed"
    return "notes-verified" if notes_verified else "notes-unverified"


def repeat_with_progress(s: Script, uid: str) -> str:
    """The same call again and again, each answer new: a queue drained batch by batch."""
    queue = f"{uid}-queue"
    batches = s.rng.randint(3, 30)
    s.table("batches")[queue] = batches
    interleaved = s.rng.random() < 0.4
    for n in range(batches + 1):
        s.ask(batch(queue))
        if interleaved and n < batches:
            s.ask(fetch(f"{queue}-item-{n}-0"))
    s.world["goal"] = f"queue:{queue}:empty"
    return "interleaved" if interleaved else "back-to-back"


# --- loops ---------------------------------------------------------------------------------------------------------


def loop_length(s: Script, low: int = 12, high: int = 40) -> int:
    return s.rng.randint(low, high)


def identical(s: Script, uid: str) -> str:
    verified = s.rng.random() < 0.6
    call = s.rng.choice([search(f"{uid} refund policy"), fetch(f"{uid}-r1"), read_order(3000), lookup(f"{uid} sla")])
    s.use(call[0], verified=verified)
    setup_reads(s, uid)
    s.ask(call)
    s.loop_here()
    for _ in range(loop_length(s)):
        s.ask(call)
    return f"{call[0]}-{'verified' if verified else 'unverified'}"


def cycle(s: Script, uid: str) -> str:
    period = s.rng.choice([2, 2, 3, 4])
    verified = s.rng.random() < 0.6
    pool = [search(f"{uid} q"), fetch(f"{uid}-r"), lookup(f"{uid} t"), read_order(3100), fetch(f"{uid}-s")]
    block = s.rng.sample(pool, period)
    for name, _ in block:
        s.use(name, verified=verified if name != "lookup" else False)
    setup_reads(s, uid)
    for call in block:
        s.ask(call)
    s.loop_here()
    for n in range(loop_length(s)):
        s.ask(block[n % period])
    return f"period-{period}-{'verified' if verified else 'unverified'}"


def near_duplicate(s: Script, uid: str) -> str:
    variant = s.rng.choice(["timestamp", "page-size", "reworded"])
    if variant == "timestamp":  # the model stamps each identical search with the time: a volatile argument
        verified = s.rng.random() < 0.6
        s.use("search", verified=verified, volatile=("requested_at",))
        setup_reads(s, uid)
        for n in range(loop_length(s) + 1):
            if n == 1:
                s.loop_here()
            s.ask(("search", {"query": f"{uid} open tickets", "requested_at": f"2026-11-04T10:{n:02d}:00Z"}))
        return f"timestamp-{'verified' if verified else 'unverified'}"
    if variant == "page-size":  # the last page asked again and again with another page size
        last = paginate(s, uid, s.rng.randint(2, 8), per_page=(3, 9))
        s.loop_here()
        for n in range(loop_length(s)):
            s.ask(page(last, size=s.rng.choice([10, 25, 50, 100]) + n))
        return "page-size"
    hits = tuple(f"{uid}-doc{n}" for n in range(3))  # reworded queries that find the same documents
    setup_reads(s, uid)
    for n in range(loop_length(s) + 1):
        query = f"{uid} refund policy, wording {n}"
        s.table("index")[query] = hits
        if n == 1:
            s.loop_here()
        s.ask(search(query))
    return "reworded-verified"


def error_storm(s: Script, uid: str) -> str:
    """A tool that keeps failing, called again and again (the same call, or other ids of a service that is down)."""
    variant = s.rng.choice(["same-call", "rotating-ids", "write-503"])
    retries = s.rng.choice([0, 3])
    failures = s.table("failures")
    setup_reads(s, uid)
    if variant == "write-503":
        s.use("confirm_order", retries=retries)
        failures[f"confirm_order:{4000}"] = -1
        calls = [confirm(4000)]
    else:
        s.use("fetch", retries=retries)
        ids = [f"{uid}-r0"] if variant == "same-call" else [f"{uid}-r{n}" for n in range(6)]
        failures.update({f"fetch:{r}": -1 for r in ids})
        calls = [fetch(r) for r in ids]
    s.ask(calls[0])
    s.loop_here()
    for n in range(1, loop_length(s, 10, 30)):
        s.ask(calls[n % len(calls)])
    return f"{variant}-retries-{retries}"


def pagination_cycle(s: Script, uid: str) -> str:
    """A listing whose cursors lead back to a page already read, or fresh cursors over the same records."""
    variant = s.rng.choice(["cursor-back", "same-records", "unverified-cursor-back"])
    s.use("list_items", verified=not variant.startswith("unverified"))
    table = s.table("pages")
    if variant == "same-records":
        cursors = ["", *(f"{uid}-c{n}" for n in range(1, 60))]
        for n, cursor in enumerate(cursors):
            table[cursor] = (tuple(f"{uid}-r{k}" for k in range(5)), f"{uid}-c{n + 1}")
        s.ask(page(cursors[0]))
        s.loop_here()
        for cursor in cursors[1 : loop_length(s, 10, 30)]:
            s.ask(page(cursor))
        return variant
    size = s.rng.randint(2, 6)
    back = s.rng.randint(0, size - 1)
    cursors = ["", *(f"{uid}-c{n}" for n in range(1, size))]
    for n, cursor in enumerate(cursors):
        table[cursor] = (tuple(f"{uid}-r{n}-{k}" for k in range(5)), cursors[n + 1] if n + 1 < size else cursors[back])
    for cursor in cursors:
        s.ask(page(cursor))
    s.loop_here()
    for n in range(loop_length(s, 10, 30)):
        s.ask(page(cursors[back + n % (size - back)]))
    return f"{variant}-{size}-pages"


def poll_never_settles(s: Script, uid: str) -> str:
    job = f"{uid}-job"
    s.table("settle_after")[job] = -1
    seconds = round(s.rng.choice([s.rng.uniform(0.2, 2.0), s.rng.uniform(2.0, 15.0)]), 2)
    s.world["poll_seconds"] = seconds
    setup_reads(s, uid)
    s.loop_here()
    for _ in range(250):
        s.ask(poll(job))
    return "tight" if seconds < 2 else "spaced"


def lost_answer(s: Script, uid: str) -> str:
    """A confirmation whose answer was lost (or that arrived), sent again and again."""
    variant = s.rng.choice(["unknown", "committed", "not_committed", "answered"])
    order = 5000 + s.rng.randint(0, 99)
    s.use("confirm_order", retries=0)
    if variant != "answered":
        s.table("lost")[order] = variant
    s.ask(read_order(order))
    s.ask(confirm(order))
    s.loop_here()
    for _ in range(loop_length(s, 5, 20)):
        s.ask(confirm(order))
    return variant


def asks_after_done(s: Script, uid: str) -> str:
    """The task is done (validated), and the model keeps calling tools."""
    order = 6000 + s.rng.randint(0, 99)
    s.ask(read_order(order))
    s.ask(confirm(order))
    s.world["goal"] = f"confirmed:{order}"
    variant = s.rng.choice(["same-write", "re-read", "other-reads"])
    s.loop_here()
    for n in range(loop_length(s, 3, 20)):
        if variant == "same-write":
            s.ask(confirm(order))
        elif variant == "re-read":
            s.ask(read_order(order))
        else:
            s.ask(search(f"{uid} anything else {n}"))
    return variant


SHAPES: dict[str, tuple[Label, Callable[[Script, str], str], int]] = {
    "long-poll": ("legit", long_poll, 40),
    "pagination": ("legit", pagination, 40),
    "transient-retry": ("legit", transient_retry, 50),
    "reread-after-write": ("legit", reread_after_write, 40),
    "fan-out": ("legit", fan_out, 45),
    "multi-tool": ("legit", multi_tool, 45),
    "repeat-with-progress": ("legit", repeat_with_progress, 40),
    "identical": ("loop", identical, 40),
    "cycle": ("loop", cycle, 40),
    "near-duplicate": ("loop", near_duplicate, 45),
    "error-storm": ("loop", error_storm, 35),
    "pagination-cycle": ("loop", pagination_cycle, 30),
    "poll-never-settles": ("loop", poll_never_settles, 30),
    "lost-answer": ("loop", lost_answer, 30),
    "asks-after-done": ("loop", asks_after_done, 30),
}
"""shape -> (label, generator, how many)."""


def build(seed: int = SEED) -> list[Trajectory]:
    """The corpus for ``seed``: every shape's trajectories, in a fixed order."""
    rng = random.Random(seed)
    corpus = []
    for shape, (label, make, count) in SHAPES.items():
        for n in range(count):
            uid = f"{shape}-{n:03d}"
            script = Script(random.Random(rng.getrandbits(64)))
            variant = make(script, uid)
            trajectory = script.finish(uid, label, shape, variant)
            if label == "loop" and trajectory.loop_start is None:
                trajectory = replace(trajectory, loop_start=0)
            corpus.append(trajectory)
    return corpus


def counts(corpus: list[Trajectory]) -> Counter[tuple[str, str]]:
    """(label, shape) -> trajectories."""
    return Counter((t.label, t.shape) for t in corpus)
