"""``GET /metrics``: the store's state in the Prometheus text format (``prometheus_client``), read at each scrape.

The workers that run agents are other processes; what they did is in the store, so the numbers come from it, at
scrape time, through the store's public reads (nothing is counted in the server's memory but its own store reads):

- ``loopguard_tasks{status, reason}``: tasks by their current status and the reason of their outcome (``running``
  has no reason); a recovered task moves back to running, so this is a gauge, not a counter.
- ``loopguard_refusals_total{reason}``: calls the guard refused before they ran, by rule (from the trace).
- ``loopguard_shadow_verdicts_total{reason}``: would-be verdicts of the loop rules in shadow mode, by rule (from the
  trace; nothing was refused for them).
- ``loopguard_pauses_pending`` and ``loopguard_pause_oldest_age_seconds``: approvals waiting, and for how long.
- ``loopguard_budget_used{family, counter, status}`` and ``loopguard_budget_limit{...}``: model turns and tool
  executions used and allowed, summed per task family (:func:`task_family`), for running and for ended tasks.
- ``loopguard_store_read_seconds{read}``: a histogram of how long the store's reads took, as this server saw them.

It needs a token with the ``metrics`` scope (``prom:metrics:<secret>``, which can read nothing else) or an operator
token: task families and counts are operational data, and a scraper should not hold the power to approve.

>>> from agents_loopguard import Budget, Guard, MemoryStore
>>> from prometheus_client.parser import text_string_to_metric_families
>>> store = MemoryStore()
>>> _ = Guard(budget=Budget(4, 2), store=store, task_id="ticket-981")
>>> text = exposition(StoreCollector(store))
>>> [s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == "loopguard_tasks"]
[1.0]
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..store.base import Store
from ..values.budget import task_family
from .auth import api_metrics
from .config import Principal

__all__ = ["CONTENT_TYPE", "StoreCollector", "exposition", "router", "task_family"]

router = APIRouter()

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text exposition format's media type."""
T = TypeVar("T")


class StoreCollector(Collector):
    """Collects the metrics from ``store`` at each scrape (see the module); ``family`` groups the budget sums."""

    def __init__(
        self,
        store: Store,
        *,
        family: Callable[[str], str] = task_family,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.family = family
        self.clock = clock
        self.registry = CollectorRegistry()
        self.reads = Histogram(
            "loopguard_store_read_seconds",
            "How long the store's reads took, as the server saw them",
            ["read"],
            registry=self.registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )
        self.registry.register(self)

    def _read(self, name: str, read: Callable[[], T]) -> T:
        with self.reads.labels(name).time():
            return read()

    def collect(self) -> Iterator[Metric]:
        """The metric families, read from the store now."""
        tasks = self._read("tasks", self.store.tasks)
        yield self._tasks(tasks)
        refused: Counter[str] = Counter()
        shadowed: Counter[str] = Counter()
        for task in tasks:
            for entry in self._read("trace", lambda t=task.task_id: self.store.trace(t)):  # type: ignore[misc]
                if entry.result_class.startswith("refused:"):
                    refused[entry.result_class.removeprefix("refused:")] += 1
                elif entry.result_class.startswith("shadow:"):
                    shadowed[entry.result_class.removeprefix("shadow:")] += 1
        refusals = CounterMetricFamily(
            "loopguard_refusals", "Calls the guard refused before they ran, by rule", labels=["reason"]
        )
        for reason, count in sorted(refused.items()):
            refusals.add_metric([reason], count)
        yield refusals
        shadow = CounterMetricFamily(
            "loopguard_shadow_verdicts",
            "Would-be verdicts of the loop rules in shadow mode (nothing was refused), by rule",
            labels=["reason"],
        )
        for reason, count in sorted(shadowed.items()):
            shadow.add_metric([reason], count)
        yield shadow
        yield from self._pauses()
        yield from self._budgets(tasks)

    def _tasks(self, tasks: list[Any]) -> Metric:
        ended: Counter[tuple[str, str]] = Counter((t.status, str((t.outcome or {}).get("reason") or "")) for t in tasks)
        family = GaugeMetricFamily(
            "loopguard_tasks", "Tasks by current status and outcome reason", labels=["status", "reason"]
        )
        for (status, reason), count in sorted(ended.items()):
            family.add_metric([status, reason], count)
        return family

    def _pauses(self) -> Iterator[Metric]:
        pending = [p for p in self._read("pauses", self.store.pauses) if p.status == "pending"]
        now = self.clock()
        yield GaugeMetricFamily("loopguard_pauses_pending", "Approval pauses waiting for a decision", len(pending))
        oldest = max((now - p.created_at for p in pending if p.created_at), default=0.0)
        yield GaugeMetricFamily(
            "loopguard_pause_oldest_age_seconds", "Age of the oldest pending pause (0: none)", max(0.0, oldest)
        )

    def _budgets(self, tasks: list[Any]) -> Iterator[Metric]:
        used: Counter[tuple[str, str, str]] = Counter()
        limit: Counter[tuple[str, str, str]] = Counter()
        for task in tasks:
            status = "running" if task.status == "running" else "ended"
            family = self.family(task.task_id)
            for counter, spent, allowed in (
                ("model_turns", task.used.models, task.budget.model_turns),
                ("tool_executions", task.used.tools, task.budget.tool_executions),
            ):
                used[(family, counter, status)] += spent
                limit[(family, counter, status)] += allowed
        labels = ["family", "counter", "status"]
        spent_family = GaugeMetricFamily("loopguard_budget_used", "Budget used, summed per task family", labels=labels)
        limit_family = GaugeMetricFamily(
            "loopguard_budget_limit", "Budget allowed, summed per task family", labels=labels
        )
        for key in sorted(limit):
            spent_family.add_metric(list(key), used[key])
            limit_family.add_metric(list(key), limit[key])
        yield spent_family
        yield limit_family


def exposition(collector: StoreCollector) -> str:
    """The collector's registry in the text format (what ``GET /metrics`` answers)."""
    return generate_latest(collector.registry).decode("utf-8")


@router.get("/metrics", tags=["server"], summary="Prometheus metrics (a metrics or operator token)")
def metrics(request: Request, _: Principal = Depends(api_metrics)) -> Response:  # noqa: B008 - FastAPI's idiom
    """The store's state in the Prometheus text format, read now (see :mod:`agents_loopguard.server.metrics`)."""
    collector: StoreCollector = request.app.state.metrics
    return Response(exposition(collector), media_type=CONTENT_TYPE)
