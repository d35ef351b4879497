"""Replays an n8n workflow export: walks its nodes from the webhook, sends each HTTP Request node's request for real.

Only what the example uses is understood, and anything else fails loudly (so the export and this replay cannot
drift apart silently): nodes ``webhook`` (the entry), ``httpRequest`` (POST with a JSON body, header credentials,
``onError: continueErrorOutput``), ``if`` (boolean ``true`` conditions, ``and``) and ``noOp``; expressions
``{{ $json.a.b }}`` and ``{{ $('Node').item.json.a.b }}``, whole (``={{ ... }}``) or inside a template string, where
a value is inserted as n8n does (a string as is, null as nothing, other values as JSON).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

__all__ = ["N8nReplay", "Run"]

_EXPRESSION = re.compile(r"\{\{\s*(.*?)\s*\}\}")
_PATH = re.compile(r"^(?:\$json|\$\('([^']+)'\)\.item\.json)((?:\.[A-Za-z_][A-Za-z0-9_]*)*)$")


@dataclass
class Run:
    """One execution: the nodes in the order they ran, and each node's output item."""

    executed: list[str] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)


class N8nReplay:
    def __init__(
        self,
        workflow: Mapping[str, Any],
        *,
        hosts: Mapping[str, str],
        credentials: Mapping[str, Mapping[str, str]],
    ) -> None:
        self.nodes = {node["name"]: node for node in workflow["nodes"]}
        self.connections = workflow["connections"]
        self.hosts = dict(hosts)  # the export's base URLs -> where the test's servers listen
        self.credentials = credentials  # credential id -> headers (the export holds no secret)
        [self.entry] = [n for n in self.nodes.values() if n["type"] == "n8n-nodes-base.webhook"]

    def run(self, body: Mapping[str, Any], client: httpx.Client) -> Run:
        """Deliver ``body`` to the webhook and run the workflow to its end."""
        run = Run()
        item: Any = {"headers": {}, "params": {}, "query": {}, "body": dict(body)}
        self._visit(self.entry["name"], item, run, client)
        return run

    # --- walking ----------------------------------------------------------------------------------------------

    def _visit(self, name: str, item: Any, run: Run, client: httpx.Client) -> None:
        node = self.nodes[name]
        run.executed.append(name)
        run.outputs[name] = item
        kind = node["type"]
        if kind == "n8n-nodes-base.webhook":
            branch, out = 0, item
        elif kind == "n8n-nodes-base.httpRequest":
            branch, out = self._http(node, item, run, client)
            run.outputs[name] = out
        elif kind == "n8n-nodes-base.if":
            branch, out = (0 if self._condition(node, item, run) else 1), item
        elif kind == "n8n-nodes-base.noOp":
            return
        else:
            raise NotImplementedError(f"node type {kind} is not replayed")
        outputs = self.connections.get(name, {}).get("main", [])
        for link in outputs[branch] if branch < len(outputs) else []:
            self._visit(link["node"], out, run, client)

    def _condition(self, node: Mapping[str, Any], item: Any, run: Run) -> bool:
        spec = node["parameters"]["conditions"]
        if spec.get("combinator") != "and":
            raise NotImplementedError("only 'and' conditions are replayed")
        results = []
        for condition in spec["conditions"]:
            operator = condition["operator"]
            if operator != {"type": "boolean", "operation": "true", "singleValue": True}:
                raise NotImplementedError(f"condition {operator} is not replayed")
            value = self._value(condition["leftValue"], item, run)
            if not isinstance(value, bool):  # typeValidation strict
                raise TypeError(f"{node['name']}: {condition['leftValue']} is {value!r}, not a boolean")
            results.append(value)
        return all(results)

    def _http(self, node: Mapping[str, Any], item: Any, run: Run, client: httpx.Client) -> tuple[int, Any]:
        p = node["parameters"]
        if (p["method"], p.get("specifyBody"), p.get("genericAuthType")) != ("POST", "json", "httpHeaderAuth"):
            raise NotImplementedError(f"{node['name']}: only POST with a JSON body and header auth is replayed")
        url = str(self._value(p["url"], item, run))
        for exported, actual in self.hosts.items():
            if url.startswith(exported):
                url = actual + url[len(exported) :]
        body = json.loads(str(self._value(p["jsonBody"], item, run)))
        headers = dict(self.credentials[node["credentials"]["httpHeaderAuth"]["id"]])
        continue_on_error = node.get("onError") == "continueErrorOutput"
        try:
            response = client.post(url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            if continue_on_error:
                return 1, {"error": {"message": type(exc).__name__}}
            raise
        if response.status_code >= 400:
            if continue_on_error:
                return 1, {"error": {"message": f"HTTP {response.status_code}", "body": response.text}}
            raise AssertionError(f"{node['name']}: HTTP {response.status_code}: {response.text}")
        return 0, response.json()

    # --- expressions ------------------------------------------------------------------------------------------

    def _lookup(self, expression: str, item: Any, run: Run) -> Any:
        match = _PATH.match(expression)
        if not match:
            raise NotImplementedError(f"expression {expression!r} is not replayed")
        value = item if match.group(1) is None else run.outputs[match.group(1)]
        for part in filter(None, match.group(2).split(".")):
            value = value.get(part) if isinstance(value, dict) else None
        return value

    def _value(self, parameter: Any, item: Any, run: Run) -> Any:
        if not (isinstance(parameter, str) and parameter.startswith("=")):
            return parameter
        template = parameter[1:]
        whole = _EXPRESSION.fullmatch(template.strip())
        if whole:
            return self._lookup(whole.group(1), item, run)

        def insert(match: re.Match[str]) -> str:
            value = self._lookup(match.group(1), item, run)
            return "" if value is None else value if isinstance(value, str) else json.dumps(value)

        return _EXPRESSION.sub(insert, template)
