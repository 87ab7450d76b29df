"""A refusal money could lift, through `metered` and the MCP stand-in (docs/client.md, "What the middleware puts
in _meta"): the tool error names the price, the balance and the top-up link (docs/billing.md, "Top-up link"), or
the budget and when it resets (docs/budgets.md), and carries the service's `payment_required` exactly as the
service sent it. The live service runs with billing available (python.test.ts starts it with the Stripe
stand-in and a credit pack); a deployment's `billing_enabled` flag turns it on or off here."""

from __future__ import annotations

import json
import unittest
import urllib.request
from typing import Any, Optional
from urllib.parse import urlparse

from _mcp_stand_in import StandInMcpClient, StandInMcpServer
from _support import BASE_URL, StandIn, Tenant, admin, balance, create_tenant, forward, live, stdio

from creditgate import Client, MeteringDenied, metered
from creditgate.metered import META_DENIAL, META_PAYMENT_REQUIRED, denial_message, denial_result


class Recorder:
    """A loopback relay to the live service that keeps every check answer it passed back."""

    def __init__(self, case: unittest.TestCase) -> None:
        self.checks: list[dict[str, Any]] = []

        def relay(_: StandIn, handler: Any, body: bytes) -> Any:
            reply = forward(handler, body)
            if handler.path.endswith("/check-entitlement"):
                self.checks.append(json.loads(reply[2]))
            return reply

        self.server = StandIn(handler=relay)
        case.addCleanup(self.server.close)

    def last_refusal(self) -> dict[str, Any]:
        return [c for c in self.checks if not c["allowed"]][-1]


def serve(client: Client, **options: Any) -> tuple[StandInMcpClient, list[str]]:
    server = StandInMcpServer()
    runs: list[str] = []

    @server.tool("search")
    @metered(client, "search", **options)
    def search(q: str) -> str:
        runs.append(q)
        return f"results for {q}"

    return StandInMcpClient(server), runs


def billing(tenant: Tenant, enabled: bool) -> None:
    admin("PUT", f"/api/v1/admin/deployments/{tenant.deployment_id}/flags", {"billing_enabled": enabled})


