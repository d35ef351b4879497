"""Core benchmark: a guarded decision, and canonicalization next to json.dumps and orjson, in one run.

Run: ``python benchmarks/bench_core.py`` (add ``--quick`` for a short run). Prints medians in microseconds and the
ratios the project's goals are stated in. Numbers vary on a noisy machine; the ratios, measured side by side and
interleaved, are what to compare.

Goals: a guarded small read decision <= 20 us; canonical JSON of any ~6.5 KB value (plain, with one integral float,
with many floats, with floats below 1e-4, with keys outside the BMP) no slower than 2x ``json.dumps(sort_keys=True)``
of the same value with the standard library's encoder, and no slower than 1x with orjson (the ``[fast]`` extra).
Each canonicalization figure is the median, with min and max, of the time ratios of interleaved pairs (the case and
``json.dumps`` back to back).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from paired import freeze_heap

from agents_loopguard import Budget, Guard, MemoryStore, Policy, Verdict
from agents_loopguard.values import canonical
from agents_loopguard.values.canonical import canonical_json

try:
    import orjson
except ImportError:  # orjson is the [fast] extra: without it only the standard library's encoder is measured
    orjson = None


def _plain_item(i: int) -> dict[str, Any]:
    return {
        "sku": f"SKU-{i:05d}",
        "qty": i % 7 + 1,
        "price": round(3.75 + i * 1.3, 2),
        "note": "gift wrap, deliver after 5pm",
        "tags": ["promo", "eu"],
    }


def _float_item(i: int) -> dict[str, Any]:
    """Every number a float, the integral ones (``4.0``) spelled without a fraction by RFC 8785."""
    return {
        "sku": f"SKU-{i:05d}",
        "qty": float(i % 7 + 1),
        "price": round(3.75 + i * 1.3, 2),
        "weight_kg": round(0.1 + i * 0.37, 3),
        "shipped_ms": 1.7e12 + i * 1000.0,
        "discount": 5.0 if i % 2 else 2.5,
    }


def _small_float_item(i: int) -> dict[str, Any]:
    """Floats below 1e-4, which Python (1e-05) and orjson (1e-6 <= x < 1e-5: 4.8e-6) spell unlike ECMAScript."""
    return {
        "sku": f"SKU-{i:05d}",
        "qty": float(i % 7 + 1),
        "price": round(3.75 + i * 1.3, 2),
        "discount_rate": 1e-5 + i * 1.3e-6,
        "tolerance": 1e-6 + i * 1.5e-7,
    }


def _non_bmp_item(i: int) -> dict[str, Any]:
    """A key outside the BMP (an emoji): sorted by UTF-16 code units, it lands where code-point order puts it."""
    item = _plain_item(i)
    item["\U0001f381 gift"] = i % 2 == 0
    return item


def _utf16_order_item(i: int) -> dict[str, Any]:
    """A key outside the BMP next to one in U+E000-U+FFFF: UTF-16 order differs from code-point order."""
    item = _non_bmp_item(i)
    item["\uff05 off"] = i % 5
    return item


def payload(target: int, item: Callable[[int], dict[str, Any]] = _plain_item) -> dict[str, Any]:
    """A realistic tool argument payload of about ``target`` bytes of JSON, made of ``item(i)`` records."""
    items: list[dict[str, Any]] = []
    i = 0
    while len(json.dumps({"items": items}, ensure_ascii=False).encode()) < target - 120:
        items.append(item(i))
        i += 1
    return {"customer_id": "c-20931", "currency": "EUR", "amount": 129.5, "items": items}


def canon_payloads(target: int) -> dict[str, Any]:
    """The canonicalization cases: plain, one integral float, many floats (two kinds), keys outside the BMP (two)."""
    one_float = payload(target)
    one_float["items"][len(one_float["items"]) // 2]["qty"] = 5.0
    return {
        "plain": payload(target),
        "one integral float": one_float,
        "many floats": payload(target, _float_item),
        "many small floats": payload(target, _small_float_item),
        "non-BMP keys": payload(target, _non_bmp_item),
        "UTF-16 key order": payload(target, _utf16_order_item),
    }


def sample(fn: Callable[[], Any], *, inner: int) -> float:
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - start) / inner * 1e6


def interleaved(cases: dict[str, Callable[[], Any]], *, rounds: int, inner: int) -> dict[str, tuple[float, float]]:
    """(median, best) microseconds per call; each round runs every case once, so noise hits all of them alike."""
    for fn in cases.values():  # warm up
        sample(fn, inner=max(1, inner // 10))
    freeze_heap()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            times[name].append(sample(fn, inner=inner))
    return {name: (statistics.median(values), min(values)) for name, values in times.items()}


def paired_ratios(
    baseline: Callable[[], Any], cases: dict[str, Callable[[], Any]], *, rounds: int, inner: int
) -> dict[str, tuple[float, float, float, float]]:
    """Per case: median, min and max of its time / the baseline's over ``rounds`` pairs, and its median us.

    Each pair runs the two back to back (alternating which goes first), so noise on the shared machine hits both.
    """
    for fn in [baseline, *cases.values()]:  # warm up
        sample(fn, inner=max(1, inner // 10))
    freeze_heap()
    ratios: dict[str, list[float]] = {name: [] for name in cases}
    times: dict[str, list[float]] = {name: [] for name in cases}
    for r in range(rounds):
        for name, fn in cases.items():
            if r % 2:
                took = sample(fn, inner=inner)
                base = sample(baseline, inner=inner)
            else:
                base = sample(baseline, inner=inner)
                took = sample(fn, inner=inner)
            ratios[name].append(took / base)
            times[name].append(took)
    return {
        name: (statistics.median(values), min(values), max(values), statistics.median(times[name]))
        for name, values in ratios.items()
    }


def canonical_with(encoder: str, value: Any) -> Callable[[], Any]:
    """``canonical_json(value)`` with the named encoder (``"json"`` or ``"orjson"``) chosen for the call."""
    make = canonical._ENCODERS[encoder]

    def once() -> bytes:
        canonical._new_encoder = make
        return canonical_json(value)

    return once


def bench_canonical(*, rounds: int, inner: int) -> None:
    """Each canonicalization case against json.dumps(sort_keys=True) of the same value, with and without orjson."""
    goals = {"json": 2.0, "orjson": 1.0}
    default = canonical._new_encoder
    print(f"\ncanonical JSON of ~6.5 KB values: time / json.dumps(sort_keys=True), median [min-max] of {rounds} pairs")
    print(f"  {'value':<28} {'writer':<36} {'ratio':>6} {'min-max':>12} {'us':>8}  goal")
    try:
        for kind, value in canon_payloads(6_500).items():
            label = f"{kind} ({len(json.dumps(value).encode())} B)"
            cases = {f"canonical_json, {name} encoder": canonical_with(name, value) for name in canonical._ENCODERS}
            if orjson is not None:
                cases["orjson OPT_SORT_KEYS (not RFC 8785)"] = partial(orjson.dumps, value, option=orjson.OPT_SORT_KEYS)
            results = paired_ratios(partial(json.dumps, value, sort_keys=True), cases, rounds=rounds, inner=inner)
            for name, (ratio, low, high, us) in results.items():
                goal = next((limit for key, limit in goals.items() if name == f"canonical_json, {key} encoder"), None)
                verdict = "" if goal is None else f"<= x{goal:g}: {'met' if ratio <= goal else 'MISSED'}"
                print(f"  {label:<28} {name:<36} x{ratio:5.2f} [{low:4.2f}-{high:4.2f}] {us:8.1f}  {verdict}")
    finally:
        canonical._new_encoder = default


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
    print(f"payload sizes: small {len(json.dumps(small))} B, big {len(json.dumps(big))} B")

    decisions = interleaved(
        {"guarded read, small args": guarded_decision(small), "guarded read, ~10 KB args": guarded_decision(big)},
        rounds=rounds,
        inner=max(inner // 2, 50),
    )
    print("\nguarded decision (memory store), us per decision: median / best round")
    for name, (med, best) in decisions.items():
        print(f"  {name:<40} {med:9.1f} / {best:9.1f}")
    small_us = decisions["guarded read, small args"][0]
    print(f"  goal: small read <= 20 us (median) -> {'met' if small_us <= 20 else 'MISSED'}")

    bench_canonical(rounds=rounds, inner=max(inner // 10, 20))


if __name__ == "__main__":
    main()
