"""A line-by-line transliteration of the article's JavaScript ``createRunner``, used as the test oracle.

It keeps the prototype's semantics (JavaScript truthiness, ``Number.isSafeInteger``, a Map ledger holding the
canonical payload) so that differential tests can check that the library reaches the same terminal status,
reason, revision, value, counters and ledger states for the same inputs. It is not part of the library.
"""

from __future__ import annotations

import json
import math
from typing import Any


def js_truthy(value: Any) -> bool:
    if value is None or value is False:
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value != 0 and not (isinstance(value, float) and math.isnan(value))
    if isinstance(value, str):
        return value != ""
    return True


def get(obj: Any, key: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(key)
    return getattr(obj, key, None)


def canonical(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ",".join(canonical(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + canonical(value[k]) for k in sorted(value)) + "}"
        )
    if value is None or isinstance(value, (str, bool)):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (int, float)) and math.isfinite(value):
        if float(value).is_integer():
            return str(int(value))
        return repr(float(value))
    raise ValueError("Solo JSON válido")


def is_safe_integer(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return False
    return abs(value) <= 2**53 - 1


def create_runner(*, budget: dict, ledger: dict, now, execute, verify, initial_revision: int = 0):
    state: dict[str, Any] = {"terminal": None, "revision": initial_revision, "idle": 0, "last_good": None}
    repetitions: dict[str, int] = {}
    _unset = object()

    def finish(status: str, reason: str, value: Any = _unset) -> dict:
        if state["terminal"] is None:
            state["terminal"] = {
                "status": status,
                "reason": reason,
                "revision": state["revision"],
                "value": state["last_good"] if value is _unset else value,
                "used": {"models": budget["models"], "tools": budget["tools"]},
            }
        return state["terminal"]

    def run(proposals):
        if state["terminal"]:
            return state["terminal"]
        for call in proposals:
            if now() >= budget["deadline"]:
                return finish("stopped", "deadline")
            if budget["models"] >= budget["maxModels"]:
                return finish("stopped", "model_budget")
            budget["models"] += 1
            if (
                not js_truthy(call)
                or not isinstance(get(call, "tool"), str)
                or not js_truthy(get(call, "args"))
                or get(call, "kind") not in ("read", "write")
            ):
                return finish("stopped", "invalid_call")
            try:
                payload = canonical({"tool": call["tool"], "args": call["args"]})
            except Exception:
                return finish("stopped", "invalid_call")
            old = None
            write = call["kind"] == "write"
            if write:
                op = call.get("operation_id")
                if not isinstance(op, str) or not op:
                    return finish("stopped", "missing_operation_id")
                old = ledger.get(op)
                if old and old["payload"] != payload:
                    return finish("stopped", "operation_conflict")
                if old and old["state"] not in ("committed", "not_committed"):
                    return finish("needs_reconciliation", "unknown_commit")
            cached = bool(old) and old["state"] == "committed"
            if cached:
                result = old["result"]
            else:
                fp = f"{payload}@{state['revision']}"
                seen = repetitions.get(fp, 0)
                if seen >= 2:
                    return finish("stopped", "same_call")
                if budget["tools"] >= budget["maxTools"]:
                    return finish("stopped", "tool_budget")
                repetitions[fp] = seen + 1
                budget["tools"] += 1
                if write:
                    ledger[call["operation_id"]] = {"payload": payload, "state": "unknown"}
                try:
                    result = execute(call)
                except Exception:
                    return finish("needs_reconciliation" if write else "stopped", "executor_exception")
            if not js_truthy(result) or get(result, "status") not in ("ok", "retryable", "fatal", "needs_human"):
                return finish("needs_reconciliation" if write else "stopped", "invalid_result")
            try:
                checked = verify(call, result)
            except Exception:
                checked = None
            status = get(result, "status")
            if (
                not js_truthy(checked)
                or not is_safe_integer(get(checked, "revision"))
                or get(checked, "revision") < state["revision"]
                or not isinstance(get(checked, "done"), bool)
                or get(checked, "effect") not in ("none", "committed", "not_committed", "unknown")
                or (get(checked, "done") and status != "ok")
            ):
                return finish("needs_reconciliation" if write else "stopped", "invalid_evidence")
            effect = get(checked, "effect")
            if write:
                if (
                    effect not in ("committed", "not_committed")
                    or (cached and effect != "committed")
                    or (get(checked, "done") and effect != "committed")
                ):
                    return finish("needs_reconciliation", "unknown_commit")
                ledger[call["operation_id"]] = {"payload": payload, "state": effect, "result": result}
            if now() >= budget["deadline"]:
                return finish("stopped", "deadline")
            if status == "fatal":
                return finish("stopped", "fatal")
            if status == "needs_human":
                return finish("needs_human", "approval")
            if status == "ok":
                state["last_good"] = result
            if get(checked, "revision") > state["revision"]:
                state["revision"] = int(get(checked, "revision"))
                state["idle"] = 0
            else:
                state["idle"] += 1
            if get(checked, "done"):
                return finish("completed", "validated_done", result)
            if status == "retryable" and write and effect != "not_committed":
                return finish("needs_reconciliation", "retry_after_commit")
            if state["idle"] >= 3:
                return finish("stopped", "no_progress")
        return finish("partial", "plan_exhausted")

    return run
