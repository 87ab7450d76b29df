"""Every operation of the client against the live creditgate; effects are read back through the operator API."""

from __future__ import annotations

import json
import unittest
import uuid

from _support import BASE_URL, SERVICE_KEY, StandIn, balance, create_tenant, deployment, forward, live, map_tool, service, stdio

from creditgate import CacheOptions, Client, CreditgateError


@live
class StdioModeTest(unittest.TestCase):
    def test_check_allowed_and_a_sandbox_denial_is_an_answer(self) -> None:
        t = create_tenant("launch")
        advanced = map_tool("task_advanced")
        answer = stdio(t).stdio.check_entitlement(advanced)
        self.assertEqual((answer["allowed"], answer["credit_cost"], answer["tier"], answer["reason"]), (True, 3, "launch", None))
        sandbox = stdio(create_tenant("sandbox")).stdio.check_entitlement("search")
        self.assertEqual((sandbox["allowed"], sandbox["reason"]), (False, "sandbox_tier"))

    def test_record_generates_an_invocation_id_and_a_repeat_deducts_once(self) -> None:
        t = create_tenant("launch")
        c = stdio(t)
        first = c.stdio.record_usage("search", metadata={"q": "otters"})
        self.assertEqual((first["success"], first["credits_used"], first["credits_remaining"], first["replayed"]), (True, 1, 1999, False))
        self.assertTrue(first["invocation_id"])
        again = c.stdio.record_usage("search", invocation_id=first["invocation_id"], metadata={"q": "otters"})
        self.assertEqual((again["usage_id"], again["replayed"]), (first["usage_id"], True))
        self.assertEqual(balance(t)["monthly_used"], 1)

    def test_reserve_get_invocation_release(self) -> None:
        t = create_tenant("launch")
        c = stdio(t)
        advanced = map_tool("task_advanced")
        invocation = f"inv/{uuid.uuid4()}?#%"  # path-unsafe characters: the client encodes them
        held = c.stdio.check_entitlement(advanced, reserve=True, invocation_id=invocation)
        self.assertEqual((held["allowed"], held["credit_cost"], held.get("invocation_id")), (True, 3, invocation))
        self.assertIn("reservation_expires_at", held)
        status = c.get_invocation(invocation)
        self.assertEqual((status["status"], status["reserved_credits"], status["deployment_id"], status["usage_id"]), ("reserved", 3, t.deployment_id, None))
        self.assertEqual(balance(t)["reserved"], 3)
        self.assertEqual(c.release_reservation(invocation), {"invocation_id": invocation, "status": "released", "released_credits": 3})
        self.assertEqual(c.get_invocation(invocation)["status"], "released")
        self.assertEqual(balance(t)["available"], 2000)

    def test_reserve_without_an_id_gets_one(self) -> None:
        c = stdio(create_tenant("launch"))
        held = c.stdio.check_entitlement("search", reserve=True)
        self.assertTrue(held.get("invocation_id"))
        self.assertEqual(c.get_invocation(held["invocation_id"])["status"], "reserved")

    def test_reserve_record_then_the_service_refunds(self) -> None:
        t = create_tenant("launch")
        c = stdio(t)
        invocation = f"inv-{uuid.uuid4()}"
        c.stdio.check_entitlement("search", reserve=True, invocation_id=invocation)
        recorded = c.stdio.record_usage("search", invocation_id=invocation)
        self.assertEqual(c.get_invocation(invocation)["status"], "recorded")
        usage_id = recorded["usage_id"]
        assert usage_id is not None
        with self.assertRaises(CreditgateError) as caught:
            c.refund_usage(usage_id, reason="slow")
        self.assertEqual((caught.exception.code, caught.exception.status), ("FORBIDDEN", 403))
        key = str(uuid.uuid4())
        refund = service().refund_usage(usage_id, reason="tool failed", idempotency_key=key)
        self.assertEqual((refund["credits_refunded"], refund["total_refunded"], refund["credits_remaining"]), (1, 1, 2000))
        self.assertEqual(service().refund_usage(usage_id, reason="tool failed", idempotency_key=key)["refund_id"], refund["refund_id"])
        self.assertEqual(c.get_invocation(invocation)["status"], "refunded")


