"""Invocation ids: UUID v7 for a fresh call, and the idempotent id the TypeScript MCP middleware
derives (packages/client/src/mcp/identity.ts), reproduced byte for byte:

    "mcp_" + base64url(sha256(JSON.stringify([user_id ?? "", tool_name, canonical(args ?? null), key])))

where canonical() is JSON with object keys sorted by UTF-16 code units and JSON.stringify's
spelling of strings and numbers. test/contract/client-contract.json holds vectors that both
clients check."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import re
import time
import uuid
from typing import Any, Mapping, Optional

# `_meta` keys a client may send on tools/call to make a retried call idempotent (same order as TypeScript).
IDEMPOTENCY_META_KEYS = ("io.creditgate/idempotency-key", "idempotency-key", "idempotency_key", "idempotencyKey")

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_MAX_SAFE_INTEGER = 2**53


def uuid7() -> str:
    """A UUID version 7 (RFC 9562): 48 bits of Unix milliseconds, then random bits."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & (2**48 - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & (2**62 - 1)
    return str(uuid.UUID(int=value))


def js_string(value: str) -> str:
    """JSON.stringify of a string: valid surrogate pairs as characters, lone surrogates escaped."""
    if _LONE_SURROGATE.search(value):
        # Join pairs that arrived as two code points, as a JavaScript string would hold them.
        value = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    text = json.dumps(value, ensure_ascii=False)
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def js_number(value: float) -> str:
    """Number.prototype.toString as JSON.stringify spells it (ECMAScript Number::toString)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if -_MAX_SAFE_INTEGER < value < _MAX_SAFE_INTEGER:
            return str(value)
        value = float(value)  # JavaScript parsed it as a double
    if not math.isfinite(value):
        return "null"
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    # repr gives the shortest digits that round-trip, as JavaScript does; only the layout differs.
    mantissa, _, exp = repr(abs(value)).partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    point = len(whole) + (int(exp) if exp else 0) - (len(whole + frac) - len((whole + frac).lstrip("0")))
    digits = digits.rstrip("0")
    k, n = len(digits), point
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        out = (digits if k == 1 else digits[0] + "." + digits[1:]) + "e" + ("+" if e >= 0 else "-") + str(abs(e))
    return sign + out


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def canonical(value: Any) -> str:
    """JSON with sorted object keys, so the same arguments hash the same (identity.ts canonical())."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return js_string(value)
    if isinstance(value, (int, float)):
        return js_number(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(canonical(v) for v in value) + "]"
    if isinstance(value, Mapping):
        keys = sorted((str(k) for k in value.keys()), key=_utf16_key)
        by_text = {str(k): v for k, v in value.items()}
        return "{" + ",".join(f"{js_string(k)}:{canonical(by_text[k])}" for k in keys) + "}"
    dump = getattr(value, "model_dump", None)  # a pydantic model (what FastMCP passes for structured arguments)
    if callable(dump):
        return canonical(dump(mode="json"))
    if hasattr(value, "__dataclass_fields__"):
        import dataclasses

        return canonical(dataclasses.asdict(value))
    return js_string(str(value))


def derive_invocation_id(tool_name: str, args: Any, idempotency_key: str, user_id: Optional[str] = None) -> str:
    """The id a retried call shares with its first attempt: scoped to the user, tool and arguments."""
    text = "[" + ",".join([js_string(user_id or ""), js_string(tool_name), js_string(canonical(args)), js_string(idempotency_key)]) + "]"
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
    return "mcp_" + base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


def invocation_id_for(tool_name: str, args: Any, idempotency_key: Optional[str], user_id: Optional[str] = None) -> str:
    """derive_invocation_id when the caller sent an idempotency key, else a new UUID v7."""
    if not idempotency_key:
        return uuid7()
    return derive_invocation_id(tool_name, args, idempotency_key, user_id)


def idempotency_key_from_meta(meta: Any) -> Optional[str]:
    """The first non-empty idempotency key in a tools/call `_meta` (a dict or an object such as the
    MCP SDK's RequestParams.Meta)."""
    if meta is None:
        return None
    if not isinstance(meta, Mapping):
        dump = getattr(meta, "model_dump", None)
        if callable(dump):
            meta = dump(by_alias=True)
        else:
            meta = {**getattr(meta, "__dict__", {}), **(getattr(meta, "__pydantic_extra__", None) or {})}
    assert isinstance(meta, Mapping)
    for key in IDEMPOTENCY_META_KEYS:
        value = meta.get(key)
        if isinstance(value, str) and value != "":
            return value
    return None
