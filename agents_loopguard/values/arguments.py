"""The bounds within which a tool call's arguments are read: hostile input is a refusal, never a crash.

A model (or an MCP client) may send arguments nested 100,000 levels deep, which Python's JSON parser, and every
recursive walk after it, answer with ``RecursionError``; or megabytes of JSON, stored and fingerprinted in full.
Both are refused *before* anything parses them, with a sentence the model reads (the call is ``invalid_call``):

- :data:`MAX_ARGUMENTS_DEPTH`: nesting deeper than 200 levels (the depth the canonical form accepts);
- :data:`MAX_ARGUMENTS_SIZE`: more than 1,000,000 characters of JSON text.

:func:`arguments_problem` says why raw arguments (JSON text, or a mapping a framework already parsed) are
refused; :func:`load_arguments` parses them within the bounds. A framework that parses the model's arguments
itself, before the guard sees them, gets them through :func:`screened_arguments` first: beyond the bounds it
reads a short text that is not JSON, which :func:`load_arguments` turns back into the refusal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from .canonical import _MAX_DEPTH

__all__ = [
    "MAX_ARGUMENTS_DEPTH",
    "MAX_ARGUMENTS_SIZE",
    "ArgumentsRefused",
    "arguments_problem",
    "load_arguments",
    "screened_arguments",
]

MAX_ARGUMENTS_DEPTH = _MAX_DEPTH
"""Arguments nested deeper than this many levels of objects and arrays are refused."""

MAX_ARGUMENTS_SIZE = 1_000_000
"""Arguments longer than this many characters of JSON text (a parsed mapping: of its compact JSON) are refused."""

_REFUSED = "[loopguard refused these arguments] "
"""Starts the text :func:`screened_arguments` puts in place of refused arguments (``[`` then a letter: not JSON)."""

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_A_BRACKET = re.compile(r"[^\[\]{}]+")


class ArgumentsRefused(ValueError):
    """The arguments are beyond the bounds (:func:`load_arguments`); the message says which and is what the model
    reads."""


def _text_depth(text: str, limit: int) -> int:
    """The nesting depth of the JSON ``text`` (strings skipped), counted up to ``limit + 1`` without recursion."""
    if text.count("[") + text.count("{") <= limit:  # the common case: too few brackets to be too deep
        return 0
    brackets = _NOT_A_BRACKET.sub("", _STRING.sub("", text))
    depth = deepest = 0
    for char in brackets:
        if char in "[{":
            depth += 1
            if depth > limit:
                return depth
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _value_depth(value: Any, limit: int) -> int:
    """The nesting depth of a parsed value, walked without recursion and no further than ``limit + 1``."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    deepest = 0
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > limit:
            return depth
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children if isinstance(child, (Mapping, list, tuple)))
    return deepest


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=repr, check_circular=False))


def arguments_problem(raw: str | Mapping[str, Any] | None) -> str | None:
    """Why ``raw`` arguments (JSON text, or a mapping a framework parsed) are refused before they are read, or
    ``None`` when they are within the bounds.

    >>> arguments_problem('{"order": 42}') is None
    True
    >>> arguments_problem('{"a":' * 300 + "1" + "}" * 300)
    'nested deeper than 200 levels'
    >>> arguments_problem({"note": "x" * 1_000_001})
    '1,000,012 characters of JSON, over the limit of 1,000,000'
    """
    if raw is None:
        return None
    if isinstance(raw, str):
        if raw.startswith(_REFUSED):
            return raw[len(_REFUSED) :][:200]
        size = len(raw)
        too_deep = size > MAX_ARGUMENTS_SIZE or _text_depth(raw, MAX_ARGUMENTS_DEPTH) > MAX_ARGUMENTS_DEPTH
    else:
        too_deep = _value_depth(raw, MAX_ARGUMENTS_DEPTH) > MAX_ARGUMENTS_DEPTH
        size = 0 if too_deep else _size(raw)
    if size > MAX_ARGUMENTS_SIZE:
        return f"{size:,} characters of JSON, over the limit of {MAX_ARGUMENTS_SIZE:,}"
    if too_deep:
        return f"nested deeper than {MAX_ARGUMENTS_DEPTH} levels"
    return None


def load_arguments(text: str) -> Any:
    """``json.loads(text)`` within the bounds: :class:`ArgumentsRefused` beyond them (or for the text
    :func:`screened_arguments` put in place of refused arguments), ``ValueError`` for text that is not JSON.

    >>> load_arguments('{"order": 42}')
    {'order': 42}
    >>> load_arguments(screened_arguments("[" * 100_000))
    Traceback (most recent call last):
    ...
    agents_loopguard.values.arguments.ArgumentsRefused: nested deeper than 200 levels
    """
    problem = arguments_problem(text)
    if problem is not None:
        raise ArgumentsRefused(problem)
    try:
        return json.loads(text)
    except RecursionError:  # only on a stack already deep when the parse began
        raise ArgumentsRefused(f"nested too deeply to be read here ({MAX_ARGUMENTS_DEPTH} levels at most)") from None


def screened_arguments(text: str) -> str:
    """The model's JSON arguments as a framework that parses them itself may get them: ``text`` when within the
    bounds; otherwise a short text that is not JSON, which says why and which :func:`load_arguments` refuses.

    >>> screened_arguments('{"order": 42}')
    '{"order": 42}'
    >>> screened_arguments("[" * 100_000)
    '[loopguard refused these arguments] nested deeper than 200 levels'
    """
    problem = arguments_problem(text)
    return text if problem is None else _REFUSED + problem