@live
class ServiceModeTest(unittest.TestCase):
    def test_resolve_check_record_costs(self) -> None:
        t = create_tenant("launch", purchased=10)
        s = service()
        resolved = s.service.resolve_deployment(t.user_id)
        self.assertEqual(resolved, {"deployment_id": t.deployment_id, "organization_id": t.organization_id, "tier": "launch", "mcp_enabled": True, "error": None})
        nobody = s.service.resolve_deployment(f"nobody-{uuid.uuid4()}")
        self.assertEqual((nobody["deployment_id"], nobody["error"]), (None, "no_deployment_found"))
        rag = map_tool("rag_query")
        self.assertEqual(s.service.check_entitlement(t.deployment_id, rag), {"allowed": True, "tier": "launch", "credit_cost": 2, "credits_available": 2010, "reason": None})
        used = s.service.record_usage(t.deployment_id, rag, mcp_user_id="end-user-7")
        self.assertEqual((used["success"], used["credits_used"], used["credits_remaining"]), (True, 2, 2008))
        invocation_id = used["invocation_id"]
        assert invocation_id is not None
        self.assertEqual(s.get_invocation(invocation_id, deployment_id=t.deployment_id)["status"], "recorded")
        costs = {c["action"]: c["credits"] for c in s.service.credit_costs()["costs"]}
        self.assertEqual((costs["platform_basic"], costs["crew_execute"], costs["task_advanced"]), (1, 5, 3))

    def test_release_with_the_service_key_names_the_deployment(self) -> None:
        t = create_tenant("launch")
        s = service()
        invocation = f"inv-{uuid.uuid4()}"
        s.service.check_entitlement(t.deployment_id, "search", reserve=True, invocation_id=invocation)
        released = s.release_reservation(invocation, deployment_id=t.deployment_id)
        self.assertEqual((released["status"], released["released_credits"]), ("released", 1))


@live
class DeploymentCredentialsTest(unittest.TestCase):
    def test_snapshot_ai_quota_webhook_quota(self) -> None:
        t = create_tenant("launch", purchased=5)
        d = deployment(t)
        snapshot = d.entitlements.check()
        self.assertEqual((snapshot["status"], snapshot["tier"], snapshot["next_check_seconds"]), ("active", "launch", 300))
        self.assertEqual(snapshot["features"]["support_level"], "email")
        self.assertEqual(snapshot["quotas"]["ai_tokens"]["limit"], 10_000)
        quota = d.ai.quota()
        self.assertEqual((quota["credits_available"], quota["credits_per_advanced"], quota["limit"]), (2005, 3, 10_000))
        self.assertEqual(d.webhooks.quota()["creditsAvailable"], 2005)

    def test_webhook_send_delivers_and_charges_once_deliveries_read_it_back(self) -> None:
        received: list[bytes] = []
        receiver = StandIn(handler=lambda s, h, body: (received.append(body), (202, {"content-type": "text/plain"}, b"accepted"))[1])
        self.addCleanup(receiver.close)
        t = create_tenant("launch")
        d = deployment(t)
        key = str(uuid.uuid4())
        sent = d.webhooks.send(f"{receiver.url}/hooks", {"order": 42}, event_type="order.paid", secret="a-secret-of-some-length-000", idempotency_key=key)
        self.assertEqual((sent["success"], sent["statusCode"], sent["responseBody"], sent["creditsUsed"], sent["replayed"]), (True, 202, "accepted", 1, False))
        again = d.webhooks.send(f"{receiver.url}/hooks", {"order": 42}, event_type="order.paid", secret="a-secret-of-some-length-000", idempotency_key=key)
        self.assertEqual((again["webhookId"], again["replayed"]), (sent["webhookId"], True))
        self.assertEqual([json.loads(b) for b in received], [{"order": 42}])
        self.assertIn("x-service-signature", {k.lower() for k in receiver.requests[0]["headers"]})
        self.assertEqual(balance(t)["available"], 1999)
        page = d.webhooks.deliveries(limit=1)
        self.assertEqual([x["id"] for x in page["data"]], [sent["webhookId"]])
        delivery = d.webhooks.delivery(sent["webhookId"])
        self.assertEqual((delivery["status"], delivery["status_code"], delivery["event_type"]), ("delivered", 202, "order.paid"))


