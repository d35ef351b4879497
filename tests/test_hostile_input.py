"""Hostile input (issue 26 items 7 and 8), on open-ended inputs: arguments are read within their bounds whatever
text a model sends, and credentials used as keys or inside operation ids never pass through redaction.

The conformance rows (tests/conformance/doors_hostile.py) walk each adapter's door; these properties hold the
values-level functions they all rely on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

from agents import Agent, set_tracing_disabled
from agents.testing import ScriptedModel, function_call
from google.adk.agents import LlmAgent
from google.adk.models.google_llm import Gemini
from hypothesis import given, settings
from hypothesis import strategies as st

from agents_loopguard import Budget
from agents_loopguard.adk import guarded_tool as adk_guarded_tool
from agents_loopguard.adk import run_guarded as adk_run_guarded
from agents_loopguard.run.declarations import parse_arguments
from agents_loopguard.sdk import guarded_tool, run_guarded
from agents_loopguard.store import SQLStore
from agents_loopguard.values.arguments import (
    MAX_ARGUMENTS_DEPTH,
    MAX_ARGUMENTS_SIZE,
    ArgumentsRefused,
    arguments_problem,
    load_arguments,
    screened_arguments,
)
from agents_loopguard.values.canonical import REDACTED, operation_id_problem, redact
from tests.support.adk import GEMINI
from tests.support.scripted_gemini import Reply, ScriptedGeminiServer
from tests.support.wire import gemini_http_options

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)
TRICKY = st.text(alphabet='[]{}"\\:,a ', max_size=60)
"""Strings full of what a bracket counter could mistake for nesting (brackets, quotes, escapes)."""


def nested(openers: list[str], key: str) -> str:
    """JSON text nested ``len(openers)`` levels deep, built without recursion; every object key is ``key``."""
    head = "".join("[" if kind == "array" else "{" + json.dumps(key) + ":" for kind in openers)
    tail = "".join("]" if kind == "array" else "}" for kind in reversed(openers))
    return head + json.dumps(key) + tail


@settings(max_examples=60, deadline=None)
@given(openers=st.lists(st.sampled_from(["array", "object"]), min_size=1, max_size=600), key=TRICKY)
def test_depth_is_counted_right_whatever_the_strings_hold(openers: list[str], key: str) -> None:
    """Brackets inside strings (escaped quotes included) never count: the text is refused exactly when it nests
    deeper than the bound, and what is within it parses as ``json.loads`` would."""
    text = nested(openers, key)
    problem = arguments_problem(text)
    if len(openers) > MAX_ARGUMENTS_DEPTH:
        assert problem == f"nested deeper than {MAX_ARGUMENTS_DEPTH} levels"
    else:
        assert problem is None
        assert load_arguments(text) == json.loads(text)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=400) | TRICKY)
def test_any_text_is_parsed_or_refused_never_a_crash(text: str) -> None:
    """Whatever a model sends as arguments: a dict, or a sentence saying why not (never an exception)."""
    parsed = parse_arguments("lookup", text)
    assert isinstance(parsed, (dict, str))
    with contextlib.suppress(ValueError):  # ArgumentsRefused is one: the refusal or not JSON, never RecursionError
        load_arguments(text)


@settings(max_examples=30, deadline=None)
@given(depth=st.integers(MAX_ARGUMENTS_DEPTH + 1, 100_000), key=TRICKY)
def test_deep_arguments_are_refused_as_text_and_as_a_parsed_mapping(depth: int, key: str) -> None:
    text = nested(["object"] * depth, key)
    why = (  # the size is measured first: a text over both bounds is refused for its size
        f"{len(text):,} characters of JSON, over the limit of 1,000,000"
        if len(text) > MAX_ARGUMENTS_SIZE
        else f"nested deeper than {MAX_ARGUMENTS_DEPTH} levels"
    )
    assert parse_arguments("lookup", text) == f"the arguments for 'lookup' are refused: {why}"
    value: Any = "leaf"
    for _ in range(min(depth, 5_000)):  # a framework parsed it (deeper than Python's own parser goes)
        value = {key: value}
    assert arguments_problem(value) == f"nested deeper than {MAX_ARGUMENTS_DEPTH} levels"


@settings(max_examples=50, deadline=None)
@given(value=JSON_VALUES)
def test_ordinary_arguments_pass_untouched(value: Any) -> None:
    """Arguments within the bounds are what they were: the screen hands a framework the same text."""
    text = json.dumps({"value": value})
    assert arguments_problem(text) is None
    assert screened_arguments(text) is text
    assert parse_arguments("lookup", text) == {"value": value}
    assert parse_arguments("lookup", {"value": value}) == {"value": value}


def test_the_size_bound_is_the_documented_one_in_text_and_in_a_mapping() -> None:
    within = json.dumps({"note": "x" * (MAX_ARGUMENTS_SIZE - 20)})
    beyond = json.dumps({"note": "x" * MAX_ARGUMENTS_SIZE})
    assert arguments_problem(within) is None
    assert arguments_problem(beyond) == f"{len(beyond):,} characters of JSON, over the limit of 1,000,000"
    assert arguments_problem(json.loads(beyond)) is not None
    try:
        load_arguments(screened_arguments(beyond))
    except ArgumentsRefused as refused:
        assert "over the limit of 1,000,000" in str(refused)
    else:
        raise AssertionError("the screened text was read as arguments")


# --- credentials as keys and inside operation ids -----------------------------------------------------------

SECRETS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=6, max_size=16)


@settings(max_examples=100, deadline=None)
@given(secret=SECRETS, keys=st.lists(st.text(max_size=10), max_size=5), prefix=st.text(max_size=5), data=st.data())
def test_a_secret_used_as_a_key_never_survives_and_no_value_is_lost(
    secret: str, keys: list[str], prefix: str, data: st.DataObject
) -> None:
    args: dict[str, Any] = {key: n for n, key in enumerate(keys)}
    args[prefix + secret] = "kept"
    args[secret] = {secret + "x": 1}
    cleaned = redact(args, secrets=[secret])
    assert secret not in json.dumps(cleaned)
    assert len(cleaned) == len(args)  # two keys redacted alike are still two
    assert redact(cleaned, secrets=[secret]) == cleaned  # idempotent
    key = data.draw(st.sampled_from(["sk-" + secret * 2, "sk-proj-" + secret + "AbC123xyz"]))
    assert key not in json.dumps(redact({key: 1, "plain": 2}))


@settings(max_examples=100, deadline=None)
@given(secret=SECRETS, before=st.from_regex(r"[a-z]{1,8}-", fullmatch=True), order=st.integers(0, 10**6))
def test_an_operation_id_holding_a_credential_is_refused_and_a_business_key_is_not(
    secret: str, before: str, order: int
) -> None:
    assert operation_id_problem(f"{before}{order}") is None
    assert operation_id_problem(f"{before}{secret}-{order}", secrets=[secret]) is not None
    assert operation_id_problem(f"{before}sk-{secret}{secret}-{order}") is not None
    assert REDACTED not in (operation_id_problem(f"{before}{secret}", secrets=[secret]) or "")


def test_an_approval_pause_keeps_no_operation_id_that_holds_a_secret(tmp_path: Path) -> None:
    """The Agents SDK pauses a write for approval: its pending call would show the operation id to operators
    (``show``, the console's inbox); one holding a registered secret is not kept. (The pause also stores the
    SDK's ``RunState`` as it is, the conversation with its arguments, to resume: docs/store.md says so.)"""
    set_tracing_disabled(True)
    secret = "hunter2-4c1d"

    @guarded_tool(
        kind="write",
        operation_id=lambda a: f"charge-{a['card']}",
        needs_approval=True,
        verify=lambda a, out: {"revision": 1, "done": True, "effect": "committed"},
    )
    def charge(card: str) -> str:
        """Charge a card."""
        raise AssertionError("an approval-gated write ran before its approval")

    db = tmp_path / "lg.db"
    store = SQLStore(f"sqlite:///{db}")
    model = ScriptedModel([[function_call("charge", {"card": secret}, call_id="c1")]])
    agent = Agent(name="clerk", model=model, tools=[charge])
    options = {"budget": Budget(model_turns=3, tool_executions=3), "store": store, "secrets": [secret]}
    outcome = asyncio.run(run_guarded(agent, "charge it", task_id="t-pause", **options))
    assert outcome.pause_id is not None
    (pending,) = store.pause(outcome.pause_id).pending_calls
    assert pending["tool"] == "charge" and pending["operation_id"] is None
    assert secret not in json.dumps(pending)
    assert [op.operation_id for op in store.operations("t-pause")] == []
    store.close()


def test_an_adk_confirmation_pause_keeps_no_secret(tmp_path: Path) -> None:
    """Google ADK pauses a write for confirmation (``require_confirmation=True``, Gemini over HTTP): neither its
    pending call (arguments, operation id) nor the pause's state holds the registered secret, and the file holds
    none."""
    secret = "hunter2-9e0b"

    def charge(card: str) -> str:
        """Charge a card."""
        raise AssertionError("a write ran before its confirmation")

    tool = adk_guarded_tool(
        charge,
        kind="write",
        operation_id=lambda a: f"charge-{a['card']}",
        verify=lambda a, out: {"revision": 1, "done": True, "effect": "committed"},
        require_confirmation=True,
    )
    db = tmp_path / "lg.db"
    store = SQLStore(f"sqlite:///{db}")
    with ScriptedGeminiServer([Reply(calls=(("charge", {"card": secret}),))]) as server:
        model = Gemini(model=GEMINI, base_url=server.base_url, client_kwargs=gemini_http_options())
        agent = LlmAgent(name="clerk", model=model, tools=[tool])
        options = {"budget": Budget(model_turns=3, tool_executions=3), "store": store, "secrets": [secret]}
        outcome = asyncio.run(adk_run_guarded(agent, "charge it", task_id="t-adk-pause", **options))
    assert outcome.pause_id is not None, outcome
    pause = store.pause(outcome.pause_id)
    (pending,) = pause.pending_calls
    assert pending["tool"] == "charge" and pending["operation_id"] is None
    assert secret not in json.dumps(pending) and secret not in pause.state
    store.close()
    assert secret.encode() not in db.read_bytes()
