"""The refund case every durable engine's tests run (DBOS, Restate, Temporal), in one place.

The worker side (a process the test SIGKILLs): the kill points (:class:`Kills`), the refund's one real side effect
and its verify (:class:`Refunds`: a line per body run in ``writes.log``), the model's kill points
(:class:`KillInStep`, :class:`Points`, :func:`model_client`) and the result dict a worker prints or returns
(:func:`result`). The test side: the scripted model (:func:`answer`), the order a request is for (:func:`order_of`),
the requests and the writes counted (:func:`requests_by_order`, :func:`writes`).

Kill points, in the order a refund run reaches them:

* ``before-model-2``: before the second model turn is reserved (the run hook ``on_llm_start``);
* ``reserved``: the second model turn reserved, its request about to leave (the HTTP client's request hook);
* ``in-model-step``: the first response arrived, inside the engine's model step, before the engine recorded it;
* ``after-model-1``: the first model step recorded (the run hook ``on_llm_end``);
* ``in-step``: inside the tool body's own journaled step, after its write, before the engine recorded the step;
* ``in-tool``: inside the tool body, after its write (after its journaled step returned, for a journaled body);
* ``in-verify``: between the write and its verify.
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from agents import RunHooks
from agents.models.interface import Model
from openai import AsyncOpenAI

from agents_loopguard.values.probes import committed, not_committed
from tests.support.scripted_openai import JSON, ScriptedOpenAIServer, Step, final_text, stall, tool_call

KILL_POINTS = ("before-model-2", "reserved", "in-model-step", "after-model-1", "in-step", "in-tool", "in-verify")
ENDS = {  # kill point -> how the run ends once the engine recovered it
    "before-model-2": ("completed", "validated_done"),
    "reserved": ("completed", "validated_done"),
    "in-model-step": ("completed", "validated_done"),
    "after-model-1": ("completed", "validated_done"),
    "in-step": ("needs_reconciliation", "unknown_commit"),
    "in-tool": ("needs_reconciliation", "unknown_commit"),
    "in-verify": ("needs_reconciliation", "unknown_commit"),
}
UNSENT = {"reserved": 1}
"""Kill points that leave a model turn reserved whose request never left (R1: reserved before the call): the task's
model turns are the requests the server received plus this."""
LOOKUPS = 12
"""Pages a lookup run reads before it answers (when it is allowed to): 13 model turns."""


class Kills:
    """SIGKILL this process at a named point, the first time a tag reaches it (a marker file per tag: never in the
    process that recovers the run). ``arm`` names the current run's point and tag."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.point = self.tag = ""

    def arm(self, point: str, tag: str) -> None:
        self.point, self.tag = point or "", tag or ""

    def __call__(self, point: str, tag: str | None = None) -> None:
        tag = self.tag if tag is None else tag
        marker = self.folder / f"killed-{tag}"
        if self.point == point and tag and not marker.exists():
            marker.write_text(point)
            os.kill(os.getpid(), signal.SIGKILL)


class Refunds:
    """The refund's one real side effect (a line ``refund-<order>`` appended to ``writes.log`` per body run) and the
    verify that asks it, not the model."""

    def __init__(self, folder: Path, kills: Kills) -> None:
        self.log, self.kills = folder / "writes.log", kills

    def write(self, order: int) -> str:
        """The write itself (inside the body's journaled step, for a journaled body): ``in-step`` after it."""
        with self.log.open("a") as log:
            log.write(f"refund-{order}\n")
        self.kills("in-step")
        return f"refunded order {order}"

    def probe(self, operation_id: str, args: dict[str, Any]) -> Any:
        """The receiver asked by the operation id, read-only (a tool's ``probe``): does the log hold the refund?"""
        held = operation_id in (self.log.read_text().split() if self.log.exists() else [])
        if not held:
            return not_committed(evidence=f"no {operation_id} in the log")
        return committed(f"refunded order {args['order']}", evidence=f"{operation_id} in the log (pid {os.getpid()})")

    def verify(self, args: dict[str, Any], output: Any) -> dict[str, Any]:
        self.kills("in-verify")
        done = f"refund-{args['order']}" in (self.log.read_text().split() if self.log.exists() else [])
        return {"revision": 1 if done else 0, "done": done, "effect": "committed" if done else "not_committed"}


