"""The invocation id a retried call shares with its first attempt: byte for byte the TypeScript middleware's."""

from __future__ import annotations

import json
import re
import unittest

from _support import ROOT

from creditgate import canonical, derive_invocation_id, invocation_id_for, uuid7
from creditgate._identity import idempotency_key_from_meta, js_number

CONTRACT = json.loads((ROOT / "test" / "contract" / "client-contract.json").read_text(encoding="utf-8"))


class IdentityTest(unittest.TestCase):
    def test_the_contract_vectors(self) -> None:
        vectors = CONTRACT["invocation_ids"]
        self.assertGreaterEqual(len(vectors), 8)
        for v in vectors:
            with self.subTest(tool=v["tool_name"]):
                self.assertEqual(derive_invocation_id(v["tool_name"], v["args"], v["idempotency_key"], v["user_id"]), v["expected"])

    def test_numbers_are_spelled_as_javascript_spells_them(self) -> None:
        cases = {1.0: "1", 1e21: "1e+21", 1e20: "100000000000000000000", 1e-7: "1e-7", 1e-6: "0.000001", 0.1: "0.1",
                 -0.0: "0", 5e-324: "5e-324", 123.456: "123.456", 1.5e300: "1.5e+300", -2.5e-8: "-2.5e-8", 2**53 + 1: "9007199254740992",
                 float("nan"): "null", float("inf"): "null"}
        for value, text in cases.items():
            with self.subTest(value=value):
                self.assertEqual(js_number(value), text)

    def test_canonical_sorts_keys_by_utf16_code_units(self) -> None:
        self.assertEqual(canonical({"b": 1, "a": [True, None, "x"]}), '{"a":[true,null,"x"],"b":1}')
        self.assertEqual(canonical({"\U0001f600": 1, "\uffff": 2}), '{"\U0001f600":1,"\uffff":2}')
        self.assertEqual(canonical(("t", 1)), '["t",1]')

    def test_without_a_key_every_call_is_new(self) -> None:
        first, second = invocation_id_for("search", {"q": 1}, None), invocation_id_for("search", {"q": 1}, None)
        self.assertNotEqual(first, second)
        self.assertRegex(first, r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
        self.assertTrue(invocation_id_for("search", {"q": 1}, "k").startswith("mcp_"))

    def test_uuid7_is_time_ordered(self) -> None:
        ids = [uuid7() for _ in range(50)]
        self.assertTrue(all(re.fullmatch(r"[0-9a-f-]{36}", i) for i in ids))
        self.assertLessEqual(ids[0][:13], ids[-1][:13])

    def test_the_key_comes_from_any_meta_spelling(self) -> None:
        self.assertEqual(idempotency_key_from_meta({"idempotencyKey": "k"}), "k")
        self.assertEqual(idempotency_key_from_meta({"idempotency_key": "", "idempotency-key": "k2"}), "k2")
        self.assertIsNone(idempotency_key_from_meta({"other": "x"}))

        class Meta:  # the shape of the MCP SDK's RequestParams.Meta: extra fields beside progressToken
            def model_dump(self, by_alias: bool = False) -> dict[str, object]:
                return {"progressToken": None, "io.creditgate/idempotency-key": "k3"}

        self.assertEqual(idempotency_key_from_meta(Meta()), "k3")


if __name__ == "__main__":
    unittest.main()
