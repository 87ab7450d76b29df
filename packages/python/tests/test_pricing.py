"""Prices up front (docs/client.md, Prices in tools/list) with the Python integration: `ToolPricing` on
the plain tools/list and CallToolResult dicts of a stand-in MCP server (_mcp_stand_in.py), against the
live service through a recording relay. The clock is ToolPricing's `now`, moved by hand."""

from __future__ import annotations

import threading
import time
import unittest
import urllib.error
import urllib.request
import uuid
from typing import Any, Optional

from _mcp_stand_in import StandInMcpClient, StandInMcpServer
from _support import BASE_URL, SERVICE_KEY, StandIn, admin, create_tenant, live

from creditgate import META_PRICING, Client, CreditgateError, ToolPricing, metered
from creditgate.metered import PRICING_REVALIDATE


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class Relay:
    """Forwards every request to the live service with its headers (If-None-Match in, ETag out) and
    records the cost table's requests: status, If-None-Match sent, ETag and body size answered."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.down = False
        self._lock = threading.Lock()
        self.stand_in = StandIn(handler=lambda _s, handler, body: self._forward(handler, body))
        self.url = self.stand_in.url

    def costs(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.seen)

    def _forward(self, handler: Any, body: bytes) -> Optional[tuple[int, dict[str, str], bytes]]:
        if self.down:
            return None  # the connection closes without an answer
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in ("host", "content-length", "connection")}
        request = urllib.request.Request(BASE_URL.rstrip("/") + handler.path, data=body or None, headers=headers, method=handler.command)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                status, answer_headers, payload = response.status, dict(response.headers.items()), response.read()
        except urllib.error.HTTPError as err:
            status, answer_headers, payload = err.code, dict(err.headers.items()), err.read()
        kept = {k: v for k, v in answer_headers.items() if k.lower() in ("content-type", "etag", "idempotent-replayed")}
        if handler.path.endswith("/credit-costs"):
            with self._lock:
                self.seen.append({"status": status, "if_none_match": handler.headers.get("if-none-match"), "etag": kept.get("ETag", kept.get("etag")), "bytes": len(payload)})
        return status, kept, payload

    def close(self) -> None:
        self.stand_in.close()


def priced_tool(credits: int) -> tuple[str, str]:
    """A fresh action at `credits` and a fresh tool mapped to it (the tables are shared by the run's tests)."""
    action = f"py-priced-{uuid.uuid4().hex[:12]}"
    tool = f"py-priced-tool-{uuid.uuid4().hex[:12]}"
    admin("PUT", f"/api/v1/admin/credit-costs/{action}", {"credits": credits})
    admin("PUT", f"/api/v1/admin/tool-actions/{tool}", {"action": action})
    return action, tool


def wait_for(condition: Any, what: str, timeout: float = 5.0) -> None:
    until = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > until:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@live
class ToolPricingTest(unittest.TestCase):
    def setUp(self) -> None:
        self.relay = Relay()
        self.addCleanup(self.relay.close)
        self.clock = Clock()

    def server(self, client: Client, mapped: str, **options: Any) -> tuple[StandInMcpServer, StandInMcpClient, ToolPricing]:
        server = StandInMcpServer()
        pricing = ToolPricing(client, exclude=["free"], notify=server.send, now=self.clock, **options)
        server.pricing = pricing
        self.addCleanup(pricing.stop)

        @server.tool(mapped, "Mapped to an action of this test")
        @metered(client, mapped)
        def mapped_tool() -> str:
            return "ok"

        @server.tool("search", "Not mapped: platform_basic")
        @metered(client)
        def search(q: str = "") -> str:
            return f"results for {q}"

        @server.tool("free", "Excluded: not metered")
        def free() -> str:
            return "free"

        @server.tool("annotated", "Has its own _meta", meta={"example.com/owner": "docs team"})
        @metered(client, "annotated")
        def annotated() -> str:
            return "ok"

        return server, StandInMcpClient(server), pricing

    def test_metered_tools_carry_their_price_an_excluded_one_none_and_a_tools_own_meta_stays(self) -> None:
        tenant = create_tenant("launch")
        action, tool = priced_tool(4)
        for client in (Client(api_key=tenant.api_key, base_url=self.relay.url, retries=0), Client(service_key=SERVICE_KEY, base_url=self.relay.url, retries=0)):
            with self.subTest(mode=client.mode):
                self.relay.seen.clear()
                _, mcp, _ = self.server(client, tool)
                listed = mcp.list_tools()
                self.assertEqual(listed[tool], {META_PRICING: {"credits": 4, "action": action}})
                self.assertEqual(listed["search"], {META_PRICING: {"credits": 1, "action": "platform_basic"}})
                self.assertIsNone(listed["free"])
                self.assertEqual(listed["annotated"], {"example.com/owner": "docs team", META_PRICING: {"credits": 1, "action": "platform_basic"}})
                self.assertEqual([(s["status"], s["if_none_match"]) for s in self.relay.costs()], [(200, None)])
        # The price shown is the price charged.
        stdio = Client(api_key=tenant.api_key, base_url=BASE_URL, retries=0)
        events: list[dict[str, Any]] = []
        metered(stdio, tool, on_event=events.append)(lambda: "ok")()
        [recorded] = [e["result"] for e in events if e["type"] == "recorded"]
        self.assertEqual(recorded["credits_used"], 4)

    def test_tools_restricts_the_priced_tools(self) -> None:
        tenant = create_tenant("launch")
        _, tool = priced_tool(2)
        _, mcp, pricing = self.server(Client(api_key=tenant.api_key, base_url=self.relay.url, retries=0), tool, tools=[tool])
        listed = mcp.list_tools()
        self.assertIn(META_PRICING, listed[tool] or {})
        self.assertIsNone(listed["search"])
        self.assertEqual(listed["annotated"], {"example.com/owner": "docs team"})
        self.assertFalse(pricing.is_metered("search"))

    def test_a_changed_price_reaches_the_client_after_five_minutes_with_list_changed(self) -> None:
        tenant = create_tenant("launch")
        action, tool = priced_tool(4)
        server, mcp, _ = self.server(Client(api_key=tenant.api_key, base_url=self.relay.url, retries=0), tool)
        self.assertEqual(mcp.list_tools()[tool], {META_PRICING: {"credits": 4, "action": action}})
        etag = self.relay.costs()[0]["etag"]
        self.assertRegex(etag, r'^".+"$')

        admin("PUT", f"/api/v1/admin/credit-costs/{action}", {"credits": 9})
        # Before the interval, neither a listing nor a call asks again.
        self.clock.now += PRICING_REVALIDATE - 1
        self.assertEqual(mcp.list_tools()[tool], {META_PRICING: {"credits": 4, "action": action}})
        self.assertFalse(mcp.call_tool("search", {"q": "x"}).get("isError"))
        self.assertEqual(len(self.relay.costs()), 1)
        self.assertEqual(server.notifications(), [])

        # The interval has passed: a tool call revalidates with If-None-Match and finds the new price.
        self.clock.now += 1
        mcp.call_tool("search", {"q": "y"})
        self.assertEqual(server.notifications(), [{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}])
        second = self.relay.costs()[1]
        self.assertEqual((second["status"], second["if_none_match"]), (200, etag))
        self.assertNotEqual(second["etag"], etag)
        self.assertEqual(mcp.list_tools()[tool], {META_PRICING: {"credits": 9, "action": action}})
        self.assertEqual(len(self.relay.costs()), 2)

        # A new mapping is a new price too; the start() timer finds it without a listing or a call.
        admin("PUT", f"/api/v1/admin/tool-actions/{tool}", {"action": "task_advanced"})
        self.clock.now += PRICING_REVALIDATE
        server.pricing.start(every=0.02)  # type: ignore[union-attr]
        wait_for(lambda: len(server.notifications()) == 2, "the second notifications/tools/list_changed")
        self.assertEqual(mcp.list_tools()[tool], {META_PRICING: {"credits": 3, "action": "task_advanced"}})

    def test_an_unchanged_table_is_a_304_without_a_body_and_no_notification(self) -> None:
        tenant = create_tenant("launch")
        action, tool = priced_tool(2)
        server, mcp, _ = self.server(Client(api_key=tenant.api_key, base_url=self.relay.url, retries=0), tool)
        mcp.list_tools()
        first = self.relay.costs()[0]
        self.assertGreater(first["bytes"], 100)
        for round_ in (1, 2):
            self.clock.now += PRICING_REVALIDATE
            mcp.call_tool("search")
            self.assertEqual(self.relay.costs()[round_], {"status": 304, "if_none_match": first["etag"], "etag": first["etag"], "bytes": 0})
        self.assertEqual(mcp.list_tools()[tool], {META_PRICING: {"credits": 2, "action": action}})
        self.assertEqual(len(self.relay.costs()), 3)
        self.assertEqual(server.notifications(), [])

    def test_an_unreachable_platform_lists_without_prices_then_notifies_when_they_come(self) -> None:
        tenant = create_tenant("launch")
        action, tool = priced_tool(5)
        server, mcp, _ = self.server(Client(api_key=tenant.api_key, base_url=self.relay.url, retries=0), tool)
        self.relay.down = True
        with self.assertLogs("creditgate", "WARNING"):
            listed = mcp.list_tools()
        self.assertIsNone(listed[tool])
        self.assertIsNone(listed["free"])
        self.relay.down = False
        self.clock.now += 30
        server.pricing.start(every=0.02)  # type: ignore[union-attr]
        wait_for(lambda: len(server.notifications()) == 1, "notifications/tools/list_changed once the prices are known")
        self.assertEqual(mcp.list_tools()[tool], {META_PRICING: {"credits": 5, "action": action}})


@live
class ConditionalCostsTest(unittest.TestCase):
    def test_credit_costs_if_changed_with_either_credential(self) -> None:
        tenant = create_tenant("launch", scopes=("read",))
        for client in (Client(api_key=tenant.api_key, base_url=BASE_URL, retries=0), Client(service_key=SERVICE_KEY, base_url=BASE_URL, retries=0)):
            with self.subTest(mode=client.mode):
                full = client.credit_costs_if_changed()
                self.assertFalse(full.not_modified)
                assert full.costs is not None and full.etag is not None
                self.assertIn({"action": "platform_basic", "credits": 1, "description": None}, full.costs["costs"])
                self.assertIsInstance(full.costs["tools"], list)
                again = client.credit_costs_if_changed(full.etag)
                self.assertEqual((again.not_modified, again.etag, again.costs), (True, full.etag, None))
        no_read = create_tenant("launch", scopes=("write",))
        with self.assertRaises(CreditgateError) as caught:
            Client(api_key=no_read.api_key, base_url=BASE_URL, retries=0).credit_costs_if_changed()
        self.assertEqual((caught.exception.status, caught.exception.code), (403, "INSUFFICIENT_SCOPE"))


class ToolPricingShapeTest(unittest.TestCase):
    def test_a_listing_without_tools_and_deployment_credentials(self) -> None:
        pricing = ToolPricing(Client(api_key="cg_x", base_url="http://127.0.0.1:9", retries=0), now=lambda: 0.0)
        self.assertEqual(pricing.tools_list({"nextCursor": "x"}), {"nextCursor": "x"})
        with self.assertRaises(CreditgateError):
            ToolPricing(Client(deployment_id="d", deployment_secret="s", base_url="http://127.0.0.1:9"))


if __name__ == "__main__":
    unittest.main()
