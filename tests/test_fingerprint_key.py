"""Keyed fingerprints: a hash of a low-entropy argument can be reversed by guessing; an HMAC cannot (R4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agents_loopguard import Budget, Guard, Verdict
from agents_loopguard.store.sql import SQLStore
from agents_loopguard.values.calls import Ticket
from agents_loopguard.values.canonical import fingerprint

UNLOCK = {"tool": "unlock", "kind": "write", "operation_id": "unlock-door-7", "args": {"door": 7, "pin": 4821}}
COMMITTED = {"revision": 1, "done": False, "effect": "committed"}


def unlock_once(store: SQLStore, **guard_options: Any) -> Guard:
    guard = Guard(budget=Budget(model_turns=5, tool_executions=5), store=store, **guard_options)
    guard.begin_turn()
    ticket = guard.authorize(UNLOCK)
    assert isinstance(ticket, Ticket) and not ticket.replay
    assert guard.settle(ticket, {"status": "ok"}, lambda call, result: COMMITTED) is None
    return guard


def guessable(db_bytes: bytes) -> int | None:
    """The PIN, if a plain sha256 fingerprint of some guess is stored in the file."""
    for pin in range(10_000):
        if fingerprint("unlock", {"door": 7, "pin": pin}).encode() in db_bytes:
            return pin
    return None


def file_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.iterdir() if p.name.startswith("lg.db"))


def test_a_plain_fingerprint_gives_a_pin_away_and_a_keyed_one_does_not(tmp_path: Path) -> None:
    """Rules: R4 (trace), R5 (call identity)."""
    plain_dir, keyed_dir = tmp_path / "plain", tmp_path / "keyed"
    plain_dir.mkdir()
    keyed_dir.mkdir()
    unlock_once(SQLStore(f"sqlite:///{plain_dir / 'lg.db'}"))
    assert guessable(file_bytes(plain_dir)) == 4821, "the caveat is real: documented in the README"
    unlock_once(SQLStore(f"sqlite:///{keyed_dir / 'lg.db'}"), fingerprint_key="a long secret the app holds")
    assert guessable(file_bytes(keyed_dir)) is None


def test_workers_sharing_the_key_agree_and_a_worker_without_it_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'lg.db'}"
    unlock_once(SQLStore(url), fingerprint_key=b"k-1")
    monkeypatch.setenv("LOOPGUARD_FINGERPRINT_KEY", "k-1")
    same_key = Guard(budget=Budget(model_turns=5, tool_executions=5), store=SQLStore(url))
    same_key.begin_turn()
    replay = same_key.authorize(UNLOCK)
    assert isinstance(replay, Ticket) and replay.replay, "the committed unlock is returned, not sent again"
    monkeypatch.delenv("LOOPGUARD_FINGERPRINT_KEY")
    other = Guard(budget=Budget(model_turns=5, tool_executions=5), store=SQLStore(url))
    other.begin_turn()
    refused = other.authorize(UNLOCK)
    assert isinstance(refused, Verdict) and str(refused.reason) == "operation_conflict", "never a silent re-send"
