# Kept equal to packages/client/package.json's version; tests/test_version.py fails while they differ.
__version__ = "0.1.0"
