"""``loopguard mcp`` with real parts: the proxy and a FastMCP-style upstream (mcp 2's ``MCPServer``) as OS processes,
the ``mcp`` package's own client, the store on a SQLite file (the proxy's default; several activations sharing one
task: on PostgreSQL, the store for many workers). Side effects are counted at the upstream (its log of received
calls, its receiver's ledger of effects), never by our counters alone. That each store keeps the rules the proxy
relies on is the store contract's (tests/test_store_contract.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client

from agents_loopguard.ops import operator
from agents_loopguard.store import SQLStore
from tests.support import forked
from tests.support.cli import in_process
from tests.support.mcp_upstream import read_lines

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # the proxy and its upstream are processes: each client session starts both


@pytest.fixture
def sql_url(tmp_path: Path) -> str:
    """The proxy's store: a SQLite file (its default), one per test."""
    return f"sqlite:///{tmp_path / 'loopguard.db'}"


PAY = '[tools.refund]\nkind = "write"\n\n[tools.pay]\nkind = "write"\noperation_id = "pay-{invoice}"\n'


def write_config(
    folder: Path,
    *,
    upstream: tuple[str, ...] = (),
    task: str = 'by = "fixed"\nid = "payments-run"',
    budget: int = 6,
    tools: str = PAY,
    unguarded: tuple[str, ...] = ("lookup",),
) -> Path:
    command = [sys.executable, "-m", "tests.support.mcp_upstream", "--log", str(folder / "calls.jsonl")]
    command += ["--effects", str(folder / "effects.jsonl"), *upstream]
    opted_out = ", ".join(f'{name} = "an invoice lookup"' for name in unguarded)
    text = (
        f'[upstream]\ncommand = {json.dumps(command)}\nname = "payments"\ntrusted = true\n'
        f"unguarded = {{ {opted_out} }}\n\n"
        f"[task]\n{task}\n\n[budget]\ntool_executions = {budget}\n\n"
        f"{tools}"
    )
    path = folder / "proxy.toml"
    path.write_text(text, encoding="utf-8")
    return path


def proxy(config: Path, url: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    """The proxy as an MCP client starts it: a command speaking MCP on its stdio."""
    args = ["-m", "agents_loopguard", "--db", url, "mcp", str(config)]
    environment = {**get_default_environment(), **(env or {})}
    return StdioServerParameters(command=sys.executable, args=args, env=environment, cwd=str(REPO))


async def calls(
    config: Path, url: str, sequence: list[tuple[str, dict[str, Any]]], env: dict[str, str] | None = None
) -> list[tuple[bool, str]]:
    """One client session through the proxy: each call's (is_error, text)."""
    answers = []
    async with Client(proxy(config, url, env), cache=None) as client:
        for name, args in sequence:
            result = await client.call_tool(name, args)
            text = "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")
            answers.append((bool(result.is_error), text))
    return answers


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def task_of(url: str, task_id: str) -> dict[str, Any]:
    """The task as an operator sees it (``loopguard show``): status, reason, counters, operations."""
    with SQLStore(url) as store:
        view = operator.task_view(store, task_id)
    task = view["task"]
    return {**task, "tools_used": task["used"]["tools"], "operations": view["operations"]}


def test_a_lost_answer_never_sends_the_payment_twice(tmp_path: Path, sql_url: str) -> None:
    """The body records the payment, then loses its answer: the same payment asked again is refused (R19)."""
    config = write_config(tmp_path, upstream=("--lose", "1"))
    pay = ("pay", {"invoice": "INV-7", "amount": 120})
    answers = run(calls(config, sql_url, [pay, pay, pay]))
    effects = read_lines(tmp_path / "effects.jsonl")
    assert [e["tool"] for e in effects] == ["pay"]
    assert all(error for error, _ in answers)
    assert "unknown" in answers[1][1]
    view = task_of(sql_url, "payments-run")
    assert (view["status"], view["reason"]) == ("needs_reconciliation", "unknown_commit")
    assert len(read_lines(tmp_path / "calls.jsonl")) == view["tools_used"] == 1


