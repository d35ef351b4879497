"""The configuration of ``loopguard mcp``: one TOML file, validated when the proxy starts, each problem one line.

.. code-block:: toml

    [upstream]
    command = ["python", "payments_server.py"]   # a stdio server the proxy starts; or url = "http://.../mcp"
    name = "payments"                            # how tasks and refusals name this server
    trusted = false                              # true: its readOnlyHint: true relaxes the default (a read)
    unguarded = {}                               # tools let run undeclared, each with why: { ping = "..." }

    [task]
    by = "session"              # or "header" (header = "..."), "argument" (argument = "..."), "fixed" (id = "...")

    [budget]
    tool_executions = 20        # shared by every client and proxy process on the same store

    [tools.refund]
    kind = "write"
    operation_id = "refund-{order_id}"   # default for a write: the tool and the canonical arguments
    verify = "result"                    # or "package.module:function" (args, result) -> evidence
    probe = "payments_probes:refunded"   # optional: (operation_id, args) -> committed(result) | NOT_COMMITTED | UNKNOWN
    max_executions = 3
    approval = true

>>> config = parse_config({"upstream": {"command": ["python", "srv.py"]}, "budget": {"tool_executions": 5}})
>>> config.upstream.name, config.task.by, config.budget.tool_executions
('upstream', 'session', 5)
>>> parse_config({"upstream": {}})
Traceback (most recent call last):
...
agents_loopguard.mcp.config.ConfigError: [upstream]: give command = [...] (a stdio server) or url = "http..."
"""

from __future__ import annotations

import importlib
import string
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..run import ToolSpec, declare_tool
from ..values.budget import Budget, Policy
from ..values.calls import KINDS
from ..values.errors import InputError
from .verify import canonical_operation_id, result_verify, templated_operation_id

__all__ = ["ConfigError", "ProxyConfig", "TaskRule", "Upstream", "load_config", "parse_config"]

TaskBy = Literal["session", "header", "argument", "fixed"]
_TOOL_KEYS = {"kind", "operation_id", "verify", "max_executions", "approval", "probe", "progress_key"}


class ConfigError(InputError):
    """A configuration the proxy refuses to start with (one line: where, and what to write instead)."""


@dataclass(frozen=True)
class Upstream:
    """The MCP server behind the proxy: a command it starts (stdio) or a streamable HTTP URL."""

    command: tuple[str, ...] = ()
    url: str | None = None
    name: str = "upstream"
    trusted: bool = False
    """Its annotations may relax the default: an undeclared tool it annotates ``readOnlyHint: true`` is a read."""


@dataclass(frozen=True)
class TaskRule:
    """Which task a ``tools/call`` runs under: per client session, named by a header or an argument, or fixed."""

    by: TaskBy = "session"
    header: str | None = None
    argument: str | None = None
    id: str | None = None


@dataclass(frozen=True)
class ProxyConfig:
    """Everything ``loopguard mcp`` is told (see the module for the file)."""

    upstream: Upstream
    task: TaskRule = field(default_factory=TaskRule)
    budget: Budget = field(default_factory=lambda: Budget(model_turns=0, tool_executions=20))
    policy: Policy | None = None
    tools: Mapping[str, ToolSpec] = field(default_factory=dict)
    approvals: frozenset[str] = frozenset()
    """Declared tools whose every new call waits for an operator's approval."""
    unguarded: Mapping[str, str] = field(default_factory=dict)
    """Tools the operator lets run undeclared, each with why (``[upstream] unguarded``: the explicit opt-out,
    ``RunOptions.unguarded``, each run recorded in the task's trace)."""


