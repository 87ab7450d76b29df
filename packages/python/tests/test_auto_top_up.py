"""The auto top-up calls (docs/billing.md, "Auto top-up"): against the live service, which runs with
billing available (a Stripe key, the Stripe stand-in's, and the credit pack ``small``: see
packages/client/test/python.test.ts); the retry rules against stand-in servers."""

from __future__ import annotations

import unittest
import uuid
from typing import Any, Callable

from _support import StandIn, admin, create_tenant, deployment, json_reply, live, stdio, Sleeps, Tenant

from creditgate import AutoTopUp, Client, CreditgateError

OFF: AutoTopUp = {
    "enabled": False,
    "below_credits": None,
    "pack": None,
    "max_per_month": None,
    "consecutive_failures": 0,
    "disabled_reason": None,
    "updated_at": None,
}


def managing() -> Tenant:
    """A tenant (launch: billing_enabled) whose API key may manage billing (admin)."""
    return create_tenant("launch", scopes=("read", "write", "admin"))


def error_of(call: Callable[[], object]) -> CreditgateError:
    try:
        call()
    except CreditgateError as err:
        return err
    raise AssertionError("expected a CreditgateError")


def missing_of(err: CreditgateError) -> Any:
    return err.body["details"]["missing"]


@live
class AutoTopUpCallsTest(unittest.TestCase):
    def test_never_set_it_reads_as_off(self) -> None:
        t = managing()
        self.assertEqual(stdio(t).auto_top_up.get(t.organization_id), OFF)

    def test_enabling_without_a_saved_card_is_a_conflict_naming_payment_method_and_changes_nothing(self) -> None:
        # A fresh tenant has no Stripe customer, so no saved payment method.
        t = managing()
        c = stdio(t)
        err = error_of(lambda: c.auto_top_up.set(t.organization_id, enabled=True, below_credits=500, pack="small", max_per_month=5))
        self.assertEqual((err.code, err.status, err.is_transient), ("CONFLICT", 409, False))
        self.assertEqual(missing_of(err), ["payment_method"])
        self.assertIn("payment method", err.message)
        self.assertEqual(c.auto_top_up.get(t.organization_id), OFF)

    def test_enabling_without_billing_is_a_conflict_naming_billing_available(self) -> None:
        t = managing()
        admin("PUT", f"/api/v1/admin/deployments/{t.deployment_id}/flags", {"billing_enabled": False})
        err = error_of(lambda: stdio(t).auto_top_up.set(t.organization_id, enabled=True, below_credits=500, pack="small", max_per_month=5))
        self.assertEqual((err.code, err.status), ("CONFLICT", 409))
        self.assertEqual(missing_of(err), ["billing_available"])
        self.assertEqual(stdio(t).auto_top_up.get(t.organization_id), OFF)

    def test_an_unknown_pack_is_a_validation_error_naming_the_packs(self) -> None:
        t = managing()
        c = stdio(t)
        err = error_of(lambda: c.auto_top_up.set(t.organization_id, enabled=False, below_credits=500, pack="huge", max_per_month=5))
        self.assertEqual((err.code, err.status), ("VALIDATION_ERROR", 400))
        self.assertEqual([(f["field"], f["message"]) for f in err.fields or []], [("pack", "one of small")])
        self.assertEqual(c.auto_top_up.get(t.organization_id), OFF)

    def test_saving_it_off_needs_no_card_and_reads_back(self) -> None:
        t = managing()
        c = stdio(t)
        saved = c.auto_top_up.set(t.organization_id, enabled=False, below_credits=500, pack="small", max_per_month=3)
        self.assertEqual(
            {k: v for k, v in saved.items() if k != "updated_at"},
            {"enabled": False, "below_credits": 500, "pack": "small", "max_per_month": 3, "consecutive_failures": 0, "disabled_reason": None},
        )
        self.assertIsInstance(saved["updated_at"], str)
        # Read back by another client of the same key: what the service stored, not the PUT's answer.
        self.assertEqual(stdio(t).auto_top_up.get(t.organization_id), saved)

    def test_a_key_without_admin_another_organization_and_no_api_key(self) -> None:
        t = managing()
        reader = create_tenant("launch", scopes=("read", "write"))
        for call in (
            lambda: stdio(reader).auto_top_up.get(reader.organization_id),
            lambda: stdio(reader).auto_top_up.set(reader.organization_id, enabled=False, below_credits=1, pack="small", max_per_month=1),
        ):
            refused = error_of(call)
            self.assertEqual((refused.code, refused.status), ("FORBIDDEN", 403))
            self.assertIn("admin", refused.message)
        self.assertEqual(error_of(lambda: stdio(managing()).auto_top_up.get(t.organization_id)).status, 404)
        self.assertEqual(error_of(lambda: deployment(t).auto_top_up.get(t.organization_id)).code, "MISSING_CREDENTIALS")
        self.assertEqual(stdio(t).auto_top_up.get(t.organization_id), OFF)


class AutoTopUpRetryTest(unittest.TestCase):
    """Against stand-ins: both calls are retried (a PUT sets the whole setting)."""

    def stand_in(self, replies: list) -> StandIn:  # type: ignore[type-arg]
        server = StandIn(replies)
        self.addCleanup(server.close)
        return server

    def test_the_read_and_the_put_are_retried_with_the_whole_setting(self) -> None:
        org = str(uuid.uuid4())
        busy = json_reply(503, {"success": False, "error": {"code": "SERVICE_UNAVAILABLE", "message": "busy"}, "details": {"timestamp": "2026-01-01T00:00:00.000Z"}})
        ok = json_reply(200, {"success": True, "data": OFF, "message": "OK"})

        def client(url: str) -> Client:
            return Client(api_key="cg_test", base_url=url, sleep=Sleeps(), random=lambda: 0.5)

        read = self.stand_in([busy, ok])
        self.assertEqual(client(read.url).auto_top_up.get(org), OFF)
        self.assertEqual([(r["method"], r["path"]) for r in read.requests], [("GET", f"/organizations/{org}/auto-top-up")] * 2)
        put = self.stand_in([busy, ok])
        self.assertEqual(client(put.url).auto_top_up.set(org, enabled=True, below_credits=500, pack="small", max_per_month=5), OFF)
        self.assertEqual([(r["method"], r["path"]) for r in put.requests], [("PUT", f"/organizations/{org}/auto-top-up")] * 2)
        self.assertEqual([r["body"] for r in put.requests], [b'{"enabled":true,"below_credits":500,"pack":"small","max_per_month":5}'] * 2)
        self.assertEqual({k.lower(): v for k, v in put.requests[0]["headers"].items()}.get("authorization"), "Bearer cg_test")


if __name__ == "__main__":
    unittest.main()