def test_r20_a_lost_answer_the_receiver_has_is_settled_by_the_tools_probe(tmp_path: Path, sql_url: str) -> None:
    """``probe = "package.module:function"`` in the proxy's TOML: the payment's answer is lost, the probe finds it in
    the receiver's ledger, the client gets the payment's result, and the payment was made once (R20)."""
    probe = 'probe = "tests.support.mcp_probes:paid"\n'
    config = write_config(tmp_path, upstream=("--lose", "1"), tools=PAY + probe)
    pay = ("pay", {"invoice": "INV-8", "amount": 120})
    env = {"MCP_EFFECTS": str(tmp_path / "effects.jsonl"), "PYTHONPATH": str(REPO)}
    (error, text), (again_error, again) = run(calls(config, sql_url, [pay, pay], env))
    assert not error and "pay done" in text and not again_error and again == text
    assert [e["tool"] for e in read_lines(tmp_path / "effects.jsonl")] == ["pay"]
    assert len(read_lines(tmp_path / "calls.jsonl")) == 1
    view = task_of(sql_url, "payments-run")
    assert [(o["operation_id"], o["state"]) for o in view["operations"]] == [("pay-INV-8", "committed")]
    with SQLStore(sql_url) as store:
        assert [(t.kind, t.who) for t in store.transitions("payments-run")] == [("reconcile", "probe:pay")]


def test_a_stubborn_client_repeating_a_call_is_cut_after_the_allowed_repeats(tmp_path: Path, sql_url: str) -> None:
    config = write_config(tmp_path)
    search = ("search", {"query": "overdue"})
    answers = run(calls(config, sql_url, [search] * 6))
    received = read_lines(tmp_path / "calls.jsonl")
    assert len(received) == 2, received
    assert [error for error, _ in answers] == [False, False, True, True, True, True]
    assert "same call" in answers[2][1] or "same_call" in answers[2][1]
    assert task_of(sql_url, "payments-run")["tools_used"] == len(received)


ACTIVATION = """
import asyncio, json, sys
from tests.test_mcp_proxy import calls
from pathlib import Path
config, url, n = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
sequence = [("search", {"query": f"activation {n} step {i}"}) for i in range(2)]
print(json.dumps(asyncio.run(calls(config, url, sequence))))
"""


