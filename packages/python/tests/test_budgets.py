"""The budget calls (docs/budgets.md, API) and budget refusals (docs/budgets.md, Enforcement): against
the live service, effects read back through the operator API; the retry rules against stand-in servers."""

from __future__ import annotations

import unittest
import uuid
from typing import Any, Callable

from _support import BASE_URL, StandIn, admin, balance, create_tenant, deployment, json_reply, live, service, stdio, Sleeps, Tenant

from creditgate import KEEP, BudgetRefusal, Client, CreditgateError, MeteringDenied, budget_refusal, metered


def managing() -> Tenant:
    """A tenant whose API key may manage budgets (admin) and spend (write)."""
    return create_tenant("launch", scopes=("read", "write", "admin"))


def operator_view(t: Tenant) -> list[dict[str, Any]]:
    """The organization's budgets as the operator reads them."""
    return list(admin("GET", f"/api/v1/admin/organizations/{t.organization_id}/budgets")["budgets"])


def error_of(call: Callable[[], object]) -> CreditgateError:
    try:
        call()
    except CreditgateError as err:
        return err
    raise AssertionError("expected a CreditgateError")


@live
class BudgetCallsTest(unittest.TestCase):
    def test_create_list_get_update_delete_with_an_admin_key(self) -> None:
        t = managing()
        c = stdio(t)
        created = c.budgets.create(t.organization_id, scope="deployment", deployment_id=t.deployment_id, limit_credits=500, window="day")
        self.assertEqual(
            {k: created[k] for k in ("organization_id", "scope", "deployment_id", "limit_credits", "window", "mode", "alert_thresholds", "spent_credits", "remaining_credits")},  # type: ignore[literal-required]
            {"organization_id": t.organization_id, "scope": "deployment", "deployment_id": t.deployment_id, "limit_credits": 500, "window": "day", "mode": "block", "alert_thresholds": [80, 100], "spent_credits": 0, "remaining_credits": 500},
        )
        self.assertEqual([(b["id"], b["limit_credits"]) for b in operator_view(t)], [(created["id"], 500)])
        per_tool = c.budgets.create(t.organization_id, scope="tool", tool_name="*", limit_credits=50, window="hour", mode="alert", alert_thresholds=(50, 100))
        # Both made at one instant of the service's clock: the list is oldest first, ties in no set order.
        self.assertEqual(sorted(b["id"] for b in c.budgets.list(t.organization_id)), sorted([created["id"], per_tool["id"]]))
        self.assertEqual(c.budgets.get(t.organization_id, per_tool["id"])["subjects"], [])

        changed = c.budgets.update(t.organization_id, created["id"], limit_credits=800, mode="alert", alert_thresholds=[100, 50])
        self.assertEqual((changed["limit_credits"], changed["mode"], changed["alert_thresholds"]), (800, "alert", [50, 100]))
        # None removes a limit (the other remains); what is not named keeps its value.
        both = c.budgets.update(t.organization_id, per_tool["id"], limit_ai_tokens=1000)
        self.assertEqual((both["limit_credits"], both["limit_ai_tokens"]), (50, 1000))
        tokens_only = c.budgets.update(t.organization_id, per_tool["id"], limit_credits=None, limit_ai_tokens=KEEP)
        self.assertEqual((tokens_only["limit_credits"], tokens_only["limit_ai_tokens"], tokens_only["mode"]), (None, 1000, "alert"))

        deleted = c.budgets.delete(t.organization_id, per_tool["id"])
        self.assertEqual(deleted["id"], per_tool["id"])
        self.assertEqual([b["id"] for b in operator_view(t)], [created["id"]])
        gone = error_of(lambda: c.budgets.get(t.organization_id, per_tool["id"]))
        self.assertEqual((gone.code, gone.status, gone.error, gone.is_transient), ("NOT_FOUND", 404, None, False))

    def test_envelope_errors_become_creditgate_errors(self) -> None:
        t = managing()
        budget = stdio(t).budgets.create(t.organization_id, scope="organization", limit_credits=10, window="month")
        reader = create_tenant("launch", scopes=("read",))
        self.assertEqual(stdio(reader).budgets.list(reader.organization_id), [])
        refused = error_of(lambda: stdio(reader).budgets.create(reader.organization_id, scope="organization", limit_credits=10, window="month"))
        self.assertEqual((refused.code, refused.status), ("FORBIDDEN", 403))
        self.assertIn("admin", refused.message)
        self.assertEqual(operator_view(reader), [])

        invalid = error_of(lambda: stdio(t).budgets.create(t.organization_id, scope="deployment", limit_credits=10, window="day"))
        self.assertEqual((invalid.code, invalid.status), ("VALIDATION_ERROR", 400))
        self.assertIn("deployment_id", [f["field"] for f in invalid.fields or []])

        other = managing()
        self.assertEqual(error_of(lambda: stdio(other).budgets.get(other.organization_id, budget["id"])).status, 404)
        self.assertEqual(error_of(lambda: stdio(other).budgets.list(t.organization_id)).status, 404)
        self.assertEqual([(b["id"], b["limit_credits"]) for b in operator_view(t)], [(budget["id"], 10)])

    def test_without_an_api_key_nothing_is_sent(self) -> None:
        t = managing()
        d = deployment(t)
        self.assertEqual(error_of(lambda: d.budgets.list(t.organization_id)).code, "MISSING_CREDENTIALS")
        self.assertEqual(error_of(lambda: stdio(t).budgets.update(t.organization_id, str(uuid.uuid4()))).code, "INVALID_REQUEST")


