"""The receivers a trajectory's tools talk to, deterministic: what each call returns or raises, a fake clock, and the
application's trusted ``verify``.

The application's revision is the number of distinct facts it has verified (documents found, records read, order
states seen, jobs finished, pages listed, queue items taken): a result that teaches nothing new does not advance it.
That is the ``verify`` an outside benchmark replayed our engine with, and the one a careful application writes. It
counts for the whole task, so every tool declares the same progress key (``paths.FACTS``).

Every tool body appends its name to :attr:`World.ran` before anything else: the count of real executions, which is
what the scores are made of (never the guard's own counters).
"""

from __future__ import annotations

import ast
import json
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agents_loopguard.run.retry import ToolFailure, TransientToolError

__all__ = ["KINDS", "FailedAttempt", "World", "WorldSpec"]

KINDS: dict[str, str] = {
    "search": "read",
    "fetch": "read",
    "read_order": "read",
    "lookup": "read",
    "next_batch": "read",
    "confirm_order": "write",
    "job_status": "poll",
    "list_items": "page",
}
"""The corpus's tools and their kind (a tool keeps its kind in every trajectory)."""


@dataclass(frozen=True)
class WorldSpec:
    """How the receivers behave in one trajectory."""

    goal: str | None = None
    """The fact whose verification completes the task (``None``: only the model's final answer ends it)."""
    index: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """query -> document ids it finds (a query not listed finds three documents of its own)."""
    failures: dict[str, int] = field(default_factory=dict)
    """``tool:key`` -> transient failures before the call succeeds (-1: it always fails)."""
    settle_after: dict[str, int] = field(default_factory=dict)
    """job -> pending answers before it is done (-1: never)."""
    pages: dict[str, tuple[tuple[str, ...], str | None]] = field(default_factory=dict)
    """cursor -> (record ids, next cursor or None on the last page)."""
    batches: dict[str, int] = field(default_factory=dict)
    """queue -> batches it serves before it is empty."""
    lost: dict[int, str] = field(default_factory=dict)
    """order -> what the receiver says when its confirmation's answer is lost (``committed``, ``not_committed`` or
    ``unknown``: it cannot tell)."""
    step_seconds: float = 1.0
    """Clock time one execution takes."""
    poll_seconds: float = 5.0
    """Clock time between two polls (the model's wait plus the call)."""
    backoff_seconds: float = 2.0
    """Clock time a transient failure costs (the backoff before the next attempt)."""


@dataclass(frozen=True)
class FailedAttempt:
    """What the engine path hands a write's ``verify`` when the attempt raised (the guarded run hands a
    :class:`~agents_loopguard.run.retry.ToolFailure`)."""

    error: BaseException


