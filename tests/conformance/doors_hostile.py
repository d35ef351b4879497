"""Hostile input through every door (issue 26 items 7 and 8): arguments nested 100,000 levels deep or megabytes
long, and credentials where the redaction did not look (a dict's keys, an operation id, the outcome record).

A hostile call is the model's first: the guard must refuse it as ``invalid_call`` and the model must read why
(``on_refusal="continue"``), then the usual shop runs (look order 1 up, refund it, the same refund again,
answer). Nothing of the hostile call may run, and no ``RecursionError`` may end the run.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from agents import Agent
from agents.testing import function_call
from google.adk.agents import LlmAgent
from mcp_types import LATEST_PROTOCOL_VERSION
from sqlalchemy.engine import make_url

from agents_loopguard import Outcome
from agents_loopguard.function_calling import GuardedTool
from agents_loopguard.sdk import run_guarded, run_guarded_streamed
from tests.conformance import doors_adk, doors_langchain, doors_mcp, doors_raw, doors_sdk
from tests.conformance.kit import Door, Env, Observed
from tests.support import forked
from tests.support.mcp_upstream import read_lines
from tests.support.scripted_gemini import RawArgs, Reply
from tests.support.scripted_openai import dynamic, tool_calls
from tests.support.scripted_openai import function_call as wire_call

__all__ = ["DOORS"]

ROOT = Path(__file__).resolve().parents[2]

FINAL = "Refunded order 1."
DEEP = '{"a":' * 100_000 + "1" + "}" * 100_000
"""Arguments nested 100,000 levels deep (Python's JSON parser raises ``RecursionError`` on them)."""
HUGE = json.dumps({"order": 1, "note": "x" * 1_200_000})
"""1.2 million characters of JSON, over the documented bound (``MAX_ARGUMENTS_SIZE``)."""
HOSTILE = {"deep": DEEP, "huge": HUGE}
SAYS = {"deep": "nested deeper than 200 levels", "huge": "over the limit of 1,000,000"}
"""What the model must read about each hostile call."""


def read_refusal(kind: str, seen: list[str]) -> None:
    """The model read why its hostile call was refused (in the request after it)."""
    assert any(SAYS[kind] in text for text in seen), f"the model never read {SAYS[kind]!r}"


# --- raw function calling ---------------------------------------------------------------------------------------


def raw(kind: str, api: str, mode: str) -> Callable[[Env], Observed]:
    def build(env: Env) -> Observed:
        seen: list[str] = []

        def after_refusal(body: dict[str, Any]) -> Any:
            seen.append(json.dumps(body))
            return tool_calls(wire_call("lookup", {"order": 1}, "c1"))

        steps = [
            tool_calls(wire_call("lookup", HOSTILE[kind], "c0")),
            dynamic(after_refusal),
            *doors_raw.script()[1:],
        ]
        observed = doors_raw.loop(env, api, mode, steps, on_refusal="continue")
        if env.variant == "run":
            read_refusal(kind, seen)
        return observed

    return build


# --- credentials where the redaction did not look -------------------------------------------------------------

SECRET = "hunter2-7f3a"
"""A secret the application registers (``secrets=[SECRET]``)."""
SK_KEY = "sk-proj-Q8dLm3vX0aTz9KpW2nRb"
"""A key recognised by its shape."""


def stored_text(env: Env) -> bytes:
    """Everything the store holds, as its bytes: the SQLite file and its log, every PostgreSQL row as text, the
    memory store's state."""
    if env.store_kind == "sqlite":
        assert env.store_url is not None
        db = Path(env.store_url.removeprefix("sqlite:///"))
        return b"".join(p.read_bytes() for p in (db, Path(f"{db}-wal")) if p.exists())
    if env.store_kind == "postgres":
        assert env.store_url is not None
        url = make_url(env.store_url).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(url) as conn:
            query = "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            tables = [name for (name,) in conn.execute(query)]
            assert "loopguard_operations" in tables
            rows = [str(row[0]) for name in tables for row in conn.execute(f'SELECT t::text FROM "{name}" t')]
        return "\n".join(rows).encode()
    return repr(vars(env.store)).encode()


def credentials(env: Env) -> Observed:
    """A registered secret and an ``sk-`` key as an argument's dict keys (redacted), inside a write's operation id
    derived from the arguments (refused: an operation id is a business key, rewriting it could merge two
    operations), and in the result that proves the task done (the outcome's record is redacted with the run's
    secrets). None of them may reach the store, nor the record the application gets."""

    def note(order: int, meta: dict[str, Any]) -> str:
        env.body("note")
        return f"noted {order}"

    def charge(card: str, order: int) -> str:
        env.body("charge", f"charge-{order}")
        return "charged"

    def receipt(order: int) -> str:
        env.body("receipt")
        return f"receipt {order}: paid with {SECRET}, key {SK_KEY}"

    def done(args: Any, output: Any) -> dict[str, Any]:
        return {"revision": 1, "done": True, "effect": "none"}

    tools = [
        GuardedTool("note", note),
        GuardedTool(
            "charge",
            charge,
            kind="write",
            operation_id=lambda a: f"charge-{a['card']}-{a['order']}",
            verify=lambda a, out: {"revision": 1, "done": False, "effect": "committed"},
        ),
        GuardedTool("receipt", receipt, verify=done),
    ]
    steps = [
        tool_calls(wire_call("note", {"order": 1, "meta": {SECRET: "a", SK_KEY: "b", "plain": "visible-5521"}}, "c1")),
        tool_calls(wire_call("charge", {"card": SECRET, "order": 1}, "c2")),
        tool_calls(wire_call("receipt", {"order": 1}, "c3")),
        doors_raw.final_text(FINAL),
    ]
    observed = doors_raw.loop(env, "chat", "sync", steps, tools=tools, on_refusal="continue", secrets=[SECRET])
    assert env.bodies["charge"] == 0, "a write whose operation id holds a credential ran"
    blob = stored_text(env)
    assert b"visible-5521" in blob, "the scan does not see what the store holds"
    leaked = [s for s in (SECRET, SK_KEY) if s.encode() in blob]
    assert leaked == [], f"the {env.store_kind} store holds {leaked}"
    if env.variant == "run":
        assert observed.outcome is not None and observed.outcome.done, observed.outcome
        record = observed.outcome.record().to_json()
        assert SECRET not in record and SK_KEY not in record, record
    return observed


# --- LangChain ------------------------------------------------------------------------------------------------


def langchain(kind: str) -> Callable[[Env], Observed]:
    def build(env: Env) -> Observed:
        seen: list[str] = []

        def after_refusal(body: dict[str, Any]) -> Any:
            seen.append(json.dumps(body))
            return tool_calls(wire_call("lookup", {"order": 1}, "c1"))

        steps = [
            tool_calls(wire_call("lookup", HOSTILE[kind], "c0")),
            dynamic(after_refusal),
            *doors_langchain.script()[1:],
        ]
        observed = doors_langchain.run_agent(env, steps, guard_options={"on_refusal": "continue"})
        if env.variant == "run":
            read_refusal(kind, seen)
        return observed

    return build


# --- Google ADK ------------------------------------------------------------------------------------------------


def adk(kind: str) -> Callable[[Env], Observed]:
    """Deep arguments: ``google-genai`` parses the whole answer before any callback of ADK runs, and cannot (its
    parser raises ``RecursionError``): the answer is unreadable, so the request fails ``model_error`` and the run
    ends with it, no traceback, nothing run (there is no checkpoint: no stop variant). Huge arguments are
    parsed by the client and refused by the guard (``invalid_call``, read by the model)."""

    def build(env: Env) -> Observed:
        seen: list[str] = []

        def after_refusal(body: dict[str, Any]) -> Reply:
            seen.append(json.dumps(body))
            return doors_adk.call("lookup", order=1)

        hostile = RawArgs(DEEP) if kind == "deep" else json.loads(HUGE)
        turns = [Reply(calls=(("lookup", hostile),)), after_refusal, *doors_adk.shop_turns()[1:]]
        with doors_adk.gemini(env, clerk=turns) as models:
            agent = LlmAgent(name="clerk", model=models.model(), tools=doors_adk.shop(env))
            observed = doors_adk.guarded(env, agent, on_refusal="continue")
        if kind == "deep":
            assert observed.outcome is not None
            assert (observed.outcome.status, observed.outcome.reason) == ("stopped", "model_error"), observed.outcome
            assert "could not be read" in (observed.outcome.detail or "")
        elif env.variant == "run":
            read_refusal(kind, seen)
        return observed

    return build


# --- MCP through the Agents SDK ----------------------------------------------------------------------------------


def mcp_sdk(kind: str) -> Callable[[Env], Observed]:
    """An MCP server's tool (a real upstream process) called with hostile arguments through the SDK: refused before
    the upstream hears of it; then the usual search, refund (its answer lost), the same refund again."""

    def build(env: Env) -> Observed:
        upstream = doors_mcp.Upstream(env, "--lose", "1")
        turns = [[function_call("refund", HOSTILE[kind], call_id="c0")], *doors_mcp.twice("refund", {"order_id": 1})]
        model = doors_mcp.scripted(env, upstream, turns)

        async def main() -> Outcome:
            async with upstream.stdio() as server:
                agent = Agent(name="clerk", model=model, mcp_servers=[server])
                declared = {tool: upstream.declare(tool) for tool in ("pay", "refund")}
                options = env.options(
                    mcp_trusted=["payments"],
                    unguarded={"lookup": "a read the test lets run"},
                    tools=declared,
                    on_refusal="continue",
                )
                return await run_guarded(agent, "Refund order 1.", **options)

        outcome = asyncio.run(main())
        upstream.sync(env)
        observed = env.observe(outcome)
        if env.variant == "run":
            read_refusal(kind, [str(call.input) for call in model.calls[1:2]])
        return observed

    return build


# --- the MCP proxy (`loopguard mcp`), a client writing JSON-RPC lines itself ------------------------------------


class RawClient:
    """An MCP client over the proxy's stdio that writes its own lines (no library would write 100,000 levels)."""

    def __init__(self, env: Env, folder: Path, *, approval: bool = False) -> None:
        upstream = [sys.executable, "-m", "tests.support.mcp_upstream", "--log", str(folder / "calls.jsonl")]
        upstream += ["--effects", str(folder / "effects.jsonl")]
        config = folder / "proxy.toml"
        config.write_text(
            f'[upstream]\ncommand = {json.dumps(upstream)}\nname = "payments"\ntrusted = true\n'
            f'unguarded = {{ lookup = "a read the test lets run" }}\n\n'
            f'[task]\nby = "fixed"\nid = "{env.task_id}"\n\n[budget]\n'
            f'tool_executions = {env.budget.tool_executions}\n\n[tools.refund]\nkind = "write"\n\n'
            f'[tools.pay]\nkind = "write"\noperation_id = "pay-{{invoice}}"\n'
            + ("approval = true\n" if approval else ""),
            encoding="utf-8",
        )
        assert env.store_url is not None
        command = [sys.executable, "-m", "agents_loopguard", "--db", env.store_url, "mcp", str(config)]
        self.process = forked.ForkedPopen(
            command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8"
        )
        self.ids = 0
        hello = {"protocolVersion": LATEST_PROTOCOL_VERSION, "capabilities": {}, "clientInfo": {"name": "raw"}}
        self.ask("initialize", json.dumps(hello))
        self.send('{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        self.ask("tools/list", "{}")

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def ask(self, method: str, params: str) -> Any:
        """One request, its ``params`` written verbatim; the answer to it."""
        self.ids += 1
        self.send(f'{{"jsonrpc": "2.0", "id": {self.ids}, "method": "{method}", "params": {params}}}')
        assert self.process.stdout is not None
        while True:
            line = self.process.stdout.readline()
            assert line, "the proxy closed its stdout without answering"
            message = json.loads(line)
            if message.get("id") == self.ids:
                return message

    def call(self, tool: str, arguments: str) -> str:
        """A ``tools/call``: the text the client reads."""
        answer = self.ask("tools/call", f'{{"name": "{tool}", "arguments": {arguments}}}')
        return " ".join(part.get("text", "") for part in answer["result"]["content"])

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


def proxy(kind: str) -> Callable[[Env], Observed]:
    """A client sends ``search`` with hostile arguments, then an ordinary ``search``: the first is refused
    ``invalid_call`` in the task (the client reads why), the upstream receives only the second."""

    def build(env: Env) -> Observed:
        client = RawClient(env, env.tmp_path)
        try:
            hostile = client.call("search", HOSTILE[kind].replace('"order": 1', '"query": "x"'))
            ordinary = client.call("search", '{"query": "order 1"}')
        finally:
            client.close()
        assert SAYS[kind] in hostile and "invalid_call" in hostile, hostile
        assert "order 1" in ordinary, ordinary
        received = [line["tool"] for line in read_lines(env.tmp_path / "calls.jsonl")]
        env.bodies.update(received)
        refused = [e for e in env.store.trace(env.task_id) if e.result_class == "refused:invalid_call"]
        assert len(refused) == 1, "the hostile call is not in the task's trace as invalid_call"
        return env.observe(None)

    return build


def proxy_credential(env: Env) -> Observed:
    """An approval-gated write whose operation id (``pay-{invoice}``) would hold an ``sk-`` key: refused before
    any pause is stored (a pause shows its calls' operation ids to operators), recorded nowhere."""
    client = RawClient(env, env.tmp_path, approval=True)
    try:
        answer = client.call("pay", json.dumps({"invoice": SK_KEY, "amount": 5}))
    finally:
        client.close()
    assert "holds a credential" in answer, answer
    assert read_lines(env.tmp_path / "calls.jsonl") == []
    assert env.store.pauses(env.task_id) == [], "a pause was stored"
    blob = stored_text(env)
    assert env.task_id.encode() in blob and SK_KEY.encode() not in blob, f"the {env.store_kind} store holds the key"
    return env.observe(None)


# --- the Agents SDK -------------------------------------------------------------------------------------------


def sdk(kind: str, *, streamed: bool = False) -> Callable[[Env], Observed]:
    def build(env: Env) -> Observed:
        script = [[function_call("lookup", HOSTILE[kind], call_id="c0")], *doors_sdk.turns()]
        (model,) = doors_sdk.models(env, script)
        agent = Agent(name="clerk", model=model, tools=list(doors_sdk.shop(env)))
        options = env.options(on_refusal="continue")

        async def main() -> Outcome:
            if not streamed:
                return await run_guarded(agent, "Refund order 1.", **options)
            stream = run_guarded_streamed(agent, "Refund order 1.", **options)
            async for _event in stream.stream_events():
                pass
            return await stream.outcome()

        observed = env.observe(asyncio.run(main()))
        if env.variant == "run":
            read_refusal(kind, [str(call.input) for call in model.calls[1:2]])
        return observed

    return build


def door(framework: str, name: str, doc: str, build: Callable[[Env], Observed], **more: Any) -> Door:
    return Door(framework, name, doc, build, **{"final": FINAL, **more})


DOORS = [
    door(
        "raw",
        "credentials-in-keys-and-operation-ids",
        "a secret as an argument's dict key, inside a write's operation id, in the proving result",
        credentials,
        final=None,
    ),
    door("raw", "deep-arguments", "arguments nested 100,000 levels deep (`invalid_call`)", raw("deep", "chat", "sync")),
    door(
        "raw",
        "huge-arguments",
        "arguments over 1,000,000 characters of JSON (`invalid_call`)",
        raw("huge", "responses", "async"),
    ),
    door("langchain", "deep-arguments", "arguments nested 100,000 levels deep (`invalid_call`)", langchain("deep")),
    door(
        "langchain", "huge-arguments", "arguments over 1,000,000 characters of JSON (`invalid_call`)", langchain("huge")
    ),
    door(
        "adk",
        "deep-arguments",
        "arguments nested 100,000 levels deep (the client cannot read the answer: `model_error`)",
        adk("deep"),
        final=None,
        stop_at=None,
    ),
    door("adk", "huge-arguments", "arguments over 1,000,000 characters of JSON (`invalid_call`)", adk("huge")),
    door(
        "mcp",
        "sdk-deep-arguments",
        "an SDK MCP tool called with arguments nested 100,000 levels deep (`invalid_call`)",
        mcp_sdk("deep"),
        final=doors_mcp.FINAL,
        stop_at=2,
    ),
    door(
        "mcp",
        "proxy-deep-arguments",
        "`loopguard mcp`: a client sends arguments nested 100,000 levels deep (`invalid_call`)",
        proxy("deep"),
        final=None,
        stores=("sqlite", "postgres"),
        stop_at=None,
    ),
    door(
        "mcp",
        "proxy-huge-arguments",
        "`loopguard mcp`: a client sends arguments over 1,000,000 characters of JSON (`invalid_call`)",
        proxy("huge"),
        final=None,
        stores=("sqlite", "postgres"),
        stop_at=None,
    ),
    door(
        "mcp",
        "proxy-credential-operation-id",
        "`loopguard mcp`: an approval-gated write whose operation id would hold an `sk-` key",
        proxy_credential,
        final=None,
        stores=("sqlite", "postgres"),
        stop_at=None,
    ),
    door("sdk", "deep-arguments", "arguments nested 100,000 levels deep (`invalid_call`)", sdk("deep")),
    door(
        "sdk",
        "deep-arguments-streamed",
        "arguments nested 100,000 levels deep in a streamed run (`invalid_call`)",
        sdk("deep", streamed=True),
    ),
    door("sdk", "huge-arguments", "arguments over 1,000,000 characters of JSON (`invalid_call`)", sdk("huge")),
]