@pytest.mark.postgres
def test_three_n8n_activations_share_one_tasks_tool_budget(tmp_path: Path, pg_schema_url: str) -> None:
    """The article's n8n case: a Tools Agent's Max Iterations restarts with every activation; behind the proxy the
    three activations (three client processes, each with its own proxy process) spend one task's budget, on
    PostgreSQL, the store for many workers."""
    sql_url = pg_schema_url
    config = write_config(tmp_path, budget=4)
    processes = [
        forked.ForkedPopen(
            [sys.executable, "-c", ACTIVATION, str(config), sql_url, str(n)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(3)
    ]
    answers = [json.loads(p.communicate(timeout=90)[0]) for p in processes]
    received = read_lines(tmp_path / "calls.jsonl")
    refused = [text for answer in answers for error, text in answer if error]
    assert len(received) == 4
    assert len(refused) == 2 and all("tool" in text and "budget" in text for text in refused), refused
    assert len({entry["ppid"] for entry in received}) >= 2  # more than one proxy process served them
    view = task_of(sql_url, "payments-run")
    assert view["tools_used"] == 4
    assert (view["status"], view["reason"]) == ("stopped", "tool_budget")  # concluded, not left running


def test_an_upstream_that_dies_mid_call_leaves_the_write_unknown_and_never_resends_it(
    tmp_path: Path, sql_url: str
) -> None:
    config = write_config(tmp_path, upstream=("--die", "pay"))
    pay = ("pay", {"invoice": "INV-9", "amount": 40})
    answers = run(calls(config, sql_url, [pay, pay]))
    assert [e["tool"] for e in read_lines(tmp_path / "effects.jsonl")] == ["pay"]
    assert all(error for error, _ in answers)
    view = task_of(sql_url, "payments-run")
    assert view["status"] == "needs_reconciliation"
    assert [op["state"] for op in view["operations"]] == ["unknown"]


def test_a_killed_proxy_restarted_keeps_the_unknown_write_unknown(tmp_path: Path, sql_url: str) -> None:
    config = write_config(tmp_path, upstream=("--slow", "10"))
    pay = ("pay", {"invoice": "INV-3", "amount": 75})

    async def killed() -> None:
        async with Client(proxy(config, sql_url), cache=None) as client:
            call = asyncio.ensure_future(client.call_tool(*pay))
            deadline = time.monotonic() + 30
            while not read_lines(tmp_path / "effects.jsonl") and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            os.kill(read_lines(tmp_path / "calls.jsonl")[0]["ppid"], signal.SIGKILL)  # the proxy, mid-call
            with pytest.raises(Exception):  # noqa: B017 - whatever the client reports of a server that vanished
                await asyncio.wait_for(call, 30)

    try:
        run(killed())
    except BaseException as exc:  # the client's own teardown may report the dead server
        if not isinstance(exc, Exception):
            raise
    after = run(calls(config, sql_url, [pay]))
    assert [e["tool"] for e in read_lines(tmp_path / "effects.jsonl")] == ["pay"]
    assert after[0][0] and "unknown" in after[0][1]
    assert [op["state"] for op in task_of(sql_url, "payments-run")["operations"]] == ["unknown"]


def test_an_undeclared_write_stops_the_proxy_at_start_with_the_declaration_to_add(tmp_path: Path) -> None:
    config = write_config(tmp_path, unguarded=())
    url = f"sqlite:///{tmp_path / 'store.db'}"
    done = forked.run(
        [sys.executable, "-m", "agents_loopguard", "--db", url, "mcp", str(config)],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "MCP tool 'lookup' (server 'payments') is not declared" in done.stderr
    assert "Add [tools.lookup]" in done.stderr
    assert read_lines(tmp_path / "calls.jsonl") == []


def test_a_tool_the_server_adds_later_is_judged_like_the_first_ones(tmp_path: Path, sql_url: str) -> None:
    config = write_config(tmp_path, upstream=("--grow",))
    wire = ("wire_transfer", {"account": "DE00", "amount": 900})

    async def session() -> tuple[list[str], list[str], tuple[bool, str]]:
        async with Client(proxy(config, sql_url), cache=None) as client:
            before = [t.name for t in (await client.list_tools()).tools]
            await client.call_tool("search", {"query": "x"})
            after = [t.name for t in (await client.list_tools()).tools]
            result = await client.call_tool(*wire)
            return before, after, (bool(result.is_error), result.content[0].text)

    before, after, (error, text) = run(session())
    assert "wire_transfer" not in before and "wire_transfer" in after
    assert error and "MCP tool 'wire_transfer' (server 'payments') is not declared" in text
    assert [e["tool"] for e in read_lines(tmp_path / "effects.jsonl")] == []


def test_hostile_arguments_are_refused_before_the_upstream_sees_them(tmp_path: Path, sql_url: str) -> None:
    """Arguments nested deeper than the MCP library parses get an answer (the library alone drops the request and
    the client waits forever), and a write whose arguments do not name its operation is refused; the upstream
    receives neither."""
    config = write_config(tmp_path)
    deep: Any = "x"
    for _ in range(210):  # deeper than canonical JSON allows (200), within what the client can send
        deep = {"d": deep}
    answers = run(calls(config, sql_url, [("search", {"query": deep}), ("pay", {"amount": 5})]))
    assert all(error for error, _ in answers)
    assert "could not read this request" in answers[0][1]  # answered: the MCP library alone drops it (a hang)
    assert "operation" in answers[1][1]  # a write whose arguments do not name its operation
    assert [c["tool"] for c in read_lines(tmp_path / "calls.jsonl")] == []


def test_an_approval_waits_then_the_approved_call_runs_once(tmp_path: Path, sql_url: str) -> None:
    config = write_config(tmp_path, tools=PAY + "approval = true\n")
    pay = ("pay", {"invoice": "INV-5", "amount": 10})
    first = run(calls(config, sql_url, [pay, pay]))
    assert all(error and "waits for an operator's approval" in text for error, text in first)
    assert read_lines(tmp_path / "effects.jsonl") == []
    pause_id = first[0][1].split("(pause ")[1].split(")")[0]
    approved = in_process(["--db", sql_url, "approve", pause_id, "--who", "ana"])  # the operator, in this process
    assert approved.returncode == 0, approved.stderr
    later = run(calls(config, sql_url, [pay]))
    assert later[0] == (False, 'pay done: {"amount": 10, "invoice": "INV-5"}')
    again = run(calls(config, sql_url, [pay]))  # committed: the ledger answers it, no new approval is asked
    assert again == later
    assert [e["tool"] for e in read_lines(tmp_path / "effects.jsonl")] == ["pay"]


# --- which task a call runs under ---------------------------------------------------------------------------


def tasks_named(url: str, prefix: str) -> dict[str, int]:
    """Task id -> tool executions used, for the tasks whose id starts with ``prefix``."""
    with SQLStore(url) as store:
        return {t.task_id: t.used.tools for t in store.tasks() if t.task_id.startswith(prefix)}


def test_task_by_argument_each_conversation_its_own_task_and_the_upstream_never_sees_the_argument(
    tmp_path: Path, sql_url: str
) -> None:
    config = write_config(tmp_path, task='by = "argument"\nargument = "conversation"')

    async def session() -> tuple[list[str], list[tuple[bool, str]]]:
        async with Client(proxy(config, sql_url), cache=None) as client:
            listed = (await client.list_tools()).tools
            required = [t.name for t in listed if "conversation" in (t.input_schema.get("required") or [])]
        return required, await calls(
            config,
            sql_url,
            [
                ("search", {"query": "a1", "conversation": "A"}),
                ("search", {"query": "a2", "conversation": "A"}),
                ("search", {"query": "b1", "conversation": "B"}),
                ("search", {"query": "none"}),
            ],
        )

    required, answers = run(session())
    assert sorted(required) == ["lookup", "pay", "refund", "search"]  # every tool asks the model for it
    assert [error for error, _ in answers] == [False, False, False, True]
    assert "conversation" in answers[3][1]
    assert tasks_named(sql_url, "mcp:payments:") == {"mcp:payments:A": 2, "mcp:payments:B": 1}
    received = read_lines(tmp_path / "calls.jsonl")
    assert [c["args"] for c in received] == [{"query": "a1"}, {"query": "a2"}, {"query": "b1"}]


def test_task_by_session_over_stdio_each_client_session_its_own_task(tmp_path: Path, sql_url: str) -> None:
    config = write_config(tmp_path, task='by = "session"')
    for client in ("first", "second"):
        answers = run(calls(config, sql_url, [("search", {"query": f"{client} {i}"}) for i in range(2)]))
        assert [error for error, _ in answers] == [False, False]
    used = tasks_named(sql_url, "mcp:payments:")
    assert sorted(used.values()) == [2, 2], used  # two sessions, two tasks, each call counted in its own
    assert len(read_lines(tmp_path / "calls.jsonl")) == 4


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def http_proxy(config: Path, url: str) -> Iterator[str]:
    """The proxy as an HTTP service (``--http``): its endpoint until the block ends, then stopped."""
    address = f"127.0.0.1:{free_port()}"
    command = [sys.executable, "-m", "agents_loopguard", "--db", url, "mcp", str(config), "--http", address]
    process = forked.ForkedPopen(command, cwd=REPO, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert "serving" in line, line + process.stderr.read()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the line comes just before uvicorn listens
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", int(address.rsplit(":", 1)[1]))) == 0:
                    break
            time.sleep(0.05)
        yield f"http://{address}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=30)


async def http_calls(
    endpoint: str, headers: dict[str, str], sequence: list[tuple[str, dict[str, Any]]], mode: Any = "auto"
) -> list[tuple[bool, str]]:
    """One client session over streamable HTTP, sending ``headers`` with every request (``mode="legacy"``: the
    handshake-era protocol, whose sessions carry an ``mcp-session-id``)."""
    answers = []
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(endpoint, http_client=http), cache=None, mode=mode) as client,
    ):
        for name, args in sequence:
            result = await client.call_tool(name, args)
            text = "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")
            answers.append((bool(result.is_error), text))
    return answers


def test_task_by_header_each_conversation_header_its_own_task(tmp_path: Path, sql_url: str) -> None:
    config = write_config(tmp_path, task='by = "header"\nheader = "X-Conversation"')
    with http_proxy(config, sql_url) as endpoint:
        a = run(http_calls(endpoint, {"X-Conversation": "A"}, [("search", {"query": f"a{i}"}) for i in range(2)]))
        b = run(http_calls(endpoint, {"X-Conversation": "B"}, [("search", {"query": "b"})]))
        none = run(http_calls(endpoint, {}, [("search", {"query": "none"})]))
    assert [error for error, _ in a + b] == [False, False, False]
    assert none[0][0] and "X-Conversation" in none[0][1]
    assert tasks_named(sql_url, "mcp:payments:") == {"mcp:payments:A": 2, "mcp:payments:B": 1}
    assert len(read_lines(tmp_path / "calls.jsonl")) == 3


def test_task_by_session_over_http_one_task_per_client_session_and_a_sessionless_client_is_refused(
    tmp_path: Path, sql_url: str
) -> None:
    """A client that keeps an MCP session (``mcp-session-id``) gets one task per session; a sessionless client
    (each request stands alone) is refused: one task per call would reset its budget with every call."""
    config = write_config(tmp_path, task='by = "session"')
    with http_proxy(config, sql_url) as endpoint:
        for client in ("first", "second"):
            sequence = [("search", {"query": f"{client} {i}"}) for i in range(2)]
            answers = run(http_calls(endpoint, {}, sequence, mode="legacy"))
            assert [error for error, _ in answers] == [False, False]
        sessionless = run(http_calls(endpoint, {}, [("search", {"query": "alone"})]))
    used = tasks_named(sql_url, "mcp:payments:")
    assert sorted(used.values()) == [2, 2], used
    assert sessionless[0][0] and 'by = "header"' in sessionless[0][1]
    assert len(read_lines(tmp_path / "calls.jsonl")) == 4