class World:
    """The receivers of one run of one trajectory (a fresh world per run)."""

    def __init__(self, spec: WorldSpec) -> None:
        self.spec = spec
        self.clock = 0.0
        self.ran: list[str] = []
        """Every tool body that ran, in order: the real executions."""
        self.known: set[str] = set()
        """The facts the application has verified; the revision is their number."""
        self.tries: Counter[str] = Counter()
        self.polls: Counter[str] = Counter()
        self.served: Counter[str] = Counter()
        self.orders: dict[int, str] = {}

    def now(self) -> float:
        """The fake clock (the guard's clock in every path)."""
        return self.clock

    # --- bodies ---------------------------------------------------------------------------------------------

    def call(self, tool: str, args: dict[str, Any]) -> Any:
        """Run the body of ``tool`` with ``args`` (raises a transient error or ``TimeoutError`` as scheduled)."""
        body = getattr(self, f"_{tool}")
        self.ran.append(tool)
        self.clock += self.spec.poll_seconds if tool == "job_status" else self.spec.step_seconds
        return body(**args)

    def _fail(self, key: str) -> None:
        scheduled = self.spec.failures.get(key)
        if scheduled is None:
            return
        self.tries[key] += 1
        if scheduled < 0 or self.tries[key] <= scheduled:
            self.clock += self.spec.backoff_seconds
            kind = "429 Too Many Requests" if zlib.crc32(key.encode()) % 2 else "503 upstream timed out"
            raise TransientToolError(f"{kind} ({key}, attempt {self.tries[key]})")

    def _search(self, query: str, requested_at: str = "") -> list[str]:
        self._fail(f"search:{query}")
        if query in self.spec.index:
            return list(self.spec.index[query])
        seed = zlib.crc32(query.encode())
        return [f"doc-{seed % 9973}-{n}" for n in range(3)]

    def _fetch(self, record_id: str) -> dict[str, Any]:
        self._fail(f"fetch:{record_id}")
        return {"id": record_id, "value": zlib.crc32(record_id.encode()) % 1000}

    def _read_order(self, order: int) -> dict[str, Any]:
        self._fail(f"read_order:{order}")
        return {"order": order, "state": self.orders.get(order, "open")}

    def _lookup(self, topic: str) -> str:
        self._fail(f"lookup:{topic}")
        return f"notes about {topic}"

    def _next_batch(self, queue: str) -> dict[str, Any]:
        self._fail(f"next_batch:{queue}")
        served = self.served[queue]
        if served >= self.spec.batches.get(queue, 0):
            return {"items": []}
        self.served[queue] += 1
        return {"items": [f"{queue}-item-{served}-{n}" for n in range(3)]}

    def _confirm_order(self, order: int) -> str:
        self._fail(f"confirm_order:{order}")
        lost = self.spec.lost.get(order)
        if lost is None or lost == "committed":
            self.orders[order] = "confirmed"
        if lost is not None:
            raise TimeoutError(f"confirm_order({order}): no answer (the connection dropped)")
        return f"order {order} confirmed"

    def _job_status(self, job: str) -> dict[str, Any]:
        self._fail(f"job_status:{job}")
        self.polls[job] += 1
        settle = self.spec.settle_after.get(job, 0)
        if settle < 0 or self.polls[job] <= settle:
            return {"job": job, "state": "pending"}
        return {"job": job, "state": "done"}

    def _list_items(self, cursor: str = "", page_size: int = 20) -> dict[str, Any]:
        self._fail(f"list_items:{cursor}")
        records, nxt = self.spec.pages.get(cursor, ((), None))
        return {"records": list(records[: max(page_size, 0)]), "next": nxt}

    # --- the application's trusted check ----------------------------------------------------------------------

    def verify(self, tool: str, args: dict[str, Any], output: Any) -> dict[str, Any]:
        """The evidence of one result: the revision is the number of facts verified so far; ``done`` once the goal
        is among them."""
        evidence: dict[str, Any] = {"effect": "none"}
        output = _decoded(output)
        if tool == "confirm_order":
            evidence["effect"] = self._confirmed(int(args["order"]), output)
        elif tool == "job_status":
            if output["state"] == "pending":
                evidence["pending"] = True
            else:
                self.known.add(f"job:{output['job']}")
        elif tool == "list_items":
            self.known.update(f"rec:{r}" for r in output["records"])
            if output["next"] is None:
                self.known.add("list:end")
            evidence.update(cursor=output["next"], records=output["records"])
        else:
            self.known.update(self._facts(tool, args, output))
        evidence["revision"] = len(self.known)
        evidence["done"] = self.spec.goal is not None and self.spec.goal in self.known and not evidence.get("pending")
        if evidence["effect"] not in ("committed", "none"):
            evidence["done"] = False
        return evidence

    def _confirmed(self, order: int, output: Any) -> str:
        """A confirmation's effect: the receiver's answer when the attempt failed (asked by the operation's id)."""
        if isinstance(output, (ToolFailure, FailedAttempt)):
            said = self.spec.lost.get(order)
            if said is None:  # a transient failure before the receiver acted
                return "not_committed"
            if said == "unknown":
                return "unknown"
            if said == "not_committed" or self.orders.get(order) != "confirmed":
                return "not_committed"
        self.known.add(f"confirmed:{order}")
        return "committed"

    @staticmethod
    def _facts(tool: str, args: dict[str, Any], output: Any) -> set[str]:
        if tool == "search":
            return {f"doc:{d}" for d in output}
        if tool == "fetch":
            return {f"rec:{output['id']}"}
        if tool == "read_order":
            return {f"order:{output['order']}:{output['state']}"}
        if tool == "next_batch":
            items = output["items"]
            return {f"item:{i}" for i in items} if items else {f"queue:{args['queue']}:empty"}
        return {f"topic:{args.get('topic')}"}


def _decoded(output: Any) -> Any:
    """An output as the tool returned it: LangChain hands ``verify`` the text the model reads (JSON, or Python's repr
    of a dict or list)."""
    if not isinstance(output, str) or output[:1] not in "[{":
        return output
    try:
        return json.loads(output)
    except ValueError:
        return ast.literal_eval(output)
