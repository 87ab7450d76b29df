"""The clients' shared contract (test/contract/client-contract.json), run by the Python client;
packages/client/test/contract.test.ts runs the same table with the TypeScript client."""

from __future__ import annotations

import json
import re
import uuid
import unittest
from typing import Any, Callable

from _support import BASE_URL, ROOT, SERVICE_KEY, Tenant, create_tenant, live, map_tool

from creditgate import Client, CreditgateError

CONTRACT = json.loads((ROOT / "test" / "contract" / "client-contract.json").read_text(encoding="utf-8"))


def snake(name: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def operation(c: Client, op: str) -> Callable[..., Any]:
    """The contract's operation names are the TypeScript method paths; here in snake_case."""
    target: Any = c
    for part in op.split("."):
        target = getattr(target, snake(part))
    return target  # type: ignore[no-any-return]


# How each operation takes the wire's named arguments (the rest are keywords).
POSITIONAL = {
    "service.resolveDeployment": ["user_id"],
    "service.checkEntitlement": ["deployment_id", "tool_name"],
    "service.recordUsage": ["deployment_id", "tool_name"],
    "stdio.checkEntitlement": ["tool_name"],
    "stdio.recordUsage": ["tool_name"],
    "releaseReservation": ["invocation_id"],
    "getInvocation": ["invocation_id"],
    "refundUsage": ["usage_id"],
    "webhooks.send": ["url", "payload"],
    "budgets.list": ["organization_id"],
    "budgets.create": ["organization_id"],
    "budgets.get": ["organization_id", "budget_id"],
    "budgets.update": ["organization_id", "budget_id"],
    "budgets.delete": ["organization_id", "budget_id"],
}


def substitute(value: Any, names: dict[str, Any]) -> Any:
    if isinstance(value, str) and value.startswith("$") and value[1:] in names:
        return names[value[1:]]
    if isinstance(value, list):
        return [substitute(v, names) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, names) for k, v in value.items()}
    return value


def mismatches(actual: Any, expected: Any, path: str) -> list[str]:
    """The contract's matcher: objects as subsets, "$string", {"$contains": x}; the same rules as contract.test.ts."""
    if expected == "$string":
        return [] if isinstance(actual, str) and actual else [f"{path}: expected a string, got {actual!r}"]
    if isinstance(expected, dict):
        if "$contains" in expected:
            ok = isinstance(actual, list) and any(not mismatches(item, expected["$contains"], path) for item in actual)
            return [] if ok else [f"{path}: no element matches {expected['$contains']!r}"]
        if not isinstance(actual, dict):
            return [f"{path}: expected an object, got {actual!r}"]
        return [m for k, v in expected.items() for m in mismatches(actual.get(k, "<missing>"), v, f"{path}.{k}")]
    same = actual == expected and type(actual) is type(expected) if isinstance(expected, bool) or isinstance(actual, bool) else actual == expected
    return [] if same else [f"{path}: expected {expected!r}, got {actual!r}"]


def client_for(who: str, t: Tenant) -> Client:
    options: dict[str, Any] = {"base_url": BASE_URL, "retries": 0, "cache": False}
    if who == "api_key":
        return Client(api_key=t.api_key, **options)
    if who == "service":
        return Client(service_key=SERVICE_KEY, **options)
    if who == "deployment":
        return Client(deployment_id=t.deployment_id, deployment_secret=t.deployment_secret, **options)
    if who == "unknown_api_key":
        return Client(api_key=f"cg_{'A' * 36}", **options)
    if who == "wrong_deployment_secret":
        return Client(deployment_id=t.deployment_id, deployment_secret=t.deployment_secret + "x", **options)
    raise AssertionError(f"unknown credentials {who}")


@live
class ContractTest(unittest.TestCase):
    def test_every_case(self) -> None:
        self.assertTrue(10 <= len(CONTRACT["cases"]) <= 30)
        for case in CONTRACT["cases"]:
            with self.subTest(case=case["name"]):
                self.run_case(case)

    def run_case(self, case: dict[str, Any]) -> None:
        setup = case["tenant"]
        t = create_tenant(setup["tier"], purchased=setup.get("purchased", 0), monthly_credits=setup.get("monthly_credits"), scopes=tuple(setup.get("scopes", ("read", "write"))))
        names: dict[str, Any] = {
            "id": f"contract-{uuid.uuid4()}",
            "deployment_id": t.deployment_id,
            "organization_id": t.organization_id,
            "user_id": t.user_id,
        }
        for name, action in case.get("tools", {}).items():
            names[f"tool.{name}"] = map_tool(action, "contract")
        for index, step in enumerate(case["steps"], 1):
            what = f"step {index} {step['op']}"
            args = substitute(step["args"], names)
            if step["op"] == "entitlements.check":
                args = {"force_refresh": bool(args.get("force_refresh"))}
            positional = [args.pop(name) for name in POSITIONAL.get(step["op"], [])]
            call = operation(client_for(step["as"], t), step["op"])
            if "error" in step:
                with self.assertRaises(CreditgateError, msg=what) as caught:
                    call(*positional, **args)
                expected = substitute(step["error"], names)
                actual = {key: getattr(caught.exception, key) for key in expected}
                self.assertEqual(mismatches(actual, expected, what), [])
                continue
            answer = call(*positional, **args)
            self.assertEqual(mismatches(answer, substitute(step.get("expect", {}), names), what), [])
            for name, field in step.get("save", {}).items():
                names[name] = answer[field]


if __name__ == "__main__":
    unittest.main()