@live
class CacheTest(unittest.TestCase):
    def test_snapshot_is_cached_for_next_check_seconds_and_force_refresh_skips_it(self) -> None:
        now = [1000.0]
        d = deployment(create_tenant("launch"), now=lambda: now[0])
        first = d.entitlements.check()
        self.assertIs(d.entitlements.check(), first)
        forced = d.entitlements.check(force_refresh=True)
        self.assertIsNot(forced, first)
        self.assertIs(d.entitlements.check(), forced)
        now[0] += 301
        self.assertIsNot(d.entitlements.check(), forced)

    def test_checks_costs_and_resolves_are_cached_reservations_never(self) -> None:
        t = create_tenant("launch")
        now = [0.0]
        c = stdio(t, now=lambda: now[0])
        check = c.stdio.check_entitlement("search")
        self.assertIs(c.stdio.check_entitlement("search"), check)
        self.assertIsNot(c.stdio.check_entitlement("search", force_refresh=True), check)
        held = c.stdio.check_entitlement("search", reserve=True)
        self.assertIsNot(c.stdio.check_entitlement("search", reserve=True), held)
        now[0] += 301
        self.assertIsNot(c.stdio.check_entitlement("search"), check)
        s = service(now=lambda: now[0])
        costs = s.service.credit_costs()
        self.assertIs(s.service.credit_costs(), costs)
        resolved = s.service.resolve_deployment(t.user_id)
        self.assertIs(s.service.resolve_deployment(t.user_id), resolved)
        c.clear_cache()
        uncached = service(cache=False)
        self.assertIsNot(uncached.service.credit_costs(), uncached.service.credit_costs())
        capped = service(cache=CacheOptions(credit_costs=10 * 3600), now=lambda: now[0])
        kept = capped.service.credit_costs()
        now[0] += 3601  # capped at one hour
        self.assertIsNot(capped.service.credit_costs(), kept)

    def test_an_allowed_check_is_not_reused_once_the_balance_is_below_its_cost(self) -> None:
        t = create_tenant("launch", monthly_credits=0, purchased=3)
        s = service()
        advanced = map_tool("task_advanced")
        self.assertTrue(s.service.check_entitlement(t.deployment_id, advanced)["allowed"])
        s.service.record_usage(t.deployment_id, "search")  # 2 left, below the cost of 3
        self.assertEqual(s.service.check_entitlement(t.deployment_id, advanced)["reason"], "insufficient_credits")


@live
class LostAnswerTest(unittest.TestCase):
    def test_a_record_whose_answer_is_lost_is_retried_and_deducts_once(self) -> None:
        t = create_tenant("launch")
        dropped: list[str] = []

        def relay(stand_in: StandIn, handler: object, body: bytes) -> object:
            reply = forward(handler, body)  # type: ignore[arg-type]
            if not dropped:
                dropped.append("first")
                return None  # the service recorded it; the client never hears
            return reply

        proxy = StandIn(handler=relay)  # type: ignore[arg-type]
        self.addCleanup(proxy.close)
        c = Client(api_key=t.api_key, base_url=proxy.url, retries=2, sleep=lambda s: None)
        result = c.stdio.record_usage("search")
        self.assertEqual(len(proxy.requests), 2)
        bodies = [json.loads(r["body"]) for r in proxy.requests]
        self.assertEqual(bodies[0]["invocation_id"], bodies[1]["invocation_id"])
        self.assertEqual((result["success"], result["replayed"]), (True, True))
        self.assertEqual(balance(t)["monthly_used"], 1)


@live
class MissingCredentialsTest(unittest.TestCase):
    def test_a_method_needing_other_credentials_sends_nothing(self) -> None:
        t = create_tenant("launch")
        c = stdio(t)
        d = deployment(t)
        calls = [
            lambda: c.service.resolve_deployment(t.user_id),
            lambda: c.service.check_entitlement(t.deployment_id, "search"),
            lambda: c.service.record_usage(t.deployment_id, "search"),
            lambda: c.service.credit_costs(),
            lambda: c.entitlements.check(),
            lambda: c.ai.quota(),
            lambda: c.webhooks.send("http://127.0.0.1:9/", {}),
            lambda: d.stdio.check_entitlement("search"),
            lambda: d.stdio.record_usage("search"),
            lambda: d.get_invocation("x"),
        ]
        for call in calls:
            with self.assertRaises(CreditgateError) as caught:
                call()
            self.assertEqual((caught.exception.code, caught.exception.status), ("MISSING_CREDENTIALS", None))
        self.assertEqual(balance(t)["monthly_used"], 0)
        self.assertEqual(Client(service_key=SERVICE_KEY, base_url=BASE_URL).mode, "service")
        self.assertEqual(c.mode, "stdio")
        self.assertEqual(d.mode, "deployment")
        self.assertTrue(c.base_url.endswith("/"))


if __name__ == "__main__":
    unittest.main()