@live
class BudgetRefusalTest(unittest.TestCase):
    def test_check_record_and_webhook_send_name_the_budget(self) -> None:
        t = managing()
        c = stdio(t)
        budget = c.budgets.create(t.organization_id, scope="deployment", deployment_id=t.deployment_id, limit_credits=1, window="hour")
        self.assertTrue(c.stdio.record_usage("search")["success"])
        check = c.stdio.check_entitlement("search")
        self.assertEqual((check["allowed"], check["reason"]), (False, "budget_exceeded"))
        self.assertEqual(check.get("payment_required", {}).get("budget_id"), budget["id"])
        refusal = budget_refusal(check)
        assert refusal is not None
        self.assertEqual((refusal.budget_id, refusal.resets_at, refusal.credits_required), (budget["id"], budget["resets_at"], 1))
        record = c.stdio.record_usage("search")
        self.assertEqual((record["success"], record["error"], record["credits_used"]), (False, "budget_exceeded", 0))
        refusal = budget_refusal(record)
        assert refusal is not None
        self.assertEqual((refusal.budget_id, refusal.resets_at, refusal.credits_required), (budget["id"], budget["resets_at"], 1))

        target = StandIn([json_reply(200, {})])
        self.addCleanup(target.close)
        sender = Client(deployment_id=t.deployment_id, deployment_secret=t.deployment_secret, base_url=BASE_URL, retries=2)
        err = error_of(lambda: sender.webhooks.send(f"{target.url}/hook", {"n": 1}))
        self.assertEqual((err.code, err.status, err.error, err.budget_id, err.resets_at), ("BUDGET_EXCEEDED", 403, "budget_exceeded", budget["id"], budget["resets_at"]))
        self.assertEqual((err.is_budget_exceeded, err.is_transient, err.should_retry), (True, False, False))
        self.assertEqual(budget_refusal(err), BudgetRefusal(budget["id"], budget["resets_at"]))
        self.assertEqual(target.requests, [])
        self.assertEqual((balance(t)["monthly_used"], balance(t)["reserved"]), (1, 0))

        sandbox = create_tenant("sandbox")
        self.assertIsNone(budget_refusal(stdio(sandbox).stdio.check_entitlement("search")))
        poor = error_of(lambda: deployment(sandbox).webhooks.send(f"{target.url}/hook", {}))
        self.assertEqual((poor.code, poor.is_budget_exceeded), ("INSUFFICIENT_CREDITS", False))
        self.assertIsNone(budget_refusal(poor))

    def test_a_budget_denial_is_never_cached(self) -> None:
        t = managing()
        c = stdio(t)  # caches on (the default)
        budget = c.budgets.create(t.organization_id, scope="deployment", deployment_id=t.deployment_id, limit_credits=1, window="day")
        self.assertTrue(c.stdio.check_entitlement("search")["allowed"])  # kept
        self.assertTrue(c.stdio.record_usage("search")["success"])
        self.assertEqual(c.stdio.record_usage("search")["error"], "budget_exceeded")
        # The kept "allowed" went with the refused record; the denial is not kept either.
        self.assertEqual(c.stdio.check_entitlement("search")["reason"], "budget_exceeded")
        c.budgets.update(t.organization_id, budget["id"], limit_credits=5)
        self.assertEqual((c.stdio.check_entitlement("search")["allowed"]), True)

    def test_checks_are_kept_per_end_user(self) -> None:
        t = managing()
        c = stdio(t)
        c.budgets.create(t.organization_id, scope="end_user", end_user_id="*", limit_credits=1, window="day")
        self.assertTrue(c.stdio.check_entitlement("search", end_user_id="bob")["allowed"])  # kept for bob
        self.assertTrue(c.stdio.record_usage("search", end_user_id="alice")["success"])
        self.assertEqual(c.stdio.check_entitlement("search", end_user_id="alice")["reason"], "budget_exceeded")
        self.assertTrue(c.stdio.check_entitlement("search", end_user_id="bob")["allowed"])
        self.assertEqual(c.stdio.check_entitlement("search", end_user_id="alice")["reason"], "budget_exceeded")

    def test_metered_in_service_mode_names_the_end_user_so_end_user_budgets_stop_one_before_it_runs(self) -> None:
        t = managing()
        stdio(t).budgets.create(t.organization_id, scope="end_user", end_user_id="*", limit_credits=2, window="day")
        runs: list[str] = []

        @metered(service(), user_id=lambda args: args.get("user"))
        def search(user: str, q: str) -> str:
            runs.append(f"{user}:{q}")
            return q

        search(t.user_id, "a")
        search(t.user_id, "b")
        with self.assertRaises(MeteringDenied) as caught:
            search(t.user_id, "c")
        self.assertEqual(caught.exception.reason, "budget_exceeded")
        self.assertEqual(runs, [f"{t.user_id}:a", f"{t.user_id}:b"])
        self.assertEqual((balance(t)["monthly_used"], balance(t)["reserved"]), (2, 0))

    def test_metered_raises_a_budget_denial_naming_the_budget(self) -> None:
        t = managing()
        c = stdio(t)
        budget = c.budgets.create(t.organization_id, scope="organization", limit_credits=1, window="week")
        runs: list[str] = []

        @metered(c, upgrade_url="https://example.com/pricing")
        def search(q: str) -> str:
            runs.append(q)
            return q

        self.assertEqual(search("first"), "first")
        with self.assertRaises(MeteringDenied) as caught:
            search("second")
        denied = caught.exception
        self.assertEqual((denied.reason, denied.budget_id, denied.resets_at, denied.upgrade_url), ("budget_exceeded", budget["id"], budget["resets_at"], None))
        self.assertIn("Buying credits does not lift a budget", denied.message)
        self.assertEqual(budget_refusal(denied), BudgetRefusal(budget["id"], budget["resets_at"], None, None))
        self.assertEqual(runs, ["first"])
        self.assertEqual((balance(t)["monthly_used"], balance(t)["reserved"]), (1, 0))