def load_config(path: str | Path) -> ProxyConfig:
    """Read and validate the TOML file at ``path`` (:class:`ConfigError` with one line per problem)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    return parse_config(data)


def parse_config(data: Mapping[str, Any]) -> ProxyConfig:
    """Validate a parsed configuration (see :func:`load_config`)."""
    unknown = sorted(set(data) - {"upstream", "task", "budget", "policy", "tools"})
    if unknown:
        raise ConfigError(f"unknown section {unknown[0]!r} (known: upstream, task, budget, policy, tools)")
    tools, approvals = _tools(_table(data, "tools"))
    upstream = _table(data, "upstream", required=True)
    unguarded = upstream.pop("unguarded", {})
    if not isinstance(unguarded, dict) or not all(
        isinstance(n, str) and n and isinstance(why, str) and why.strip() for n, why in unguarded.items()
    ):
        raise ConfigError('[upstream] unguarded: tool names, each with why: unguarded = { ping = "a health check" }')
    return ProxyConfig(
        upstream=_upstream(upstream),
        task=_task(_table(data, "task")),
        budget=_budget(_table(data, "budget")),
        policy=_policy(_table(data, "policy")),
        tools=tools,
        approvals=approvals,
        unguarded=dict(unguarded),
    )


def _table(data: Mapping[str, Any], name: str, *, required: bool = False) -> dict[str, Any]:
    value = data.get(name)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"[{name}]: a table is needed here")
    return dict(value)


def _upstream(table: dict[str, Any]) -> Upstream:
    _only(table, "upstream", {"command", "url", "name", "trusted"})
    command, url = table.get("command"), table.get("url")
    if (command is None) == (url is None):
        raise ConfigError('[upstream]: give command = [...] (a stdio server) or url = "http..."')
    if command is not None and (
        not isinstance(command, list) or not command or not all(isinstance(p, str) and p for p in command)
    ):
        raise ConfigError('[upstream] command: a non-empty list of strings, e.g. ["python", "server.py"]')
    if url is not None and (not isinstance(url, str) or not url.startswith(("http://", "https://"))):
        raise ConfigError('[upstream] url: an http:// or https:// URL, e.g. "http://127.0.0.1:9000/mcp"')
    name, trusted = table.get("name", "upstream"), table.get("trusted", False)
    if not isinstance(name, str) or not name or len(name) > 64 or not name.replace("-", "").replace("_", "").isalnum():
        raise ConfigError("[upstream] name: letters, digits, - and _ (at most 64)")
    if not isinstance(trusted, bool):
        raise ConfigError("[upstream] trusted: true or false")
    return Upstream(tuple(command or ()), url, name, trusted)


def _task(table: dict[str, Any]) -> TaskRule:
    _only(table, "task", {"by", "header", "argument", "id"})
    by = table.get("by", "session")
    needs = {"session": None, "header": "header", "argument": "argument", "fixed": "id"}
    if by not in needs:
        raise ConfigError('[task] by: one of "session", "header", "argument", "fixed"')
    key = needs[by]
    value = table.get(key) if key is not None else None
    if key is not None and (not isinstance(value, str) or not value.strip() or len(value) > 200):
        raise ConfigError(f'[task] by = "{by}" needs {key} = "..." (a non-empty string)')
    extra = sorted(k for k in ("header", "argument", "id") if k in table and k != key)
    if extra:
        raise ConfigError(f'[task] {extra[0]} does not apply to by = "{by}"')
    return TaskRule(by, **({key: value.strip()} if key is not None and isinstance(value, str) else {}))


def _count(table: dict[str, Any], where: str, name: str, *, default: int | None = None) -> int | None:
    value = table.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"[{where}] {name}: an integer >= 0")
    return value


def _budget(table: dict[str, Any]) -> Budget:
    _only(table, "budget", {"tool_executions", "deadline"})
    executions = _count(table, "budget", "tool_executions", default=20)
    deadline = table.get("deadline")
    if deadline is not None and (isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or deadline <= 0):
        raise ConfigError("[budget] deadline: seconds (> 0) from the task's first call")
    assert executions is not None
    return Budget(model_turns=0, tool_executions=executions, deadline=deadline)


def _policy(table: dict[str, Any]) -> Policy | None:
    names = {"max_same_call", "max_stalled", "max_unverified"}
    _only(table, "policy", names)
    if not names & table.keys():
        return None
    default = Policy()

    def limit(name: str) -> int:
        return _count(table, "policy", name, default=getattr(default, name)) or 0

    return Policy(
        max_same_call=limit("max_same_call"), max_stalled=limit("max_stalled"), max_unverified=limit("max_unverified")
    )


def _tools(table: dict[str, Any]) -> tuple[dict[str, ToolSpec], frozenset[str]]:
    tools: dict[str, ToolSpec] = {}
    approvals: set[str] = set()
    for name, entry in table.items():
        if not isinstance(entry, dict):
            raise ConfigError(f"[tools.{name}]: a table is needed here")
        _only(entry, f"tools.{name}", _TOOL_KEYS)
        tools[name] = _tool(name, entry)
        approval = entry.get("approval", False)
        if not isinstance(approval, bool):
            raise ConfigError(f"[tools.{name}] approval: true or false")
        if approval:
            approvals.add(name)
    return tools, frozenset(approvals)


def _tool(name: str, entry: dict[str, Any]) -> ToolSpec:
    kind = entry.get("kind", "read")
    if kind not in KINDS:
        raise ConfigError(f"[tools.{name}] kind: one of {', '.join(sorted(KINDS))}")
    template = entry.get("operation_id")
    if template is not None and kind != "write":
        raise ConfigError(f"[tools.{name}] operation_id: only a write names its operation")
    verify = entry.get("verify", "result" if kind == "write" else None)
    try:
        return declare_tool(
            name,
            kind=kind,
            operation_id=_operation_id(name, template) if kind == "write" else None,
            verify=_verify(name, verify),
            max_executions=_count(entry, f"tools.{name}", "max_executions"),
            probe=_function(name, "probe", entry["probe"]) if "probe" in entry else None,
            progress_key=entry.get("progress_key"),
        )
    except ValueError as exc:
        raise ConfigError(f"[tools.{name}]: {exc}") from None


def _operation_id(name: str, template: Any) -> Callable[[dict[str, Any]], str]:
    if template is None:
        return canonical_operation_id(name)
    if not isinstance(template, str) or not template:
        raise ConfigError(f'[tools.{name}] operation_id: a template such as "refund-{{order_id}}"')
    try:
        fields = [f or "" for _, f, spec, conv in string.Formatter().parse(template) if f is not None or spec or conv]
    except ValueError as exc:
        raise ConfigError(f"[tools.{name}] operation_id: {exc}") from None
    if not fields or not all(f and f.isidentifier() for f in fields):
        raise ConfigError(f'[tools.{name}] operation_id: name arguments as {{field}}, e.g. "refund-{{order_id}}"')
    return templated_operation_id(template, fields)


def _verify(name: str, verify: Any) -> Any:
    if verify is None:
        return None
    if verify == "result":
        return result_verify
    return _function(name, "verify", verify, '"result" or ')


def _function(name: str, key: str, path: Any, also: str = "") -> Any:
    """The function ``package.module:function`` a tool's ``key`` names (its ``verify``, its ``probe``)."""
    if not isinstance(path, str) or path.count(":") != 1:
        raise ConfigError(f'[tools.{name}] {key}: {also}"package.module:function"')
    module, attribute = path.split(":")
    try:
        found = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"[tools.{name}] {key}: cannot load {path!r} ({type(exc).__name__}: {exc})") from None
    if not callable(found):
        raise ConfigError(f"[tools.{name}] {key}: {path!r} is not callable")
    return found


def _only(table: Mapping[str, Any], where: str, known: set[str]) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"[{where}] unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")