def text(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


def credits(n: int) -> str:
    return f"{n} credit" if n == 1 else f"{n} credits"


@live
class CreditsRefusalTest(unittest.TestCase):
    def test_with_billing_the_error_names_price_balance_and_link_and_carries_payment_required_as_sent(self) -> None:
        t = create_tenant("launch", monthly_credits=0)
        billing(t, True)
        relay = Recorder(self)
        mcp, runs = serve(Client(api_key=t.api_key, base_url=relay.server.url, retries=0), reserve=False)
        result = mcp.call_tool("search", {"q": "otters"})
        self.assertIs(result["isError"], True)

        answer = relay.last_refusal()
        self.assertEqual(answer["reason"], "insufficient_credits")
        sent = answer["payment_required"]
        self.assertEqual(sorted(sent), ["credits_available", "credits_required", "reason", "top_up_url"])
        self.assertEqual((sent["reason"], sent["credits_available"]), ("insufficient_credits", 0))
        self.assertEqual(result["_meta"][META_PAYMENT_REQUIRED], sent)

        message = text(result)
        self.assertEqual(
            message,
            f'Not enough credits to run "search": it costs {credits(sent["credits_required"])} and the balance is 0 credits. '
            f'Buy credits at {sent["top_up_url"]} (the link is valid for 30 minutes), then call the tool again.',
        )
        denial = result["_meta"][META_DENIAL]
        self.assertEqual((denial["reason"], denial["tool_name"], denial["message"]), ("insufficient_credits", "search", message))
        # The link is the service's page selling a credit pack for this deployment.
        with urllib.request.urlopen(BASE_URL.rstrip("/") + urlparse(sent["top_up_url"]).path, timeout=10) as page:
            self.assertEqual(page.status, 200)
        self.assertEqual(runs, [])
        self.assertEqual((balance(t)["monthly_used"], balance(t)["reserved"]), (0, 0))

    def test_with_a_reservation_the_balance_is_unknown_to_the_refusal(self) -> None:
        t = create_tenant("launch", monthly_credits=0)
        billing(t, True)
        relay = Recorder(self)
        mcp, _ = serve(Client(api_key=t.api_key, base_url=relay.server.url, retries=0))
        result = mcp.call_tool("search", {"q": "otters"})
        sent = relay.last_refusal()["payment_required"]
        self.assertIsNone(sent["credits_available"])
        self.assertEqual(result["_meta"][META_PAYMENT_REQUIRED], sent)
        self.assertIn("the balance is unlimited or unknown", text(result))
        self.assertIn(sent["top_up_url"], text(result))

    def test_without_billing_the_refusal_names_price_and_balance_with_no_link(self) -> None:
        t = create_tenant("launch", monthly_credits=0)
        billing(t, False)
        relay = Recorder(self)
        mcp, runs = serve(Client(api_key=t.api_key, base_url=relay.server.url, retries=0), reserve=False)
        result = mcp.call_tool("search", {"q": "otters"})
        self.assertIs(result["isError"], True)
        sent = relay.last_refusal()["payment_required"]
        self.assertEqual(sent, {"reason": "insufficient_credits", "credits_required": 1, "credits_available": 0})
        self.assertEqual(result["_meta"][META_PAYMENT_REQUIRED], sent)
        self.assertEqual(
            text(result),
            'Not enough credits to run "search": it costs 1 credit and the balance is 0 credits. '
            "Buy credits or wait for the monthly allocation to reset, then call the tool again.",
        )
        self.assertEqual(result["_meta"][META_DENIAL]["reason"], "insufficient_credits")
        self.assertEqual(runs, [])

    def test_the_exception_carries_the_same_sentence(self) -> None:
        t = create_tenant("launch", monthly_credits=0)
        billing(t, True)

        @metered(stdio(t), reserve=False)
        def search(q: str) -> str:
            return q

        with self.assertRaises(MeteringDenied) as caught:
            search("x")
        self.assertIn("/console/top-up/", caught.exception.message)
        self.assertEqual(denial_result(caught.exception)["_meta"][META_PAYMENT_REQUIRED]["reason"], "insufficient_credits")


@live
class BudgetRefusalTest(unittest.TestCase):
    def test_the_error_names_the_budget_and_its_reset_and_carries_payment_required_as_sent(self) -> None:
        t = create_tenant("launch", scopes=("read", "write", "admin"))
        budget = stdio(t).budgets.create(t.organization_id, scope="organization", limit_credits=1, window="week")
        relay = Recorder(self)
        mcp, runs = serve(Client(api_key=t.api_key, base_url=relay.server.url, retries=0))
        self.assertFalse(mcp.call_tool("search", {"q": "first"}).get("isError"))
        result = mcp.call_tool("search", {"q": "second"})
        self.assertIs(result["isError"], True)

        sent = relay.last_refusal()["payment_required"]
        self.assertEqual((sent["reason"], sent["budget_id"], sent["resets_at"]), ("budget_exceeded", budget["id"], budget["resets_at"]))
        self.assertNotIn("top_up_url", sent)
        self.assertEqual(result["_meta"][META_PAYMENT_REQUIRED], sent)
        self.assertEqual(
            text(result),
            f'"search" would go over the spending budget {budget["id"]} of this workspace (it costs {credits(sent["credits_required"])}), '
            f"so it did not run and nothing was charged. The budget's window resets at {budget['resets_at']}. "
            "Buying credits does not lift a budget: wait for its window to reset, or ask the workspace owner to raise it.",
        )
        denial = result["_meta"][META_DENIAL]
        self.assertEqual((denial["budget_id"], denial["resets_at"]), (budget["id"], budget["resets_at"]))
        self.assertEqual(runs, ["first"])


class MessageTest(unittest.TestCase):
    """The sentences are the TypeScript middleware's (mcp/results.ts), word for word."""

    def test_credits(self) -> None:
        payment: dict[str, Any] = {"reason": "insufficient_credits", "credits_required": 1, "credits_available": 0}
        self.assertEqual(
            denial_message("insufficient_credits", "search", "launch", None, payment_required=payment),
            'Not enough credits to run "search": it costs 1 credit and the balance is 0 credits. '
            "Buy credits or wait for the monthly allocation to reset, then call the tool again.",
        )
        linked = {**payment, "credits_required": 3, "credits_available": None, "top_up_url": "https://cg.example/console/top-up/abc"}
        self.assertEqual(
            denial_message("insufficient_credits", "search", "launch", None, payment_required=linked),
            'Not enough credits to run "search": it costs 3 credits and the balance is unlimited or unknown. '
            "Buy credits at https://cg.example/console/top-up/abc (the link is valid for 30 minutes), then call the tool again.",
        )

    def test_a_result_without_payment_required_has_only_the_denial(self) -> None:
        denied = MeteringDenied("sandbox_tier", "search", denial_message("sandbox_tier", "search", "sandbox", None), tier="sandbox")
        result = denial_result(denied)
        self.assertEqual(
            result,
            {
                "isError": True,
                "content": [{"type": "text", "text": denied.message}],
                "_meta": {META_DENIAL: {"reason": "sandbox_tier", "tool_name": "search", "tier": "sandbox", "message": denied.message}},
            },
        )

    def test_budget(self) -> None:
        payment: Optional[dict[str, Any]] = {
            "reason": "budget_exceeded",
            "credits_required": 2,
            "credits_available": None,
            "budget_id": "b-1",
            "resets_at": "2026-03-02T00:00:00.000Z",
        }
        self.assertEqual(
            denial_message("budget_exceeded", "search", None, None, payment_required=payment),
            '"search" would go over the spending budget b-1 of this workspace (it costs 2 credits), so it did not run and nothing was charged. '
            "The budget's window resets at 2026-03-02T00:00:00.000Z. "
            "Buying credits does not lift a budget: wait for its window to reset, or ask the workspace owner to raise it.",
        )


if __name__ == "__main__":
    unittest.main()