class BudgetRetryTest(unittest.TestCase):
    """Against stand-ins: a budget's refusal is never retried; a budget's create and delete are sent once."""

    def stand_in(self, replies: list) -> StandIn:  # type: ignore[type-arg]
        server = StandIn(replies)
        self.addCleanup(server.close)
        return server

    def test_the_ai_proxys_budget_refusal_is_tried_once_with_or_without_the_header(self) -> None:
        budget_id, resets_at = str(uuid.uuid4()), "2026-02-01T00:00:00.000Z"
        refusal = {"error": "budget_exceeded", "code": "BUDGET_EXCEEDED", "message": "over budget", "budget_id": budget_id, "resets_at": resets_at}
        for headers in ({"x-should-retry": "false", "Retry-After": "1"}, {"Retry-After": "1"}, {}):
            server = self.stand_in([json_reply(429, refusal, headers), json_reply(200, {})])
            sleeps = Sleeps()
            c = Client(deployment_id="d", deployment_secret="s", base_url=server.url, sleep=sleeps, random=lambda: 0.5)
            err = error_of(c.ai.quota)
            self.assertEqual((err.code, err.status, err.budget_id, err.resets_at, err.is_budget_exceeded, err.is_transient), ("BUDGET_EXCEEDED", 429, budget_id, resets_at, True, False), headers)
            self.assertEqual(budget_refusal(err), BudgetRefusal(budget_id, resets_at))
            self.assertEqual((len(server.requests), sleeps.waits), (1, []))
        camel = self.stand_in([json_reply(403, {"error": "budget_exceeded", "code": "BUDGET_EXCEEDED", "message": "over", "budgetId": budget_id, "resetsAt": resets_at, "creditsRequired": 1})])
        self.assertEqual(budget_refusal(error_of(Client(deployment_id="d", deployment_secret="s", base_url=camel.url).webhooks.quota)), BudgetRefusal(budget_id, resets_at, 1))
        spent = self.stand_in([json_reply(429, {"error": "quota_exceeded", "code": "AI_QUOTA_EXCEEDED", "message": "used up", "resets_at": resets_at}, {"x-should-retry": "false"})])
        quota_err = error_of(Client(deployment_id="d", deployment_secret="s", base_url=spent.url).ai.quota)
        self.assertEqual((quota_err.code, quota_err.resets_at, quota_err.budget_id, quota_err.is_budget_exceeded), ("AI_QUOTA_EXCEEDED", resets_at, None, False))
        self.assertIsNone(budget_refusal(quota_err))

    def test_reads_and_changes_are_retried_a_create_or_delete_is_sent_once(self) -> None:
        org, budget = str(uuid.uuid4()), str(uuid.uuid4())
        busy = json_reply(503, {"success": False, "error": {"code": "SERVICE_UNAVAILABLE", "message": "busy"}, "details": {"timestamp": "2026-01-01T00:00:00.000Z"}})

        def ok(data: Any) -> Any:
            return json_reply(200, {"success": True, "data": data, "message": "OK"})

        def client(url: str) -> Client:
            return Client(api_key="cg_test", base_url=url, sleep=Sleeps(), random=lambda: 0.5)

        listed = self.stand_in([busy, ok([])])
        self.assertEqual(client(listed.url).budgets.list(org), [])
        self.assertEqual([(r["method"], r["path"]) for r in listed.requests], [("GET", f"/organizations/{org}/budgets")] * 2)
        updated = self.stand_in([busy, ok({"id": budget})])
        self.assertEqual(client(updated.url).budgets.update(org, budget, limit_credits=None), {"id": budget})
        self.assertEqual([r["body"] for r in updated.requests], [b'{"limit_credits":null}'] * 2)
        calls: list[tuple[str, Callable[[Client], object]]] = [
            ("create", lambda c: c.budgets.create(org, scope="organization", limit_credits=5, window="day")),
            ("delete", lambda c: c.budgets.delete(org, budget)),
        ]
        for name, call in calls:
            server = self.stand_in([busy, ok({"id": budget})])
            err = error_of(lambda: call(client(server.url)))
            self.assertEqual((err.code, err.status, err.message, err.error, err.is_transient), ("SERVICE_UNAVAILABLE", 503, "busy", None, True), name)
            self.assertEqual(len(server.requests), 1, name)


if __name__ == "__main__":
    unittest.main()
