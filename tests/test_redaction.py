"""Redaction of credentials in every form the issue found (issue 21, point 5), measured on a corpus of positives and
negatives, and, for generated secrets, checked where it matters: the SQLite file and its log, and ``pg_dump``."""

from __future__ import annotations

import json
import string
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import make_url

from agents_loopguard import Budget, create_runner
from agents_loopguard.store import SQLStore
from agents_loopguard.values.canonical import REDACTED, redact
from tests.conftest import libpq_url
from tests.support.secrets_corpus import NEGATIVES, POSITIVES, Positive

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("case", POSITIVES, ids=[p.text[:40] for p in POSITIVES])
def test_every_credential_of_the_corpus_is_redacted(case: Positive) -> None:
    """Rules: R4 (trace)."""
    out = redact(case.text)
    assert case.secret not in out and REDACTED in out


@pytest.mark.parametrize("text", NEGATIVES)
def test_ordinary_text_is_left_as_it_is(text: str) -> None:
    assert redact(text) == text


def test_a_quoted_value_keeps_its_quotes_and_the_key_stays() -> None:
    assert redact('PASSWORD="hunter 2" user=ana') == f'PASSWORD="{REDACTED}" user=ana'
    assert redact("Authorization: Token abc123def") == f"Authorization: {REDACTED}"
    assert redact('{"user": "ana", "password": "hunter 2"}') == f'{{"user": "ana", "password": "{REDACTED}"}}'


# --- generated secrets in every form ----------------------------------------------------------------------------------

_VALUE_CHARS = string.ascii_letters + string.digits + "!@#%^*-_/+.=:~"
_KEYS = ["PASSWORD", "password", "pwd", "passphrase", "api-key", "x-api-key", "X-Api-Key", "aws_secret_access_key"]
_KEYS += ["client_secret", "DB_PASSWORD", "access_token", "GITHUB_TOKEN", "api_key", "secret"]
_SEPARATORS = ["=", ": ", ":", " = ", " := ", " => "]


def _value(min_size: int = 8, chars: str = _VALUE_CHARS) -> st.SearchStrategy[str]:
    """A secret: a marker the scans find, then random characters."""
    return st.text(chars, min_size=min_size, max_size=24).map(lambda v: f"Zq9{v}")


def _alnum(size: int, chars: str = string.ascii_letters + string.digits) -> st.SearchStrategy[str]:
    return st.text(chars, min_size=size, max_size=size)


@st.composite
def assignment(draw: st.DrawFn) -> tuple[str, str]:
    key, sep = draw(st.sampled_from(_KEYS)), draw(st.sampled_from(_SEPARATORS))
    quote = draw(st.sampled_from(['"', "'", ""]))
    secret = draw(_value(chars=_VALUE_CHARS + (" " if quote else "")))
    return f"{key}{sep}{quote}{secret}{quote}", secret


@st.composite
def header(draw: st.DrawFn) -> tuple[str, str]:
    name = draw(st.sampled_from(["Authorization", "authorization", "Proxy-Authorization"]))
    scheme = draw(st.sampled_from(["Token", "Bearer", "Basic", "Digest"]))
    secret = draw(_value(chars=string.ascii_letters + string.digits + "._~+/-"))
    return f"{name}: {scheme} {secret}", secret


@st.composite
def provider_key(draw: st.DrawFn) -> tuple[str, str]:
    upper = string.ascii_uppercase + string.digits
    word = string.ascii_letters + string.digits + "_"
    secret = draw(
        st.one_of(
            st.builds(lambda p, v: p + v, st.sampled_from(["AKIA", "ASIA"]), _alnum(16, upper)),
            _alnum(36).map(lambda v: f"ghp_{v}"),
            _alnum(82, word).map(lambda v: f"github_pat_{v}"),
            _alnum(24).map(lambda v: f"sk_live_{v}"),
            _alnum(24).map(lambda v: f"rk_live_{v}"),
        )
    )
    return secret, secret