def operation_id(args: dict[str, Any]) -> str:
    """The refund's business operation: the order."""
    return f"refund-{args['order']}"


def result(outcome: Any, **extra: Any) -> dict[str, Any]:
    """What a worker reports of a run: its outcome's status, reason and counters, and the process that ended it."""
    return {
        "status": str(outcome.status),
        "reason": str(outcome.reason),
        "models": outcome.used.models,
        "tools": outcome.used.tools,
        "pid": os.getpid(),
        "pause_id": outcome.pause_id,
        **extra,
    }


class KillInStep(Model):
    """The real model, and the kill point ``in-model-step`` after its first response arrived (inside the engine's
    model step, before the engine records it)."""

    def __init__(self, inner: Model, kills: Kills) -> None:
        self.inner, self.kills = inner, kills
        self.model = getattr(inner, "model", None)

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        response = await self.inner.get_response(*args, **kwargs)
        self.kills("in-model-step")
        return response

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class Points(RunHooks[Any]):
    """The kill points ``before-model-2`` and ``after-model-1``, from the run's hooks."""

    def __init__(self, kills: Kills) -> None:
        self.kills = kills
        self.starts = self.ends = 0

    async def on_llm_start(self, *args: Any) -> None:
        self.starts += 1
        if self.starts == 2:
            self.kills("before-model-2")

    async def on_llm_end(self, *args: Any) -> None:
        self.ends += 1
        if self.ends == 1:
            self.kills("after-model-1")


def model_client(base_url: str, kills: Kills) -> AsyncOpenAI:
    """The real ``openai`` client, no retries, with the kill point ``reserved``: the second request of the armed
    run is about to leave (its turn was reserved before the client was called)."""
    sent: Counter[str] = Counter()

    async def leaving(request: httpx.Request) -> None:
        sent[kills.tag] += 1
        if sent[kills.tag] == 2:
            kills("reserved")

    http = httpx.AsyncClient(event_hooks={"request": [leaving]})
    return AsyncOpenAI(base_url=base_url, api_key="test", max_retries=0, http_client=http)


# --- the test side ---------------------------------------------------------------------------------------------


def order_of(body: JSON) -> int:
    """The order a model request is about (the user's message names it)."""
    text = json.dumps(body.get("messages", []))
    found = re.search(r"(?:refund|lookup) order (\d+)", text)
    assert found, f"a request without its order: {text[:200]}"
    return int(found.group(1))


def answer(body: JSON, *, lookups: int | None = LOOKUPS, pace: float = 0.0) -> Step:
    """The scripted model: refund the order the user names, then answer once the tool's output is in the
    conversation; asked to look an order up, it reads ``lookups`` pages (``None``: it never stops), each answer
    after ``pace`` seconds."""
    messages = body.get("messages", [])
    read = sum(message.get("role") == "tool" for message in messages)
    if "lookup order" in json.dumps(messages):
        done = lookups is not None and read >= lookups
        step = final_text("nothing new") if done else tool_call("lookup", {"order": order_of(body), "page": read})
        return stall(pace, step) if pace else step
    if read:
        return final_text("refunded")
    return tool_call("refund", {"order": order_of(body)})


def requests_by_order(server: ScriptedOpenAIServer) -> Counter[int]:
    """The requests the scripted server received, by order."""
    bodies = [request.body for request in server.requests]
    assert all(isinstance(body, dict) for body in bodies), [r.path for r in server.requests if not r.body]
    return Counter(order_of(body) for body in bodies if isinstance(body, dict))


def writes(folder: Path) -> Counter[str]:
    """The refund bodies that ran, by operation."""
    log = folder / "writes.log"
    return Counter(log.read_text().split()) if log.exists() else Counter()
