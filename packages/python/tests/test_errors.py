"""The service's error answers become CreditgateError with code, status, message and the credits fields."""

from __future__ import annotations

import unittest
import uuid

from _support import BASE_URL, create_tenant, deployment, live, stdio

from creditgate import Client, CreditgateError


def error_of(call: object) -> CreditgateError:
    try:
        call()  # type: ignore[operator]
    except CreditgateError as err:
        return err
    raise AssertionError("expected a CreditgateError")


@live
class ErrorMappingTest(unittest.TestCase):
    def test_401_unknown_or_malformed_key(self) -> None:
        for key in (f"cg_{'A' * 36}", "cg_not-a-key"):
            err = error_of(lambda: Client(api_key=key, base_url=BASE_URL).stdio.check_entitlement("search"))
            self.assertEqual((err.code, err.status, err.error), ("UNAUTHORIZED", 401, "unauthorized"))
            self.assertTrue(err.message)
            self.assertFalse(err.is_transient)

    def test_401_wrong_deployment_secret(self) -> None:
        t = create_tenant("launch")
        err = error_of(lambda: Client(deployment_id=t.deployment_id, deployment_secret="wrong-secret", base_url=BASE_URL).entitlements.check())
        self.assertEqual((err.code, err.status), ("INVALID_DEPLOYMENT_CREDENTIALS", 401))

    def test_403_insufficient_credits_carries_the_credits_fields(self) -> None:
        t = create_tenant("sandbox")
        err = error_of(lambda: deployment(t).webhooks.send("http://127.0.0.1:9/hook", {}))
        self.assertEqual((err.code, err.status, err.error), ("INSUFFICIENT_CREDITS", 403, "insufficient_credits"))
        self.assertEqual((err.credits_required, err.credits_available), (1, 0))

    def test_403_insufficient_scope(self) -> None:
        t = create_tenant("launch", scopes=("read",))
        self.assertTrue(stdio(t).stdio.check_entitlement("search")["allowed"])
        err = error_of(lambda: stdio(t).stdio.record_usage("search"))
        self.assertEqual((err.code, err.status, err.error), ("INSUFFICIENT_SCOPE", 403, "forbidden"))

    def test_404_another_tenants_invocation(self) -> None:
        a, b = create_tenant("launch"), create_tenant("launch")
        invocation = f"inv-{uuid.uuid4()}"
        stdio(b).stdio.check_entitlement("search", reserve=True, invocation_id=invocation)
        for call in (lambda: stdio(a).get_invocation(invocation), lambda: stdio(a).release_reservation(invocation)):
            err = error_of(call)
            self.assertEqual((err.code, err.status), ("NOT_FOUND", 404))
        self.assertEqual(stdio(b).get_invocation(invocation)["status"], "reserved")

    def test_409_releasing_a_recorded_invocation(self) -> None:
        t = create_tenant("launch")
        invocation = f"inv-{uuid.uuid4()}"
        c = stdio(t)
        c.stdio.check_entitlement("search", reserve=True, invocation_id=invocation)
        c.stdio.record_usage("search", invocation_id=invocation)
        err = error_of(lambda: c.release_reservation(invocation))
        self.assertEqual(err.status, 409)
        self.assertTrue(err.code)

    def test_422_same_invocation_id_other_tool(self) -> None:
        c = stdio(create_tenant("launch"))
        invocation = f"inv-{uuid.uuid4()}"
        c.stdio.record_usage("search", invocation_id=invocation)
        err = error_of(lambda: c.stdio.record_usage("other-tool", invocation_id=invocation))
        self.assertEqual((err.code, err.status, err.error), ("IDEMPOTENCY_KEY_REUSED", 422, "idempotency_key_reused"))

    def test_400_names_the_field(self) -> None:
        err = error_of(lambda: stdio(create_tenant("launch")).stdio.record_usage("t" * 201))
        self.assertEqual((err.code, err.status), ("INVALID_REQUEST", 400))
        self.assertIn("tool_name", repr(err.fields))


if __name__ == "__main__":
    unittest.main()
