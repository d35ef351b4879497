"""Core benchmark: a guarded decision, and canonicalization next to json.dumps and orjson, in one run.

Run: ``python benchmarks/bench_core.py`` (add ``--quick`` for a short run). Prints medians in microseconds and the
ratios the project's goals are stated in. Numbers vary on a noisy machine; the ratios, measured side by side and
interleaved, are what to compare.

Goals: a guarded small read decision <= 20 us; canonicalizing a ~6.5 KB payload no slower than 2x
``json.dumps(sort_keys=True)``.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from agents_loopguard import Budget, Guard, MemoryStore, Policy, Verdict
from agents_loopguard.canonical import canonical_json

try:
    import orjson
except ImportError:  # orjson is a dev extra, only for comparison
    orjson = None


def payload(target: int) -> dict[str, Any]:
    """A realistic tool argument payload of about ``target`` bytes of JSON."""
    items = []
    i = 0
    while len(json.dumps({"items": items})) < target - 120:
        items.append(
            {
                "sku": f"SKU-{i:05d}",
                "qty": i % 7 + 1,
                "price": round(3.75 + i * 1.3, 2),
                "note": "gift wrap, deliver after 5pm",
                "tags": ["promo", "eu"],
            }
        )
        i += 1
    return {"customer_id": "c-20931", "currency": "EUR", "amount": 129.5, "items": items}


def sample(fn: Callable[[], Any], *, inner: int) -> float:
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - start) / inner * 1e6


def interleaved(cases: dict[str, Callable[[], Any]], *, rounds: int, inner: int) -> dict[str, tuple[float, float]]:
    """(median, best) microseconds per call; each round runs every case once, so noise hits all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            times[name].append(sample(fn, inner=inner))
    return {name: (statistics.median(values), min(values)) for name, values in times.items()}


def guarded_decision(args: dict[str, Any]) -> Callable[[], Any]:
    """One full guarded read: reserve a turn, authorize (fingerprint, repetition, budget), settle with evidence."""
    limit = 10**9
    guard = Guard(
        budget=Budget(model_turns=limit, tool_executions=limit),
        store=MemoryStore(),
        policy=Policy(max_same_call=limit, max_stalled=limit),
    )
    counter = iter(range(10**12))
    result = {"status": "ok", "hits": 3}

    def verify(call: Any, res: Any) -> dict[str, Any]:
        return {"revision": next(counter), "done": False, "effect": "none"}

    proposal = {"tool": "search", "kind": "read", "args": args}

    def once() -> None:
        if guard.begin_turn() is not None:
            raise RuntimeError("refused")
        ticket = guard.authorize(proposal)
        if isinstance(ticket, Verdict):
            raise RuntimeError(ticket)
        if guard.settle(ticket, result, verify) is not None:
            raise RuntimeError("stopped")

    return once


def main() -> None:
    quick = "--quick" in sys.argv
    rounds, inner = (5, 200) if quick else (15, 1000)
    small = {"q": "weather in Madrid", "page": 1, "limit": 10, "lang": "es", "unit": "metric"}
    big = payload(10_000)
    mid = payload(6_500)
    print(
        f"payload sizes: small {len(json.dumps(small))} B, mid {len(json.dumps(mid))} B, big {len(json.dumps(big))} B"
    )

    decisions = interleaved(
        {"guarded read, small args": guarded_decision(small), "guarded read, ~10 KB args": guarded_decision(big)},
        rounds=rounds,
        inner=max(inner // 2, 50),
    )
    canon_cases: dict[str, Callable[[], Any]] = {
        "json.dumps(sort_keys=True)": lambda: json.dumps(mid, sort_keys=True),
        "canonical_json (RFC 8785)": lambda: canonical_json(mid),
    }
    if orjson is not None:
        canon_cases["orjson OPT_SORT_KEYS (not RFC 8785)"] = lambda: orjson.dumps(mid, option=orjson.OPT_SORT_KEYS)
    canon = interleaved(canon_cases, rounds=rounds, inner=inner // 2)

    print("\nguarded decision (memory store), us per decision: median / best round")
    for name, (med, best) in decisions.items():
        print(f"  {name:<40} {med:9.1f} / {best:9.1f}")
    small_us = decisions["guarded read, small args"][0]
    print(f"  goal: small read <= 20 us (median) -> {'met' if small_us <= 20 else 'MISSED'}")

    print("\ncanonicalization of the ~6.5 KB payload, us: median / best round, ratio of medians")
    base = canon["json.dumps(sort_keys=True)"][0]
    for name, (med, best) in canon.items():
        print(f"  {name:<40} {med:9.1f} / {best:9.1f}   x{med / base:.2f} of json.dumps")
    ratio = canon["canonical_json (RFC 8785)"][0] / base
    print(f"  goal: canonical_json <= 2x json.dumps -> x{ratio:.2f} {'met' if ratio <= 2 else 'MISSED'}")


if __name__ == "__main__":
    main()
