"""The metered limits of a run (R2): money and tokens, reserved from a request's worst case before it is sent and
settled with the usage the model reports.

A cost budget needs the price of every model a run asks (:mod:`~agents_loopguard.pricing`) and, like an output or
total token limit, a bound on each request's output: a limit that cannot be enforced is refused with a
``ValueError`` when the run starts, never ignored. Without a cost budget or token limits nothing is reserved.

>>> from agents_loopguard import Budget, Guard
>>> from agents_loopguard.pricing import Price
>>> per_token = {"m": Price(1_000_000.0, 1_000_000.0)}
>>> meter = Meter(Guard(budget=Budget(5, 0, cost=250.0)), per_token)
>>> meter.reserve("m", lambda: 200, 100).reason         # 200 in + 100 out would cost 300
<Reason.COST_BUDGET: 'cost_budget'>
>>> meter = Meter(Guard(budget=Budget(5, 0, cost=1_000.0)), per_token)
>>> reserved = meter.reserve("m", lambda: 200, 100)
>>> reserved.cost, meter.guard.used.cost
(300.0, 300.0)
>>> meter.settle(reserved, usage=(150, 20), billed=None)  # the model reports 150 in, 20 out
>>> meter.guard.used.cost
170.0
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .calls import Verdict
from .core import Guard
from .outcome import Reason, Status
from .pricing import Price, price_for
from .store.base import Grant

__all__ = ["NOTHING_RESERVED", "Meter", "Reserved"]


@dataclass(frozen=True)
class Reserved:
    """What one model request reserved: its price, its worst-case cost, its worst-case tokens (input, output)."""

    price: Price | None = None
    cost: float = 0.0
    tokens: tuple[int, int] = (0, 0)


NOTHING_RESERVED = Reserved()


class Meter:
    """The cost budget and the token limits of one guard's task, reserved and settled per model request."""

    def __init__(self, guard: Guard, prices: Mapping[str, Price] | None = None) -> None:
        self.guard = guard
        self.prices = prices
        budget = guard.budget
        if budget.cost is not None and not prices:
            raise ValueError(
                f"task {guard.task_id!r} has a cost budget ({budget.cost}): give the run the price of its models "
                "(prices=...), or the limit could not be enforced"
            )
        self.tokens_metered = any(limit is not None for limit in (budget.input_tokens, budget.output_tokens))
        self.tokens_metered = self.tokens_metered or budget.total_tokens is not None

    @property
    def needs_output_bound(self) -> bool:
        """A request's output must be bounded: a cost budget, or an output or total token limit."""
        budget = self.guard.budget
        return budget.cost is not None or budget.output_tokens is not None or budget.total_tokens is not None

    def check_output_bound(self, max_output_tokens: int | None) -> int:
        """The output bound of a request's worst case; a limit that needs one cannot be enforced without it."""
        if self.needs_output_bound and max_output_tokens is None:
            raise ValueError(
                "the task has a cost budget or an output/total token limit: give max_output_tokens= "
                "(ModelSettings(max_tokens=...) with the Agents SDK) to bound each request's worst case"
            )
        return max_output_tokens or 0

    def price_of(self, model: str | None) -> Price | None:
        """The price of ``model`` (``None`` without a cost budget); a model the table cannot price is refused."""
        if self.guard.budget.cost is None or not self.prices:
            return None
        price = price_for(self.prices, model) if model else None
        if price is None:
            raise ValueError(
                f"the task has a cost budget and prices= has no entry for model {model!r}: "
                "the cost of its requests could not be reserved"
            )
        return price

    def reserve(
        self, model: str | None, input_tokens: Callable[[], int] | None, max_output_tokens: int | None
    ) -> Reserved | Verdict:
        """Reserve a request's worst case (the input estimate, the output bound); a refusal is the verdict
        (``cost_budget``, ``token_budget``), with nothing left reserved."""
        price = self.price_of(model)
        if price is None and not self.tokens_metered:
            return NOTHING_RESERVED
        bound = self.check_output_bound(max_output_tokens)
        estimate = input_tokens() if input_tokens is not None else 0
        reserved = Reserved(
            price,
            price.cost(input_tokens=estimate, output_tokens=bound) if price is not None else 0.0,
            (estimate, bound) if self.tokens_metered else (0, 0),
        )
        if price is not None:
            grant = self.guard.store.reserve_cost(self.guard.task_id, reserved.cost)
            refused = self._refused(grant, Reason.COST_BUDGET)
            if refused is not None:
                return refused
        if self.tokens_metered:
            grant = self.guard.store.reserve_tokens(self.guard.task_id, *reserved.tokens)
            refused = self._refused(grant, Reason.TOKEN_BUDGET)
            if refused is not None:
                self.release(Reserved(price, reserved.cost))
                return refused
        return reserved

    def _refused(self, grant: Grant, default: Reason) -> Verdict | None:
        self.guard.adopt_usage(grant.used)
        if grant.granted:
            return None
        reason = grant.reason or default
        self.guard.observe("turn.refused", reason=str(reason))
        return Verdict(Status.STOPPED, reason, grant.detail or f"the next request would exceed the task's {default}")

    def release(self, reserved: Reserved) -> None:
        """Give back a reservation whose request was never sent."""
        self.settle(reserved, usage=None, billed=False)

    def settle(self, reserved: Reserved, *, usage: tuple[int, int] | None, billed: bool | None) -> None:
        """Replace a reservation by what the request used: the reported ``usage``; for a failed request
        (``billed`` set), nothing when it was not billed (an error response) or the worst case when it may have
        been served (a timeout, a lost connection); without a usage report, the worst case."""
        if reserved == NOTHING_RESERVED:
            return
        if billed is not None:
            tokens, cost = (reserved.tokens, reserved.cost) if billed else ((0, 0), 0.0)
        elif usage is None:
            tokens, cost = reserved.tokens, reserved.cost
        else:
            tokens = usage if self.tokens_metered else (0, 0)
            cost = reserved.price.cost(input_tokens=usage[0], output_tokens=usage[1]) if reserved.price else 0.0
        store, task_id = self.guard.store, self.guard.task_id
        if reserved.price is not None:
            self.guard.adopt_usage(store.settle_cost(task_id, reserved.cost, cost))
        if self.tokens_metered:
            self.guard.adopt_usage(store.settle_tokens(task_id, reserved=reserved.tokens, actual=tokens))
