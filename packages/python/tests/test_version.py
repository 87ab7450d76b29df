"""The Python package's version is kept in step with the TypeScript client's."""

from __future__ import annotations

import json
import re
import unittest

from _support import ROOT

import creditgate


class VersionTest(unittest.TestCase):
    def test_version_matches_the_typescript_client_and_pyproject(self) -> None:
        typescript = json.loads((ROOT / "packages" / "client" / "package.json").read_text(encoding="utf-8"))["version"]
        pyproject = (ROOT / "packages" / "python" / "pyproject.toml").read_text(encoding="utf-8")
        declared = re.search(r'(?m)^version\s*=\s*"([^"]+)"', pyproject)
        self.assertIsNotNone(declared, "pyproject.toml declares no static version")
        assert declared is not None
        self.assertEqual(creditgate.__version__, typescript, "bump src/creditgate/_version.py with packages/client/package.json")
        self.assertEqual(declared.group(1), typescript, "bump pyproject.toml with packages/client/package.json")


if __name__ == "__main__":
    unittest.main()
