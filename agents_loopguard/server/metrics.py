"""``GET /metrics``: the store's figures in the Prometheus text format (``prometheus_client``), read at each scrape.

The workers that run agents are other processes; what they did is in the store. A scrape asks the operations layer
(:func:`agents_loopguard.ops.measures.measures`) once: the store answers from counters it keeps as tasks end and from
indexed counts, so a scrape costs the same on a thousand tasks or on millions, and the labels come from a bounded
set (a task's family, status and outcome reason; never a task id or free text):

- ``loopguard_tasks{family, status, reason}``: tasks by family, current status and the reason of their outcome
  (``running`` has no reason); a recovered task moves back to running, so this is a gauge, not a counter.
- ``loopguard_refusals_total{family, reason}``: calls the guard refused before they ran, by rule (counted as they
  were recorded: a prune of old traces leaves it).
- ``loopguard_shadow_verdicts_total{family, reason}``: what the loop rules would have refused in shadow mode, by
  rule (nothing was refused; counted the same way).
- ``loopguard_pauses_pending`` and ``loopguard_pause_oldest_age_seconds``: approvals waiting, and for how long.
- ``loopguard_unknown_writes`` and ``loopguard_unknown_write_oldest_age_seconds``: writes whose effect is unknown
  (each blocks its task until reconciled), and how long the oldest has waited.
- ``loopguard_budget_used{family, counter, status}`` and ``loopguard_budget_limit{...}``: model turns and tool
  executions used and allowed, summed per task family, for running and for ended tasks.
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
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..ops.measures import measures
from ..store.base import Store
from ..values.families import task_family
from .auth import api_metrics
from .config import Principal

__all__ = ["CONTENT_TYPE", "StoreCollector", "exposition", "router", "task_family"]

router = APIRouter()

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text exposition format's media type."""
_BUDGETS = (("model_turns", "models", "model_turns"), ("tool_executions", "tools", "tool_executions"))


class StoreCollector(Collector):
    """Collects the metrics of ``store`` at each scrape, through the operations layer (see the module)."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
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

    def collect(self) -> Iterator[Metric]:
        """The metric families, read from the store now (one call of the operations layer)."""
        with self.reads.labels("measures").time():
            figures = measures(self.store, now=self.clock())
        tasks = GaugeMetricFamily(
            "loopguard_tasks",
            "Tasks by family, current status and outcome reason",
            labels=["family", "status", "reason"],
        )
        for group in figures["tasks"]:
            tasks.add_metric([group["family"], group["status"], group["reason"]], group["tasks"])
        yield tasks
        refusals = CounterMetricFamily(
            "loopguard_refusals", "Calls the guard refused before they ran, by rule", labels=["family", "reason"]
        )
        for row in figures["refusals"]:
            refusals.add_metric([row["family"], row["reason"]], row["count"])
        yield refusals
        shadow = CounterMetricFamily(
            "loopguard_shadow_verdicts",
            "Would-be verdicts of the loop rules in shadow mode (nothing was refused), by rule",
            labels=["family", "reason"],
        )
        for row in figures["shadow_verdicts"]:
            shadow.add_metric([row["family"], row["reason"]], row["count"])
        yield shadow
        pauses, unknown = figures["pauses"], figures["unknown_writes"]
        yield GaugeMetricFamily("loopguard_pauses_pending", "Approval pauses waiting for a decision", pauses["pending"])
        yield GaugeMetricFamily(
            "loopguard_pause_oldest_age_seconds",
            "Age of the oldest pending pause (0: none)",
            pauses["oldest_age_seconds"],
        )
        yield GaugeMetricFamily(
            "loopguard_unknown_writes", "Writes whose effect is unknown (reconcile them)", unknown["count"]
        )
        yield GaugeMetricFamily(
            "loopguard_unknown_write_oldest_age_seconds",
            "Age of the oldest write whose effect is unknown (0: none)",
            unknown["oldest_age_seconds"],
        )
        yield from _budgets(figures["tasks"])


def _budgets(groups: list[dict[str, Any]]) -> Iterator[Metric]:
    used: dict[tuple[str, str, str], int] = {}
    limit: dict[tuple[str, str, str], int] = {}
    for group in groups:
        status = "running" if group["status"] == "running" else "ended"
        for counter, spent, allowed in _BUDGETS:
            key = (group["family"], counter, status)
            used[key] = used.get(key, 0) + group[spent]
            limit[key] = limit.get(key, 0) + group[allowed]
    labels = ["family", "counter", "status"]
    spent_family = GaugeMetricFamily("loopguard_budget_used", "Budget used, summed per task family", labels=labels)
    limit_family = GaugeMetricFamily("loopguard_budget_limit", "Budget allowed, summed per task family", labels=labels)
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
    """The store's figures in the Prometheus text format, read now (see :mod:`agents_loopguard.server.metrics`)."""
    collector: StoreCollector = request.app.state.metrics
    return Response(exposition(collector), media_type=CONTENT_TYPE)
