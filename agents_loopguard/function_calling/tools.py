"""Tools of the raw function-calling loop: a function with its JSON schema and what the guard needs to know."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from functools import cached_property
from typing import Any

from ..engine.core import Kind
from ..run import UNDECLARED, ToolSpec, declare_tool
from ..run.retry import RetryPolicy
from ..values.probes import Probe

__all__ = ["GuardedTool", "LoopResult"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _empty_object() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


@dataclass(frozen=True)
class GuardedTool:
    """A function the model may call, with what the guard needs to know about it.

    ``fn`` is called with the model's arguments as keyword arguments (a coroutine function in the async loops).
    ``verify(args, output)`` is the application's trusted check of the result: it returns evidence
    ``{"revision": int, "done": bool, "effect": "none" | "committed" | "not_committed" | "unknown"}`` (see
    :class:`~agents_loopguard.values.evidence.Evidence`). A read without ``verify`` is unverified: it never advances the
    revision, and ``Policy.max_unverified`` of them in a row end in ``no_progress``. A write needs ``operation_id``
    (the stable business action, from the arguments) and ``verify``.

    >>> confirm = GuardedTool("confirm_order", lambda order_id, version: {"receipt": f"r-{order_id}"},
    ...     parameters={"type": "object", "properties": {"order_id": {"type": "integer"},
    ...                                                  "version": {"type": "integer"}}},
    ...     kind="write", operation_id=lambda a: f"confirm-order-{a['order_id']}-v{a['version']}",
    ...     verify=lambda a, out: {"revision": 1, "done": True, "effect": "committed"})
    >>> confirm.chat_spec()["function"]["name"], confirm.responses_spec()["type"]
    ('confirm_order', 'function')
    """

    name: str
    fn: Callable[..., Any]
    _: KW_ONLY
    parameters: Mapping[str, Any] = field(default_factory=_empty_object)
    """The JSON schema of the arguments (an object)."""
    kind: Kind = "read"
    """read, write, poll or page (see :class:`~agents_loopguard.engine.core.Call`)."""
    operation_id: Callable[[Mapping[str, Any]], str] | None = None
    """For a write: ``args -> "confirm-order-42-v3"``, the business action, never the model's call id."""
    verify: Callable[[Mapping[str, Any], Any], Any] | None = None
    """``(args, output) -> evidence``; ``output`` is a :class:`ToolFailure` for a failed write attempt."""
    description: str = ""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """Retries of a transient failure without effect (none by default: a side effect is never re-sent blindly)."""
    strict: bool | None = None
    """Sent as the function's ``strict`` flag when set."""
    max_executions: int | None = None
    """Executions of this tool allowed for the whole task (``None``: only the task's budget bounds it)."""
    volatile_args: tuple[str, ...] = ()
    """Arguments that are no part of the action (a timestamp, a request id): left out of the call's identity."""
    probe: Probe | None = None
    """For a write: ``(operation_id, args) -> committed(result) | NOT_COMMITTED | UNKNOWN``, a read-only question to
    the receiver, asked when the write's answer was lost (:mod:`~agents_loopguard.values.probes`)."""
    progress_key: str | None = None
    """Whose revision ``verify`` reports (``None``: the tool's own); tools that count the same thing share a key."""
    spec: ToolSpec = field(init=False, repr=False, compare=False)
    """The guard's declaration of this tool (checked when the tool is made); a tool made without ``kind``,
    ``operation_id``, ``verify``, ``retry``, ``max_executions``, ``volatile_args``, ``probe`` or ``progress_key``
    declares nothing, and a declaration by name (``options=RunOptions(tools={name: declare_tool(...)})``) applies
    to it."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"tool name {self.name!r} must match {_NAME.pattern} (the OpenAI API's rule)")
        if not callable(self.fn):
            raise TypeError(f"tool {self.name!r}: fn must be callable")
        if not isinstance(self.parameters, Mapping):
            raise TypeError(f"tool {self.name!r}: parameters must be a JSON schema object (a mapping)")
        says = (self.kind, self.operation_id, self.verify, self.retry, self.max_executions, self.volatile_args)
        if (
            says == ("read", None, None, RetryPolicy(), None, ()) and self.probe is None and self.progress_key is None
        ):  # declares nothing: RunOptions.tools may
            spec = UNDECLARED
        else:
            spec = declare_tool(
                self.name,
                kind=self.kind,
                operation_id=self.operation_id,
                verify=self.verify,
                retry=self.retry,
                max_executions=self.max_executions,
                volatile_args=self.volatile_args,
                probe=self.probe,
                progress_key=self.progress_key,
            )
        object.__setattr__(self, "spec", spec)

    @cached_property
    def _signature(self) -> inspect.Signature | None:
        try:
            return inspect.signature(self.fn)
        except (TypeError, ValueError):  # some builtins have none: let the call decide
            return None

    def misfit(self, args: Mapping[str, Any]) -> str | None:
        """Why ``args`` cannot be passed to ``fn`` as keyword arguments, or ``None`` when they fit."""
        if self._signature is None:
            return None
        try:
            self._signature.bind(**args)
        except TypeError as exc:
            return f"the arguments do not fit {self.name}(): {exc}"
        return None

    def chat_spec(self) -> dict[str, Any]:
        """The Chat Completions ``tools`` entry."""
        function: dict[str, Any] = {"name": self.name, "parameters": dict(self.parameters)}
        if self.description:
            function["description"] = self.description
        if self.strict is not None:
            function["strict"] = self.strict
        return {"type": "function", "function": function}

    def responses_spec(self) -> dict[str, Any]:
        """The Responses API ``tools`` entry."""
        spec: dict[str, Any] = {"type": "function", "name": self.name, "parameters": dict(self.parameters)}
        if self.description:
            spec["description"] = self.description
        if self.strict is not None:
            spec["strict"] = self.strict
        return spec


@dataclass
class LoopResult:
    """The loop's own record, as ``Outcome.result``: the final text, the conversation, the responses."""

    final_text: str | None = None
    """The model's last answer (``None`` when the run ended before one)."""
    conversation: list[Any] = field(default_factory=list)
    """Chat messages or Responses input items, with the assistant turns and tool outputs appended."""
    responses: list[Any] = field(default_factory=list)
    """Every model response received, in order."""
    attempts: int = 0
    """Model requests this run sent (each one reserved a model turn)."""
