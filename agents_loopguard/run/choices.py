"""What a ``tool_choice`` asks for, in any API's shape (Chat Completions, Responses, the Agents SDK)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["forced_name", "forces_tool"]


def forces_tool(choice: Any) -> bool:
    """True when ``tool_choice`` demands a tool call ("required", a tool name, a dict naming one).

    >>> forces_tool("required"), forces_tool({"type": "function", "name": "f"}), forces_tool("auto")
    (True, True, False)
    """
    return choice is not None and choice not in ("auto", "none")


def forced_name(choice: Any) -> str | None:
    """The function a ``tool_choice`` forces, in any API's shape (``"f"``, ``{"type": "function", "name": "f"}``,
    ``{"type": "function", "function": {"name": "f"}}``), or ``None``."""
    if isinstance(choice, str):
        return None if choice in ("auto", "none", "required") else choice
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else choice.get("name")
        return name if isinstance(name, str) else None
    return None
