"""``loopguard mcp``: an MCP server in front of another, every ``tools/call`` going through the guarded run.

A client (an agent framework, n8n's MCP Client tool, a desktop assistant) sees the upstream's tools unchanged; each
call is translated onto :class:`~agents_loopguard.run.GuardedRun` under the task the configuration names (per
client session, per header, per argument, or one fixed task), in the store every ``loopguard`` command reads:

* an undeclared tool is judged by :mod:`agents_loopguard.run.listed` (a possible write never runs);
* identical calls, progress, the task's and each tool's budget, the stop mark: the guard's rules, shared by every
  client and proxy process on the same store;
* a declared write is reserved in the ledger before it is sent: a committed one answers its stored result, an
  unknown one is refused until an operator reconciles it;
* a tool with ``approval = true``: a new call stores a pause and answers that it waits; after the operator's
  decision (``loopguard approve``), the same call runs once;
* every refusal is an MCP tool error (``isError: true``) whose text the client's model reads.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import uuid
from collections.abc import Mapping
from typing import Any

import mcp_types as types

from ..ops.approvals import ResumeError, claim_for_resume, decisions_for, load_for_resume
from ..ops.operator import operation_view
from ..run import (
    Ending,
    Execute,
    Executed,
    GuardedRun,
    RunOptions,
    ToolSpec,
    adrive,
    conclude_now,
    perform_check_async,
    within_deadline,
)
from ..run.listed import NotDeclared, judge_listed
from ..store.base import Store
from ..values.canonical import CanonicalError, canonical_json, operation_id_problem
from ..values.errors import InputError, NotFoundError
from .config import ProxyConfig
from .link import UpstreamLink
from .stdio import UNREADABLE
from .verify import result_evidence, result_verify

__all__ = ["GuardedProxy"]

log = logging.getLogger(__name__)
_WHO = "loopguard mcp"


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _task_value(value: Any, where: str) -> str | types.CallToolResult:
    if not isinstance(value, str) or not value.strip() or len(value) > 200 or not value.isprintable():
        return _error(f"this proxy runs each call under the task named by {where}: give a non-empty string")
    return value.strip()


class GuardedProxy:
    """The handlers of ``loopguard mcp`` (``list_tools``, ``call_tool``) over one upstream and one store."""

    def __init__(self, config: ProxyConfig, store: Store, link: UpstreamLink | None = None) -> None:
        self.config = config
        self.store = store
        self.link = link or UpstreamLink(config.upstream)
        self.annotations: dict[str, Any] = {}
        """The latest annotations of each tool the upstream listed (a tool that changed is judged anew)."""
        self._connection = uuid.uuid4().hex[:16]
        """Over stdio a client starts its own proxy process: that connection is the client's session."""
        self.options = RunOptions(
            budget=config.budget,
            store=store,
            policy=config.policy,
            on_refusal="continue",
            tools=config.tools,
            mcp_trusted=(config.upstream.name,) if config.upstream.trusted else (),
            unguarded=config.unguarded,
        )

    # --- the tools ------------------------------------------------------------------------------------------

    def judge(self, tool: str, run: GuardedRun | None = None) -> ToolSpec | NotDeclared:
        """What the guard makes of ``tool`` as the upstream last listed it."""
        server, annotations = self.config.upstream.name, self.annotations.get(tool)
        if run is not None:
            return run.listed_tool(tool, annotations, server=server)
        return judge_listed(tool, annotations, server=server, options=self.options)

    async def refresh(self) -> list[types.Tool]:
        """List the upstream's tools and remember their annotations."""
        tools = await self.link.list_tools()
        self.annotations = {tool.name: tool.annotations for tool in tools}
        return tools

    async def refusals(self) -> list[str]:
        """The undeclared tools the upstream lists that may change the world: one line each (the proxy refuses
        to start with any)."""
        tools = await self.refresh()
        judged = (self.judge(tool.name) for tool in tools)
        return [self.refusal(verdict) for verdict in judged if isinstance(verdict, NotDeclared)]

    def refusal(self, refused: NotDeclared) -> str:
        """The refusal of an undeclared tool, naming the configuration's declaration to add."""
        name = refused.tool
        return (
            f"MCP tool {name!r} (server {self.config.upstream.name!r}) is not declared and is not annotated "
            f"readOnlyHint: true by a trusted server: it may change the world, so it does not run. Add [tools.{name}] "
            f'with kind = "write" (or kind = "read" if it only reads) to the proxy\'s configuration, or add it to '
            f'[upstream] unguarded = {{ {name} = "why" }} to let it run undeclared'
        )

    async def list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        tools = await self.refresh()
        argument = self.config.task.argument if self.config.task.by == "argument" else None
        return types.ListToolsResult(tools=[_with_task_argument(t, argument) for t in tools])

    # --- one call -----------------------------------------------------------------------------------------

    def task_of(self, ctx: Any, arguments: dict[str, Any]) -> str | types.CallToolResult:
        """The task a call runs under, as the configuration says (``mcp:<server>:<key>`` unless fixed)."""
        rule, prefix = self.config.task, f"mcp:{self.config.upstream.name}:"
        if rule.by == "fixed":
            assert rule.id is not None
            return rule.id
        if rule.by == "argument":
            assert rule.argument is not None
            value = _task_value(arguments.pop(rule.argument, None), f"the argument {rule.argument!r}")
        elif rule.by == "header":
            assert rule.header is not None
            headers = getattr(getattr(ctx, "request", None), "headers", None) or {}
            value = _task_value(headers.get(rule.header), f"the header {rule.header!r}")
        else:
            value = self._session_key(ctx)
        return value if isinstance(value, types.CallToolResult) else prefix + value

    def _session_key(self, ctx: Any) -> str | types.CallToolResult:
        """The client session a call belongs to: the ``mcp-session-id`` of an HTTP session, or this process's one
        stdio connection. A call over HTTP without a session (a sessionless client: each request stands alone)
        is refused: one task per call would give a stubborn client a fresh budget with every call."""
        request = getattr(ctx, "request", None)
        if request is None:
            return self._connection
        session_id = (getattr(request, "headers", None) or {}).get("mcp-session-id")
        if isinstance(session_id, str) and session_id:
            return session_id
        return _error(
            'this proxy runs each call under its client\'s MCP session ([task] by = "session"), and this request '
            'carries none (mcp-session-id): send a header the proxy names instead ([task] by = "header")'
        )

    async def call_tool(self, ctx: Any, params: Any) -> types.CallToolResult:
        """One ``tools/call``: the upstream's result, or an error result whose text says why it did not run."""
        name, arguments = params.name, dict(params.arguments or {})
        if name == UNREADABLE:  # a request the MCP library could not read (see .stdio): answered, never sent on
            return self._unreadable(ctx, str(arguments.get("why")), arguments.get("tool"))
        task = self.task_of(ctx, arguments)
        if isinstance(task, types.CallToolResult):
            return task
        if name not in self.annotations:  # a tool the upstream added since the last listing
            await self.refresh()
        try:
            run = GuardedRun.start(dataclasses.replace(self.options, task_id=task))
        except InputError as exc:
            return _error(f"the task {task!r} cannot run here: {exc}")
        ended = run.guard.outcome
        if ended is not None and ended.pause_id is None:  # a task that ended: nothing runs until it is reopened
            return _error(
                f"not executed: the task {task!r} has ended ({ended.status}/{ended.reason}); an operator can reopen "
                f"it: loopguard recover {task} --who NAME --why WHY --more-tools N"
            )
        judged = self.judge(name, run)
        if isinstance(judged, NotDeclared):
            refused = NotDeclared(judged.tool, self.refusal(judged))
            return self._answer(run, run.refuse_undeclared(refused))
        if name in self.config.approvals:
            waiting = self._approval(run, judged, name, arguments)
            if isinstance(waiting, types.CallToolResult):
                return waiting
            run = waiting
        call = run.propose(judged, name, arguments, _call_id(name, arguments))
        if isinstance(call, Executed):
            return self._answer(run, call)
        spec = judged
        if spec.verify is result_verify:  # verify = "result": the evidence is relative to the task's revision
            spec = dataclasses.replace(
                spec, verify=lambda _a, out: result_evidence(out, revision=run.guard.progress_revision(call))
            )
        return self._answer(run, await adrive(run.execute(spec, call), self._perform(name, arguments)))

    def _unreadable(self, ctx: Any, why: str, tool: Any) -> types.CallToolResult:
        """A request the MCP library could not read (nested too deep, not JSON): refused ``invalid_call`` in its
        task, traced like any invalid call, when the task is known without the request's arguments; else answered
        with why. Never sent on, nothing reserved."""
        task = self.task_of(ctx, {}) if self.config.task.by != "argument" else None
        if not isinstance(task, str):
            return _error(why)
        try:
            run = GuardedRun.start(dataclasses.replace(self.options, task_id=task))
        except InputError:
            return _error(why)
        name = tool if isinstance(tool, str) and tool in self.annotations else UNREADABLE
        return self._answer(run, run.refuse_invalid(name, "read", why))

    def _perform(self, name: str, arguments: dict[str, Any]) -> Any:
        async def perform(effect: Any) -> Any:
            if isinstance(effect, Execute):
                return await within_deadline(self.link.call_tool(name, dict(effect.call.args)), effect.timeout)
            return await perform_check_async(effect)

        return perform

    def _answer(self, run: GuardedRun, executed: Executed) -> types.CallToolResult:
        """The result the client reads; a run the guard ended ends its task (one outcome, in the store), and so
        does a refusal no later call can escape (the task's tool budget spent)."""
        if run.verdict is None and run.spent(executed.verdict):
            run.stop(executed.verdict)  # type: ignore[arg-type]
        if run.verdict is not None:
            conclude_now(run, Ending())
        if executed.message is not None:
            return _error(executed.message)
        output = executed.output
        try:
            return types.CallToolResult.model_validate(output)
        except ValueError:  # a stored result of another shape: its text
            return types.CallToolResult(content=[types.TextContent(type="text", text=str(output))])

    # --- approvals ----------------------------------------------------------------------------------------

    def _approval(
        self, run: GuardedRun, spec: ToolSpec, name: str, arguments: dict[str, Any]
    ) -> GuardedRun | types.CallToolResult:
        """A call of a tool that needs approval: the run to execute it in once an operator approved this very
        call, else what the client reads (the call waits; the task's pause is stored when it is new)."""
        call_id = _call_id(name, arguments)
        if self._committed(spec, arguments):
            return run  # the ledger answers it with the stored result: nothing runs, nothing to approve
        named = spec.operation_of(arguments)
        if isinstance(named, str) and operation_id_problem(named, secrets=run.guard.secrets) is not None:
            return (
                run  # the guard refuses it (an operation id holding a credential is recorded nowhere, not in a pause)
            )
        outcome = run.guard.outcome
        if outcome is None:
            pending: dict[str, Any] = {"call_id": call_id, "tool": name, "kind": spec.kind}
            shown = _arguments(run.guard.storable(arguments))  # what operators read: redacted
            pending.update(arguments=shown, operation_id=named if isinstance(named, str) else None)

            def store(_result: Any, guard: Any) -> str:
                paused = guard.pause("{}", [pending], detail=f"{name} waits for an operator's approval")
                return str(paused.pause_id)

            stored = conclude_now(run, Ending(waiting=f"{name} waits for an operator's approval", store_pause=store))
            return _error(_waiting(name, stored.pause_id))
        if outcome.pause_id is None:
            return run  # the task ended otherwise: the guard refuses the call with its outcome
        return self._decided(run, outcome.pause_id, call_id, name)

    def _committed(self, spec: ToolSpec, arguments: dict[str, Any]) -> bool:
        named = spec.operation_of(arguments)
        if not isinstance(named, str):
            return False
        try:
            return bool(operation_view(self.store, named)["state"] == "committed")
        except NotFoundError:
            return False

    def _decided(self, run: GuardedRun, pause_id: str, call_id: str, name: str) -> GuardedRun | types.CallToolResult:
        try:
            record = load_for_resume(self.store, pause_id, task_id=run.guard.task_id)
        except ResumeError as exc:
            return _error(f"{name} was not run: {exc}")
        if [str(c.get("call_id")) for c in record.pending_calls] != [call_id]:
            return _error(
                f"{name} was not run: the task waits for an operator's decision on another call (pause {pause_id})"
            )
        try:
            decisions = decisions_for(record, None)
        except InputError:
            return _error(_waiting(name, pause_id))
        claim_for_resume(self.store, record, decisions, who=_WHO, why="the approved call, sent again", given=False)
        resumed = GuardedRun.start(dataclasses.replace(self.options, task_id=run.guard.task_id))
        if decisions.get(call_id) != "approve":
            return _error(f"{name} was not run: an operator rejected this call (pause {pause_id})")
        return resumed


def _with_task_argument(tool: types.Tool, argument: str | None) -> types.Tool:
    """``tool`` as a client sees it: with the argument that names the task when the configuration asks for one."""
    if argument is None:
        return tool
    schema = dict(tool.input_schema or {"type": "object"})
    properties = {**dict(schema.get("properties") or {}), argument: {"type": "string", "description": "the task"}}
    required = [*(schema.get("required") or []), argument]
    return tool.model_copy(update={"input_schema": {**schema, "properties": properties, "required": required}})


def _arguments(arguments: Mapping[str, Any]) -> str:
    try:
        return canonical_json(dict(arguments)).decode()
    except CanonicalError:
        return repr(dict(arguments))


def _call_id(name: str, arguments: Mapping[str, Any]) -> str:
    """A call's stable id: the same tool and canonical arguments, sent again, are the same call."""
    return "mcp-" + hashlib.sha256(f"{name}\n{_arguments(arguments)}".encode()).hexdigest()[:20]


def _waiting(name: str, pause_id: str | None) -> str:
    return (
        f"{name} waits for an operator's approval (pause {pause_id}); it has not run. An operator decides with "
        f"`loopguard approve {pause_id} --who NAME` (or reject); then send the same call again and it runs once"
    )