@st.composite
def json_in_a_string(draw: st.DrawFn) -> tuple[str, str]:
    key = draw(st.sampled_from(_KEYS))
    secret = draw(_value(chars=_VALUE_CHARS + " "))
    inner = {"user": "ana", key: secret}
    text = json.dumps(inner) if draw(st.booleans()) else json.dumps({"note": json.dumps(inner)})
    return text, secret


SECRET_FORMS = st.one_of(assignment(), header(), provider_key(), json_in_a_string())
AROUND = st.text(string.ascii_letters + string.digits + " .,;!?()-", max_size=30)


@st.composite
def text_with_a_secret(draw: st.DrawFn) -> tuple[str, str]:
    form, secret = draw(SECRET_FORMS)
    return f"{draw(AROUND)} {form} {draw(AROUND)}", secret


@settings(max_examples=400, deadline=None)
@given(text_with_a_secret())
def test_a_secret_in_any_form_is_redacted_and_redaction_is_idempotent(case: tuple[str, str]) -> None:
    """Rules: R4 (trace)."""
    text, secret = case
    once = redact(text)
    assert secret not in once
    assert redact(once) == once


@settings(max_examples=300, deadline=None)
@given(
    st.text(max_size=80)
    | st.recursive(st.text(max_size=20), lambda c: st.lists(c) | st.dictionaries(st.text(max_size=8), c))
)
def test_redaction_is_idempotent_on_any_value(value: Any) -> None:
    once = redact(value)
    assert redact(once) == once


def _store_everywhere(store: SQLStore, cases: list[tuple[str, str]], task_id: str) -> None:
    """Put every text where a run and an operator put text: a call's arguments, its result, the stop reason."""
    run = create_runner(
        budget=Budget(model_turns=len(cases) + 1, tool_executions=len(cases) + 1),
        store=store,
        task_id=task_id,
        execute=lambda call: {"status": "ok", "echo": call["args"]["text"]},
        verify=lambda call, result: {"revision": call["args"]["n"], "done": False, "effect": "none"},
    )
    for n, (text, _) in enumerate(cases, start=1):
        run([{"tool": "lookup", "kind": "read", "args": {"text": text, "n": n}}])
    store.request_stop(task_id, f"visible-stop-9931 {cases[0][0]}")


CASES = st.lists(text_with_a_secret(), min_size=5, max_size=15)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=CASES)
def test_no_generated_secret_reaches_the_sqlite_file_or_its_log(cases: list[tuple[str, str]], tmp_path: Path) -> None:
    """Rules: R4 (trace)."""
    db = tmp_path / f"lg-{abs(hash(str(cases)))}.db"
    store = SQLStore(f"sqlite:///{db}")
    _store_everywhere(store, cases, "t-gen")
    files = [p for p in (db, Path(f"{db}-wal")) if p.exists()]
    blob = b"".join(p.read_bytes() for p in files)
    assert b"visible-stop-9931" in blob
    assert [s for _, s in cases if s.encode() in blob] == []
    store.close()
    assert [s for _, s in cases if s.encode() in db.read_bytes()] == []


@pytest.mark.postgres
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=CASES)
def test_no_generated_secret_reaches_pg_dump(cases: list[tuple[str, str]], pg_schema_url: str) -> None:
    """Rules: R4 (trace)."""
    task_id = f"t-gen-{abs(hash(str(cases)))}"
    with SQLStore(pg_schema_url) as store:
        _store_everywhere(store, cases, task_id)
    schema = dict(make_url(pg_schema_url).query)["options"].split("=", 1)[1]
    dump = subprocess.run(
        ["pg_dump", "--schema", schema, libpq_url(pg_schema_url).split("?")[0]],
        check=True,
        capture_output=True,
        timeout=60,
    ).stdout
    assert b"visible-stop-9931" in dump
    assert [s for _, s in cases if s.encode() in dump] == []
