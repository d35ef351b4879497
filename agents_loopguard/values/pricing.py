"""Prices per model and the worst-case cost of one model request, for the task's monetary budget (R2).

A cost budget is reserved *before* each request from its worst case (every input token at most one UTF-8 byte of
the request, plus the largest answer ``max_output_tokens`` allows) and settled afterwards with the usage the API
reports. The table is yours: prices change, so this module ships none. Units are whatever your table uses
(``Budget.cost`` is in the same unit).

>>> prices = {"gpt-4o-mini": Price(input_per_million=0.15, output_per_million=0.60)}
>>> price_for(prices, "gpt-4o-mini-2024-07-18").cost(input_tokens=1_000_000, output_tokens=0)
0.15
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["PROMPT_FIELDS", "InputEstimator", "Price", "estimate_input_tokens", "price_for"]

PROMPT_FIELDS = ("messages", "input", "instructions", "tools", "tool_choice", "text", "response_format")
"""Request fields that are rendered into the prompt and so count as input tokens."""

_PER_ITEM_OVERHEAD = 16
"""Tokens the API adds around each message or input item (role markers, separators): a generous bound."""


@dataclass(frozen=True)
class Price:
    """What one model costs, per million tokens.

    >>> Price(input_per_million=2.0, output_per_million=8.0).cost(input_tokens=500, output_tokens=250)
    0.003
    """

    input_per_million: float
    output_per_million: float

    def __post_init__(self) -> None:
        for name in ("input_per_million", "output_per_million"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"Price.{name} must be a non-negative finite number, got {value!r}")

    def cost(self, *, input_tokens: int, output_tokens: int) -> float:
        """The cost of ``input_tokens`` in and ``output_tokens`` out."""
        return (input_tokens * self.input_per_million + output_tokens * self.output_per_million) / 1_000_000


def price_for(prices: Mapping[str, Price], model: str) -> Price | None:
    """The price of ``model``: an exact entry, else the longest entry it extends with ``-`` (a dated snapshot).

    >>> table = {"gpt-4o": Price(2.5, 10.0), "gpt-4o-mini": Price(0.15, 0.6)}
    >>> price_for(table, "gpt-4o-mini-2024-07-18") == table["gpt-4o-mini"], price_for(table, "o3") is None
    (True, True)
    """
    if model in prices:
        return prices[model]
    family = [name for name in prices if model.startswith(name + "-")]
    return prices[max(family, key=len)] if family else None


InputEstimator = Callable[[Mapping[str, Any]], int]
"""``estimate(request) -> int``: an upper bound of a request's input tokens (see :func:`estimate_input_tokens`)."""


def estimate_input_tokens(request: Mapping[str, Any]) -> int:
    """An upper bound of the input tokens of ``request`` (the keyword arguments of one ``create`` call).

    Every token the tokenizer produces covers at least one UTF-8 byte of the text it reads, and the JSON of a
    request is longer than the text the model reads, so the byte length of the prompt fields plus a per-item
    overhead is never below the real count. It is generous (English runs about four bytes per token); pass your
    own tokenizer as ``estimate_input_tokens=`` for a tighter reservation. Images, audio and files are priced
    by the API in ways their bytes do not bound: give an estimator of your own when a request carries them.

    >>> estimate_input_tokens({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    64
    """
    size, items = 0, 0
    for name in PROMPT_FIELDS:
        value = request.get(name)
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            items += len(value)
        size += len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8"))
    return size + _PER_ITEM_OVERHEAD * (items + 1)
