"""Every rule of SPEC.md is named by at least one test, in its name or its docstring, so that
``grep -rn R7 tests/`` finds a rule's tests.

SPEC.md lives next to the repository (``../shared/SPEC.md``); ``LOOPGUARD_SPEC_MD`` names another copy. Its absence
fails this test (it is never skipped): the check would otherwise pass by seeing no rules.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
RULE_LINE = re.compile(r"^(R\d+)\s", re.MULTILINE)

PENDING: dict[str, str] = {}
"""Rules of SPEC.md whose tests land with an open issue (named here with its title). A rule leaves this set when its
tests land; a pending rule that a test already names fails the check below, so the set cannot go stale."""


def spec_path() -> Path:
    return Path(os.environ.get("LOOPGUARD_SPEC_MD") or ROOT.parent / "shared" / "SPEC.md")


def spec_rules(text: str) -> list[str]:
    """The rule ids of SPEC.md's "Rules" section, in order: each rule starts a line with its id ("R7 Repetition").

    >>> spec_rules("## Rules\\nR1 Gate.\\n   more of R1\\nR2 Separate counters.\\n## Reference\\nR9 not a rule here")
    ['R1', 'R2']
    """
    section = text.split("## Rules", 1)[-1].split("\n## ", 1)[0]
    return RULE_LINE.findall(section)


def suite_texts() -> Iterator[tuple[str, str]]:
    """``(where, text)`` for every test function under tests/: its name, and its docstring when it has one (from
    the syntax tree: comments and other strings do not count)."""
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
                where = f"{path.relative_to(ROOT)}::{node.name}"
                yield where, node.name
                doc = ast.get_docstring(node)
                if doc:
                    yield where, doc


def naming(rule: str, texts: list[tuple[str, str]]) -> list[str]:
    """The tests whose name or docstring names ``rule`` (``R7``, or ``r7`` in a name, never as part of ``R70``).

    >>> naming("R1", [("a", "test_r1_gate"), ("b", "R12 tool_choice"), ("c", "R1, R4: refused")])
    ['a', 'c']
    """
    pattern = re.compile(rf"(?<![A-Za-z0-9]){rule}(?!\d)", re.IGNORECASE)
    return sorted({where for where, text in texts if pattern.search(text)})


def test_spec_md_lists_its_rules_in_order() -> None:
    path = spec_path()
    if not path.is_file():
        pytest.fail(f"SPEC.md not found at {path} (set LOOPGUARD_SPEC_MD to its path)", pytrace=False)
    rules = spec_rules(path.read_text(encoding="utf-8"))
    assert rules == [f"R{n}" for n in range(1, len(rules) + 1)] and len(rules) >= 16, rules


def test_every_rule_of_spec_md_is_named_by_a_test() -> None:
    path = spec_path()
    if not path.is_file():
        pytest.fail(f"SPEC.md not found at {path} (set LOOPGUARD_SPEC_MD to its path)", pytrace=False)
    texts = list(suite_texts())
    rules = spec_rules(path.read_text(encoding="utf-8"))
    missing = [rule for rule in rules if rule not in PENDING and not naming(rule, texts)]
    assert missing == [], f"no test names these rules in its name or docstring: {missing}"
    landed = [rule for rule in PENDING if naming(rule, texts)]
    assert landed == [], f"tests name these pending rules: remove them from PENDING: {landed}"
    assert set(PENDING) <= set(rules), f"PENDING names rules SPEC.md does not have: {set(PENDING) - set(rules)}"
    assert naming("R99", texts) == []  # the search is not trivially true
