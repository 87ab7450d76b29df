"""The client's caches, with the TypeScript client's bounds: a TTL map capped at 10,000 entries
(oldest out first), and the memory of check answers that never keeps a denial for credits."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Generic, Mapping, Optional, TypeVar

V = TypeVar("V")
R = TypeVar("R")


class TtlCache(Generic[V]):
    def __init__(self, now: Callable[[], float], max_entries: int = 10_000) -> None:
        self._now = now
        self._max = max_entries
        self._entries: "OrderedDict[str, tuple[V, float]]" = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Optional[V]:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[1] <= self._now():
                del self._entries[key]
                return None
            return entry[0]

    def set(self, key: str, value: V, ttl: float) -> None:
        if ttl <= 0:
            return
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = (value, self._now() + ttl)
            if len(self._entries) > self._max:
                self._entries.popitem(last=False)

    def delete(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def delete_prefix(self, prefix: str) -> None:
        with self._lock:
            for key in [k for k in self._entries if k.startswith(prefix)]:
                del self._entries[key]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


# Refusals for money: a top-up, a budget's window reset or a raised limit can lift them at any
# moment, and then no answer of the scope may stand (a cached "allowed" would hide them, too).
_MONEY_REFUSALS = frozenset({"insufficient_credits", "budget_exceeded"})


class CheckCache:
    """Check-entitlement answers per scope (a deployment id, or 'stdio') and the spendable balance
    the service last reported for it. A denial for credits or by a budget is never kept, and drops
    the scope's kept answers; an "allowed" is reused only while that balance still covers its cost."""

    def __init__(self, now: Callable[[], float], ttl: float) -> None:
        self._checks: TtlCache[Mapping[str, Any]] = TtlCache(now)
        self._ttl = ttl
        # Spendable credits last reported per scope; None = unlimited.
        self._balances: dict[str, Optional[int]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(scope: str, tool: str) -> str:
        return f"{scope}\u0000{tool}"

    def get(self, scope: str, tool: str) -> Optional[Mapping[str, Any]]:
        hit = self._checks.get(self._key(scope, tool))
        if hit is None or not hit.get("allowed"):
            return hit
        with self._lock:
            if scope not in self._balances:
                return hit
            balance = self._balances[scope]
        return hit if balance is None or balance >= hit.get("credit_cost", 0) else None

    def note_check(self, scope: str, tool: str, result: Mapping[str, Any], cacheable: bool) -> None:
        if result.get("reason") in _MONEY_REFUSALS:
            self._checks.delete_prefix(f"{scope}\u0000")
        elif cacheable:
            self._checks.set(self._key(scope, tool), result, self._ttl)
        if not result.get("allowed"):
            return
        # An allowed answer says the balance covers the cost now; stdio answers do not say how much is left.
        with self._lock:
            if "credits_available" in result:
                self._balances[scope] = result["credits_available"]
            else:
                self._balances.pop(scope, None)
            self._bound()

    def note_record(self, scope: str, result: Mapping[str, Any], replayed: bool) -> None:
        # A replay repeats the first answer, whose balance may be old.
        if not replayed:
            with self._lock:
                self._balances[scope] = result.get("credits_remaining")
                self._bound()
        if not result.get("success") and result.get("error") in _MONEY_REFUSALS:
            self._checks.delete_prefix(f"{scope}\u0000")

    def _bound(self) -> None:
        # The TypeScript map of balances is unbounded in principle; here it is held to the cache's bound.
        while len(self._balances) > 10_000:
            del self._balances[next(iter(self._balances))]

    def clear(self) -> None:
        self._checks.clear()
        with self._lock:
            self._balances.clear()


class SingleFlight:
    """Concurrent cacheable reads of the same thing share one request (16 first calls, one check)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, "_Flight"] = {}

    def do(self, key: str, load: Callable[[], R]) -> R:
        with self._lock:
            flight = self._running.get(key)
            leader = flight is None
            if flight is None:
                flight = _Flight()
                self._running[key] = flight
        if not leader:
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return flight.value  # type: ignore[no-any-return]
        try:
            value = load()
            flight.value = value
            return value
        except BaseException as err:
            flight.error = err
            raise
        finally:
            with self._lock:
                del self._running[key]
            flight.done.set()


class _Flight:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: Optional[BaseException] = None
