"""The metered limits of a task (R2): money and tokens, reserved from a request's worst case before it is sent and
settled with the usage the model reports. The :class:`~agents_loopguard.Guard` does it itself
(:meth:`~Metering.reserve_request`, :meth:`~Metering.settle_request`); this module holds those methods.

A cost budget needs the price of every model a task asks (:mod:`~agents_loopguard.values.pricing`) and, like an
output or total token limit, a bound on each request's output: a limit that cannot be enforced is refused with a
``ValueError`` (:meth:`~Metering.check_request`) before anything runs, never ignored. Without a cost budget or token
limits nothing is reserved.

>>> from agents_loopguard import Budget, Guard
>>> from agents_loopguard.values.pricing import Price
>>> per_token = {"m": Price(1_000_000.0, 1_000_000.0)}
>>> Guard(budget=Budget(5, 0, cost=250.0), prices=per_token).reserve_request("m", lambda: 200, 100).reason
<Reason.COST_BUDGET: 'cost_budget'>
>>> guard = Guard(budget=Budget(5, 0, cost=1_000.0), prices=per_token)
>>> reserved = guard.reserve_request("m", lambda: 200, 100)   # 200 in + 100 out would cost 300
>>> reserved.cost, guard.used.cost
(300.0, 300.0)
>>> guard.settle_request(reserved, usage=(150, 20))            # the model reports 150 in, 20 out
>>> guard.used.cost
170.0
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..store.base import Grant, Store
from ..values.budget import Budget
from ..values.calls import Verdict
from ..values.outcome import Reason, Status, Usage
from ..values.pricing import Price, price_for

__all__ = ["NOTHING_RESERVED", "Metering", "Reserved"]


@dataclass(frozen=True)
class Reserved:
    """What one model request reserved: its price, its worst-case cost, its worst-case tokens (input, output)."""

    price: Price | None = None
    cost: float = 0.0
    tokens: tuple[int, int] = (0, 0)


NOTHING_RESERVED = Reserved()


def _metered_tokens(budget: Budget) -> bool:
    return any(limit is not None for limit in (budget.input_tokens, budget.output_tokens, budget.total_tokens))


class Metering:
    """The request metering of a :class:`~agents_loopguard.Guard` (a part of it: these methods are the guard's)."""

    task_id: str
    budget: Budget
    store: Store
    used: Usage
    prices: Mapping[str, Price] | None

    if TYPE_CHECKING:

        def _observe(self, event: str, **data: Any) -> None: ...  # the guard's own (core)

    def check_prices(self) -> None:
        """A cost budget without a price table could never be enforced: refused."""
        if self.budget.cost is not None and not self.prices:
            raise ValueError(
                f"task {self.task_id!r} has a cost budget ({self.budget.cost}): give the run the price of its models "
                "(prices=...), or the limit could not be enforced"
            )

    def check_request(self, model: str | None, max_output_tokens: int | None) -> None:
        """Refuse (``ValueError``) a request shape whose limits this task could not enforce: an output bound is
        needed with a cost budget or an output/total token limit, and a price for ``model`` with a cost budget.
        The one wording of every adapter's check, run before anything is sent."""
        self._output_bound(max_output_tokens)
        self._price_of(model)

    def _needs_output_bound(self) -> bool:
        budget = self.budget
        return budget.cost is not None or budget.output_tokens is not None or budget.total_tokens is not None

    def _output_bound(self, max_output_tokens: int | None) -> int:
        if self._needs_output_bound() and max_output_tokens is None:
            raise ValueError(
                "the task has a cost budget or an output/total token limit: give max_output_tokens= "
                "(ModelSettings(max_tokens=...) with the Agents SDK) to bound each request's worst case"
            )
        return max_output_tokens or 0

    def _price_of(self, model: str | None) -> Price | None:
        if self.budget.cost is None:
            return None
        self.check_prices()
        assert self.prices is not None
        price = price_for(self.prices, model) if model else None
        if price is None:
            raise ValueError(
                f"the task has a cost budget and prices= has no entry for model {model!r}: "
                "the cost of its requests could not be reserved"
            )
        return price

    def reserve_request(
        self, model: str | None, input_tokens: Callable[[], int] | None, max_output_tokens: int | None
    ) -> Reserved | Verdict:
        """Reserve a model request's worst case (``input_tokens()`` estimated, the output bound) against the cost
        budget and the token limits, before it is sent. A refusal is the verdict (``cost_budget``,
        ``token_budget``), with nothing left reserved."""
        price = self._price_of(model)
        tokens_metered = _metered_tokens(self.budget)
        if price is None and not tokens_metered:
            return NOTHING_RESERVED
        bound = self._output_bound(max_output_tokens)
        estimate = input_tokens() if input_tokens is not None else 0
        reserved = Reserved(
            price,
            price.cost(input_tokens=estimate, output_tokens=bound) if price is not None else 0.0,
            (estimate, bound) if tokens_metered else (0, 0),
        )
        if price is not None:
            refused = self._granted(self.store.reserve_cost(self.task_id, reserved.cost), Reason.COST_BUDGET)
            if refused is not None:
                return refused
        if tokens_metered:
            refused = self._granted(self.store.reserve_tokens(self.task_id, *reserved.tokens), Reason.TOKEN_BUDGET)
            if refused is not None:
                self.settle_request(Reserved(price, reserved.cost), billed=False)
                return refused
        return reserved

    def _granted(self, grant: Grant, default: Reason) -> Verdict | None:
        self.used = grant.used
        if grant.granted:
            return None
        reason = grant.reason or default
        self._observe("turn.refused", reason=str(reason))
        return Verdict(Status.STOPPED, reason, grant.detail or f"the next request would exceed the task's {default}")

    def settle_request(
        self, reserved: Reserved, *, usage: tuple[int, int] | None = None, billed: bool | None = None
    ) -> None:
        """Replace a request's reservation by what it used: the reported ``usage``; for a request that failed
        (``billed`` set), nothing when it was not billed (an error response, or never sent) or the worst case when
        it may have been served (a timeout, a lost connection); without a usage report, the worst case."""
        if reserved == NOTHING_RESERVED:
            return
        tokens_metered = _metered_tokens(self.budget)
        if billed is not None:
            tokens, cost = (reserved.tokens, reserved.cost) if billed else ((0, 0), 0.0)
        elif usage is None:
            tokens, cost = reserved.tokens, reserved.cost
        else:
            tokens = usage if tokens_metered else (0, 0)
            cost = reserved.price.cost(input_tokens=usage[0], output_tokens=usage[1]) if reserved.price else 0.0
        if reserved.price is not None:
            self.used = self.store.settle_cost(self.task_id, reserved.cost, cost)
        if tokens_metered:
            self.used = self.store.settle_tokens(self.task_id, reserved=reserved.tokens, actual=tokens)
