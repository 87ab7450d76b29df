"""Where `metered` finds the client's idempotency key: the tools/call `_meta` behind a framework's context
argument, in the shapes of the official `mcp` package's 1.x (`mcp.server.fastmcp.Context`) and 2.x
(`mcp.server.mcpserver.Context`, the server class renamed `MCPServer`). Both reach it at
`ctx.request_context.meta`: in 1.x an object (`RequestParams.Meta`, a pydantic model with extra fields),
in 2.x a plain dict (`RequestParamsMeta`, a TypedDict); both raise ValueError outside a request.
Standard library only: the classes below copy the attributes metered reads, not the packages."""

from __future__ import annotations

import inspect
import typing
import unittest
from dataclasses import dataclass
from typing import Any, Optional

import _support  # noqa: F401  (puts packages/python/src on sys.path)

from creditgate import Client, invocation_id_for, metered

KEY = "io.creditgate/idempotency-key"


class MetaV1:
    """mcp 1.x `RequestParams.Meta`: `progressToken` plus extra fields, read through model_dump."""

    def __init__(self, **extra: Any) -> None:
        self.progressToken = None
        self.__pydantic_extra__ = extra

    def model_dump(self, by_alias: bool = False) -> dict[str, Any]:
        return {"progressToken": self.progressToken, **self.__pydantic_extra__}


@dataclass
class RequestContextV1:
    """mcp 1.x `mcp.shared.context.RequestContext`."""

    request_id: Any
    meta: Optional[MetaV1]
    session: Any = None
    lifespan_context: Any = None


@dataclass(kw_only=True)
class ServerRequestContextV2:
    """mcp 2.x `mcp.server.context.ServerRequestContext`: `meta` is a dict."""

    session: Any
    lifespan_context: Any
    protocol_version: str
    method: str
    params: Optional[dict[str, Any]] = None
    request_id: Any = None
    meta: Optional[dict[str, Any]] = None
    request: Any = None


class _ContextBase:
    """Both versions' Context: `request_context` is a property that raises outside a request."""

    def __init__(self, request_context: Any = None) -> None:
        self._request_context = request_context

    @property
    def request_context(self) -> Any:
        if self._request_context is None:
            raise ValueError("Context is not available outside of a request")
        return self._request_context


class Context(_ContextBase):
    """Named as both versions name it (metered recognises a context by its name or its request_context)."""


def v1(meta: Optional[MetaV1]) -> Context:
    return Context(RequestContextV1(request_id=1, meta=meta))


def v2(meta: Optional[dict[str, Any]]) -> Context:
    return Context(ServerRequestContextV2(session=None, lifespan_context={}, protocol_version="2026-07-28", method="tools/call", request_id=1, meta=meta))


# No request is ever sent: new_call only derives the invocation id.
client = Client(api_key=f"cg_{'A' * 36}", base_url="http://127.0.0.1:9", retries=0)


def invocation_of(ctx: Context) -> str:
    return metered(client).new_call("search", {"q": "otters", "ctx": ctx}, {"q": "otters"}).invocation_id


class ContextShapesTest(unittest.TestCase):
    def test_the_key_is_read_from_either_version(self) -> None:
        expected = invocation_id_for("search", {"q": "otters"}, "retry-1")
        self.assertTrue(expected.startswith("mcp_"))
        self.assertEqual(invocation_of(v1(MetaV1(**{KEY: "retry-1"}))), expected)
        self.assertEqual(invocation_of(v2({"progress_token": 7, KEY: "retry-1"})), expected)

    def test_no_key_no_meta_or_outside_a_request_is_a_new_call_each_time(self) -> None:
        for ctx in (v1(None), v1(MetaV1()), v2(None), v2({"progress_token": 7}), Context()):
            with self.subTest(ctx=ctx._request_context):
                first, second = invocation_of(ctx), invocation_of(ctx)
                self.assertNotEqual(first, second)
                self.assertFalse(first.startswith("mcp_"))

    def test_the_wrapped_tool_keeps_what_context_injection_reads(self) -> None:
        # MCPServer (and FastMCP) find the context parameter with typing.get_type_hints and build the
        # tool's schema from inspect.signature: both must see through the decorator.
        @metered(client)
        async def search(q: str, ctx: Context) -> str:
            return q

        self.assertEqual(list(inspect.signature(search).parameters), ["q", "ctx"])
        self.assertIs(typing.get_type_hints(search)["ctx"], Context)
        self.assertTrue(inspect.iscoroutinefunction(search))


if __name__ == "__main__":
    unittest.main()
