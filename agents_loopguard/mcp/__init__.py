"""MCP: ``loopguard mcp``, a proxy that puts the guard in front of any MCP server for any MCP client
(:mod:`.proxy`, configured by one TOML file: :mod:`.config`), and what an MCP tool's result means to the guard in
every framework (:mod:`.verify`). The in-process paths (the Agents SDK's ``mcp_servers``, ADK's ``McpToolset``)
declare MCP tools by name in ``RunOptions.tools`` like any tool; see docs/mcp.md.

Needs the ``mcp`` extra (``pip install 'agents-loopguard[mcp]'``: the ``mcp`` package, 2.x).
"""
