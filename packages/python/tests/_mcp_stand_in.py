"""A small stand-in for a Python MCP server framework (the `mcp` package is not installed here): tools
registered as functions, JSON-RPC 2.0 messages handled as plain dicts, and what the server sends on its
own (notifications) kept in `sent`, where a transport would write it. It does what a framework does with
`ToolPricing`: hands each `tools/list` result to `pricing.tools_list` and each `CallToolResult` to
`pricing.tool_called`, and sends what `notify` is given. A MeteringDenied becomes the middleware's tool
error (`denial_result`: its text and `_meta`, as a server that catches it returns); another CreditgateError
a plain one, as `MCPServer`/`FastMCP` turn a tool's exception into one."""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping, Optional

import _support  # noqa: F401  (puts packages/python/src on sys.path)

from creditgate import CreditgateError, MeteringDenied, ToolPricing
from creditgate.metered import denial_result


class StandInMcpServer:
    def __init__(self) -> None:
        self.tools: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {}
        self.pricing: Optional[ToolPricing] = None
        self.sent: list[Mapping[str, Any]] = []
        self._sent_lock = threading.Lock()

    def send(self, message: Mapping[str, Any]) -> None:
        """The server's outgoing channel (a notification, from any thread)."""
        with self._sent_lock:
            self.sent.append(dict(message))

    def notifications(self, method: str = "notifications/tools/list_changed") -> list[Mapping[str, Any]]:
        with self._sent_lock:
            return [m for m in self.sent if m.get("method") == method]

    def tool(self, name: str, description: str = "", meta: Optional[Mapping[str, Any]] = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            entry: dict[str, Any] = {"name": name, "description": description, "inputSchema": {"type": "object"}}
            if meta is not None:
                entry["_meta"] = dict(meta)
            self.tools[name] = (fn, entry)
            return fn

        return register

    def handle(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """One JSON-RPC request in, its response out."""
        method = message.get("method")
        params = message.get("params") or {}
        result: dict[str, Any]
        if method == "tools/list":
            result = {"tools": [dict(entry) for _, entry in self.tools.values()]}
            if self.pricing is not None:
                result = self.pricing.tools_list(result)
        elif method == "tools/call":
            fn, _ = self.tools[params["name"]]
            try:
                value = fn(**(params.get("arguments") or {}))
                result = value if isinstance(value, dict) else {"content": [{"type": "text", "text": str(value)}]}
            except MeteringDenied as err:
                result = denial_result(err)
            except CreditgateError as err:
                result = {"isError": True, "content": [{"type": "text", "text": err.message}]}
            if self.pricing is not None:
                result = self.pricing.tool_called(result)
        else:
            return {"jsonrpc": "2.0", "id": message.get("id"), "error": {"code": -32601, "message": f"Method not found: {method}"}}
        return {"jsonrpc": "2.0", "id": message.get("id"), "result": result}


class StandInMcpClient:
    """Sends requests with increasing ids and reads the results, as an MCP client session would."""

    def __init__(self, server: StandInMcpServer) -> None:
        self.server = server
        self._next = 0

    def request(self, method: str, params: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
        self._next += 1
        response = self.server.handle({"jsonrpc": "2.0", "id": self._next, "method": method, **({"params": dict(params)} if params else {})})
        assert response["id"] == self._next and "result" in response, response
        return dict(response["result"])

    def list_tools(self) -> dict[str, Optional[Mapping[str, Any]]]:
        """tools/list as {name: _meta}."""
        return {t["name"]: t.get("_meta") for t in self.request("tools/list")["tools"]}

    def call_tool(self, name: str, arguments: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
        return self.request("tools/call", {"name": name, "arguments": dict(arguments or {})})
