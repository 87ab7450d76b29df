"""Typed, synchronous client for creditgate's /api/v1 routes (the TypeScript client's operations, in snake_case)."""

from __future__ import annotations

import enum
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, List, Literal, Mapping, Optional, Sequence, Union, cast

from ._cache import CheckCache, SingleFlight, TtlCache
from ._identity import uuid7
from ._transport import Answer, QueryValue, Transport
from ._version import __version__
from .errors import CONFIGURATION_ERROR, MISSING_CREDENTIALS, CreditgateError
from .types import (
    AiQuota,
    AutoTopUp,
    Budget,
    BudgetMode,
    BudgetScope,
    BudgetWindow,
    CreditCosts,
    EntitlementSnapshot,
    InvocationStatus,
    RecordResult,
    RefundResult,
    ReleaseResult,
    ResolveResult,
    ServiceCheckResult,
    StdioCheckResult,
    WebhookDeliveries,
    WebhookDelivery,
    WebhookQuota,
    WebhookSendResult,
)

FIVE_MINUTES = 5 * 60.0
ONE_HOUR = 60 * 60.0
# A proxy send makes up to 3 attempts of 10 s each inside one request.
WEBHOOK_SEND_TIMEOUT = 35.0


@dataclass(frozen=True)
class CacheOptions:
    """How long answers may be reused, in seconds; each is capped at the limits of docs/client.md, Caches."""

    # check-entitlement answers (not reservations, never a denial for credits); <= 5 minutes.
    entitlements: float = FIVE_MINUTES
    # The credit cost table; <= 1 hour.
    credit_costs: float = ONE_HOUR
    # resolve-deployment answers that found a deployment; <= 5 minutes.
    resolve: float = FIVE_MINUTES


def _capped(value: float, limit: float) -> float:
    return max(0.0, min(float(value), limit))


def _present(value: Optional[str]) -> Optional[str]:
    return value if isinstance(value, str) and value.strip() != "" else None


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


@dataclass(frozen=True)
class CostsRevalidation:
    """A conditional read of the cost table (``credit_costs_if_changed``): ``not_modified`` (a 304,
    no body), or the table in ``costs`` with the ``etag`` to send next time."""

    not_modified: bool
    etag: Optional[str]
    costs: Optional[CreditCosts] = None


class _Keep(enum.Enum):
    KEEP = "keep"


# The default of a budget change's fields: left out of the request, so the budget keeps its value (None removes a limit).
KEEP = _Keep.KEEP


class Client:
    """A client for creditgate. Credentials: any of an organization API key (stdio mode), the
    shared service key (service mode) and a deployment's id and secret (entitlement snapshot, AI
    quota, webhook proxy); a method whose credential is missing raises MISSING_CREDENTIALS.

    >>> cg = Client(api_key=os.environ["CREDITGATE_API_KEY"], base_url="https://creditgate.example.com")
    >>> cg.stdio.check_entitlement("search")["allowed"]

    ``timeout`` is per attempt in seconds (35 s at least for webhook sends); ``retries`` extra
    attempts for calls that are safe to repeat (every call this client makes but a budget's create
    and delete: writes carry an idempotency id); ``cache=False`` turns every cache off.
    """

    def __init__(
        self,
        api_key: Optional[str] = None,
        *,
        base_url: str,
        service_key: Optional[str] = None,
        deployment_id: Optional[str] = None,
        deployment_secret: Optional[str] = None,
        timeout: float = 10.0,
        retries: int = 2,
        retry_base: float = 0.25,
        max_retry_delay: float = 10.0,
        cache: Union[CacheOptions, bool] = True,
        now: Optional[Callable[[], float]] = None,
        sleep: Optional[Callable[[float], None]] = None,
        random: Optional[Callable[[], float]] = None,
    ) -> None:
        self._api_key = _present(api_key)
        self._service_key = _present(service_key)
        self._deployment_id = _present(deployment_id)
        self._deployment_secret = _present(deployment_secret)
        if not self._api_key and not self._service_key and not (self._deployment_id and self._deployment_secret):
            raise CreditgateError(
                CONFIGURATION_ERROR,
                "no credentials: pass api_key (stdio mode), service_key (service mode) or deployment_id with deployment_secret",
            )
        self._transport = Transport(
            base_url,
            timeout=timeout,
            retries=retries,
            retry_base=retry_base,
            max_retry_delay=max_retry_delay,
            sleep=sleep,
            random=random,
            user_agent=f"creditgate-python/{__version__}",
        )
        self._send_transport = self._transport.with_timeout(max(timeout, WEBHOOK_SEND_TIMEOUT))
        options = CacheOptions(0, 0, 0) if cache is False else cache if isinstance(cache, CacheOptions) else CacheOptions()
        self._ttl = CacheOptions(
            _capped(options.entitlements, FIVE_MINUTES), _capped(options.credit_costs, ONE_HOUR), _capped(options.resolve, FIVE_MINUTES)
        )
        # The snapshot's lifetime is the service's next_check_seconds; cache=False is the only way to turn it off.
        self._snapshots_cached = cache is not False
        self._now = now or time.monotonic
        self._checks = CheckCache(self._now, self._ttl.entitlements)
        self._resolved: TtlCache[ResolveResult] = TtlCache(self._now)
        self._snapshots: TtlCache[EntitlementSnapshot] = TtlCache(self._now, 1_000)
        self._costs: Optional[tuple[CreditCosts, float]] = None
        self._costs_lock = threading.Lock()
        self._flights = SingleFlight()
        self.stdio = _Stdio(self)
        self.service = _Service(self)
        self.entitlements = _Entitlements(self)
        self.ai = _Ai(self)
        self.webhooks = _Webhooks(self)
        self.budgets = _Budgets(self)
        self.auto_top_up = _AutoTopUp(self)

    @property
    def base_url(self) -> str:
        """The base URL calls go to (normalized)."""
        return self._transport.base_url

    @property
    def mode(self) -> Literal["stdio", "service", "deployment"]:
        """Which mode the MCP calls of this client use."""
        if self._service_key:
            return "service"
        if self._api_key:
            return "stdio"
        return "deployment"

    def clear_cache(self) -> None:
        """Drops every cached answer."""
        self._checks.clear()
        self._resolved.clear()
        self._snapshots.clear()
        with self._costs_lock:
            self._costs = None

    # ---- reservations and invocations (API key or service key); refunds (service key only) ----

    def release_reservation(self, invocation_id: str, *, deployment_id: Optional[str] = None) -> ReleaseResult:
        """Releases a reservation (the tool failed or was cancelled). With the service key, name the deployment."""
        answer = self._call(
            "POST",
            f"/api/v1/mcp/reservations/{_quote(invocation_id)}/release",
            self._metering_headers(),
            body={"deployment_id": deployment_id} if deployment_id else {},
        )
        return cast(ReleaseResult, answer.data)

    def get_invocation(self, invocation_id: str, *, deployment_id: Optional[str] = None) -> InvocationStatus:
        """What became of an invocation: reserved, recorded, released, expired, refunded or denied."""
        answer = self._call(
            "GET", f"/api/v1/mcp/invocations/{_quote(invocation_id)}", self._metering_headers(), query={"deployment_id": deployment_id}
        )
        return cast(InvocationStatus, answer.data)

    def refund_usage(
        self, usage_id: str, *, reason: str, amount: Optional[int] = None, idempotency_key: Optional[str] = None
    ) -> RefundResult:
        """Refunds a recorded usage in whole or in part; an idempotency key is generated when none is given.
        Service key only: the platform refunds, an organization's API key gets 403 FORBIDDEN."""
        body: dict[str, Any] = {"reason": reason, "idempotency_key": idempotency_key or uuid7()}
        if amount is not None:
            body["amount"] = amount
        answer = self._call("POST", f"/api/v1/mcp/usage/{_quote(usage_id)}/refund", self._metering_headers(), body=body)
        return cast(RefundResult, answer.data)

    def credit_costs_if_changed(self, etag: Optional[str] = None) -> CostsRevalidation:
        """The cost table with the tool → action map, revalidated: with the ``etag`` of an earlier
        answer, an unchanged table answers ``not_modified`` (a 304 without a body). With either
        metering credential (an API key with ``read``, or the service key); never cached here:
        ``ToolPricing`` keeps the table and its ETag."""
        headers = {**self._metering_headers(), **({"if-none-match": etag} if etag else {})}
        answer = self._call("GET", "/api/v1/mcp/credit-costs", headers)
        tag = answer.headers.get("etag")
        if answer.status == 304:
            return CostsRevalidation(True, tag or etag)
        return CostsRevalidation(False, tag, cast(CreditCosts, answer.data))

    # ---- internals ----

    def _call(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        *,
        body: Any = None,
        query: Optional[Mapping[str, QueryValue]] = None,
        transport: Optional[Transport] = None,
        idempotent: bool = True,
    ) -> Answer:
        # Safe to repeat, so retried: reads, releases, budget changes, the auto top-up setting and writes carrying an idempotency id.
        # Only a budget's create and delete are not (the route takes no idempotency key).
        return (transport or self._transport).call(method, path, headers=headers, body=body, query=query, idempotent=idempotent)

    def _check(
        self, scope: str, body: dict[str, Any], force_refresh: bool, send: Callable[[dict[str, Any]], Answer]
    ) -> Mapping[str, Any]:
        """Reservations always go to the service (they are writes, made safe to retry by their
        invocation id); plain checks come from the check cache while it has them, per (tool, end user):
        an end user's budget can refuse one end user and not another."""
        tool = body["tool_name"] if body.get("end_user_id") is None else f"{body['tool_name']}\u0000{body['end_user_id']}"
        if body.get("reserve"):
            body = {**body, "invocation_id": body.get("invocation_id") or uuid7()}
            data = send(body).data
            self._checks.note_check(scope, tool, data, False)
            return cast(Mapping[str, Any], data)
        if not force_refresh:
            hit = self._checks.get(scope, tool)
            if hit is not None:
                return hit

        def load() -> Mapping[str, Any]:
            data = send(body).data
            self._checks.note_check(scope, tool, data, True)
            return cast(Mapping[str, Any], data)

        return self._flights.do(f"check\u0000{scope}\u0000{tool}", load)

    def _missing(self, what: str) -> CreditgateError:
        return CreditgateError(MISSING_CREDENTIALS, f"this call needs {what}; create the client with it")

    def _api_key_headers(self) -> dict[str, str]:
        if not self._api_key:
            raise self._missing("an organization API key (api_key)")
        return {"authorization": f"Bearer {self._api_key}"}

    def _service_headers(self) -> dict[str, str]:
        if not self._service_key:
            raise self._missing("the service key (service_key)")
        return {"x-mcp-service-key": self._service_key}

    def _metering_headers(self) -> dict[str, str]:
        if self._service_key:
            return self._service_headers()
        if self._api_key:
            return self._api_key_headers()
        raise self._missing("an API key or the service key")

    def _deployment_credentials(self) -> tuple[str, str]:
        if not self._deployment_id or not self._deployment_secret:
            raise self._missing("deployment credentials (deployment_id and deployment_secret)")
        return self._deployment_id, self._deployment_secret

    def _deployment_headers(self) -> dict[str, str]:
        deployment_id, secret = self._deployment_credentials()
        return {"x-deployment-id": deployment_id, "x-deployment-secret": secret}


class _Stdio:
    """Stdio mode (organization API key)."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def check_entitlement(
        self,
        tool_name: str,
        *,
        reserve: bool = False,
        invocation_id: Optional[str] = None,
        end_user_id: Optional[str] = None,
        force_refresh: bool = False,
    ) -> StdioCheckResult:
        """May this organization run the tool, and what does it cost? ``reserve=True`` holds the cost for 5 minutes;
        ``end_user_id`` names your end user, whom end-user budgets count (docs/budgets.md)."""
        c = self._c
        headers = c._api_key_headers()
        body: dict[str, Any] = {"tool_name": tool_name}
        if reserve:
            body["reserve"] = True
        if invocation_id is not None:
            body["invocation_id"] = invocation_id
        if end_user_id is not None:
            body["end_user_id"] = end_user_id
        result = c._check(
            "stdio", body, force_refresh, lambda b: c._call("POST", "/api/v1/mcp/stdio/check-entitlement", headers, body=b)
        )
        return cast(StdioCheckResult, result)

    def record_usage(
        self,
        tool_name: str,
        *,
        invocation_id: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        end_user_id: Optional[str] = None,
    ) -> RecordResult:
        """Records a completed tool call and deducts its credits; an invocation_id is generated when
        none is given, so a retry never deducts twice. ``replayed`` says the service repeated the first answer."""
        c = self._c
        body: dict[str, Any] = {"tool_name": tool_name, "invocation_id": invocation_id or uuid7()}
        if metadata is not None:
            body["metadata"] = dict(metadata)
        if end_user_id is not None:
            body["end_user_id"] = end_user_id
        answer = c._call("POST", "/api/v1/mcp/stdio/record-usage", c._api_key_headers(), body=body)
        c._checks.note_record("stdio", answer.data, answer.replayed)
        return cast(RecordResult, {**answer.data, "replayed": answer.replayed})


class _Service:
    """Service-to-service mode (X-MCP-Service-Key)."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def resolve_deployment(self, user_id: str, *, force_refresh: bool = False) -> ResolveResult:
        """The deployment a user's session meters against. Found deployments are cached up to 5 minutes."""
        c = self._c
        if not isinstance(user_id, str) or user_id == "":
            raise CreditgateError("INVALID_REQUEST", "resolve_deployment needs a user id")
        if not force_refresh:
            hit = c._resolved.get(user_id)
            if hit is not None:
                return hit
        headers = c._service_headers()

        def load() -> ResolveResult:
            data = cast(ResolveResult, c._call("GET", "/api/v1/mcp/resolve-deployment", headers, query={"user_id": user_id}).data)
            if data.get("deployment_id"):
                c._resolved.set(user_id, data, c._ttl.resolve)
            return data

        return c._flights.do(f"resolve\u0000{user_id}", load)

    def check_entitlement(
        self,
        deployment_id: str,
        tool_name: str,
        *,
        reserve: bool = False,
        invocation_id: Optional[str] = None,
        end_user_id: Optional[str] = None,
        force_refresh: bool = False,
    ) -> ServiceCheckResult:
        """May this deployment run the tool? Same caching and reservation rules as stdio.check_entitlement."""
        c = self._c
        headers = c._service_headers()
        body: dict[str, Any] = {"deployment_id": deployment_id, "tool_name": tool_name}
        if reserve:
            body["reserve"] = True
        if invocation_id is not None:
            body["invocation_id"] = invocation_id
        if end_user_id is not None:
            body["end_user_id"] = end_user_id
        result = c._check(
            deployment_id, body, force_refresh, lambda b: c._call("POST", "/api/v1/mcp/check-entitlement", headers, body=b)
        )
        return cast(ServiceCheckResult, result)

    def record_usage(
        self,
        deployment_id: str,
        tool_name: str,
        *,
        mcp_user_id: Optional[str] = None,
        invocation_id: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
    ) -> RecordResult:
        """Records a completed tool call for a deployment; an invocation_id is generated when none is given."""
        c = self._c
        body: dict[str, Any] = {"deployment_id": deployment_id, "tool_name": tool_name, "invocation_id": invocation_id or uuid7()}
        if mcp_user_id is not None:
            body["mcp_user_id"] = mcp_user_id
        if metadata is not None:
            body["metadata"] = dict(metadata)
        answer = c._call("POST", "/api/v1/mcp/usage", c._service_headers(), body=body)
        c._checks.note_record(deployment_id, answer.data, answer.replayed)
        return cast(RecordResult, {**answer.data, "replayed": answer.replayed})

    def credit_costs(self, *, force_refresh: bool = False) -> CreditCosts:
        """Cost of every action; cached up to 1 hour."""
        c = self._c
        with c._costs_lock:
            if not force_refresh and c._costs is not None and c._costs[1] > c._now():
                return c._costs[0]
        headers = c._service_headers()

        def load() -> CreditCosts:
            data = cast(CreditCosts, c._call("GET", "/api/v1/mcp/credit-costs", headers).data)
            if c._ttl.credit_costs > 0:
                with c._costs_lock:
                    c._costs = (data, c._now() + c._ttl.credit_costs)
            return data

        return c._flights.do("costs", load)


class _Entitlements:
    """The deployment's entitlement snapshot (deployment credentials)."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def check(self, *, force_refresh: bool = False) -> EntitlementSnapshot:
        """The snapshot, cached for its next_check_seconds; force_refresh bypasses both caches (``?force=true``)."""
        c = self._c
        deployment_id, secret = c._deployment_credentials()
        if not force_refresh:
            hit = c._snapshots.get(deployment_id)
            if hit is not None:
                return hit
        answer = c._call(
            "POST",
            "/api/v1/entitlements/check",
            {},
            query={"force": True} if force_refresh else None,
            body={"deployment_id": deployment_id, "deployment_secret": secret},
        )
        data = cast(EntitlementSnapshot, answer.data)
        if c._snapshots_cached:
            c._snapshots.set(deployment_id, data, max(0, int(data.get("next_check_seconds", 0))))
        return data


class _Ai:
    def __init__(self, client: Client) -> None:
        self._c = client

    def quota(self) -> AiQuota:
        """AI tokens used and left in the period, and the credits that pay past the limit."""
        return cast(AiQuota, self._c._call("GET", "/api/v1/ai/quota", self._c._deployment_headers()).data)


class _Webhooks:
    """The webhook proxy (deployment credentials)."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def send(
        self,
        url: str,
        payload: Mapping[str, Any],
        *,
        method: Optional[Literal["POST", "PUT", "PATCH"]] = None,
        headers: Optional[Mapping[str, str]] = None,
        secret: Optional[str] = None,
        event_type: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ) -> WebhookSendResult:
        """Delivers a payload (signed when a secret is given). The target's failures are in the answer
        (success False); failures to set the send up raise (INSUFFICIENT_CREDITS carries
        credits_required and credits_available). An idempotency key is generated when none is
        given, so a retried send is delivered and charged once."""
        c = self._c
        body: dict[str, Any] = {"url": url, "payload": dict(payload), "idempotency_key": idempotency_key or uuid7()}
        for key, value in (("method", method), ("headers", headers), ("secret", secret), ("event_type", event_type)):
            if value is not None:
                body[key] = dict(value) if isinstance(value, Mapping) else value
        answer = c._call("POST", "/api/v1/proxy/webhooks/send", c._deployment_headers(), body=body, transport=c._send_transport)
        return cast(WebhookSendResult, {**answer.data, "replayed": answer.replayed})

    def quota(self) -> WebhookQuota:
        return cast(WebhookQuota, self._c._call("GET", "/api/v1/proxy/webhooks/quota", self._c._deployment_headers()).data)

    def deliveries(self, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> WebhookDeliveries:
        """Delivery records, newest first; pass the answer's next_cursor for the next page."""
        answer = self._c._call(
            "GET", "/api/v1/proxy/webhooks/deliveries", self._c._deployment_headers(), query={"limit": limit, "cursor": cursor}
        )
        return cast(WebhookDeliveries, answer.data)

    def delivery(self, webhook_id: str) -> WebhookDelivery:
        answer = self._c._call("GET", f"/api/v1/proxy/webhooks/deliveries/{_quote(webhook_id)}", self._c._deployment_headers())
        return cast(WebhookDelivery, answer.data)


class _Budgets:
    """An organization's budgets through the application API (``/organizations/{id}/budgets``,
    docs/budgets.md), with the client's API key: ``read`` reads, ``admin`` creates, changes and
    deletes. Answers are the envelope's ``data``. Reads and changes are retried like every safe call;
    a create or a delete is sent once (the route takes no idempotency key: a repeated create would
    make a second budget)."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def _path(self, organization_id: str, budget_id: Optional[str] = None) -> str:
        base = f"/organizations/{_quote(organization_id)}/budgets"
        return base if budget_id is None else f"{base}/{_quote(budget_id)}"

    def _send(self, method: str, path: str, *, body: Any = None, idempotent: bool = True) -> Any:
        c = self._c
        return c._call(method, path, c._api_key_headers(), body=body, idempotent=idempotent).data["data"]

    def list(self, organization_id: str) -> List[Budget]:
        """Every budget of the organization, oldest first, each with what its window in progress has counted."""
        return cast(List[Budget], self._send("GET", self._path(organization_id)))

    def create(
        self,
        organization_id: str,
        *,
        scope: BudgetScope,
        window: BudgetWindow,
        limit_credits: Optional[int] = None,
        limit_ai_tokens: Optional[int] = None,
        deployment_id: Optional[str] = None,
        api_key_id: Optional[str] = None,
        end_user_id: Optional[str] = None,
        tool_name: Optional[str] = None,
        mode: Optional[BudgetMode] = None,
        alert_thresholds: Optional[Sequence[int]] = None,
    ) -> Budget:
        """Creates a budget: at least one limit, and the scope's id (``deployment_id``, ``api_key_id``,
        ``end_user_id`` or ``tool_name``; ``"*"`` for each end user or tool separately)."""
        fields: dict[str, Any] = {
            "scope": scope,
            "window": window,
            "limit_credits": limit_credits,
            "limit_ai_tokens": limit_ai_tokens,
            "deployment_id": deployment_id,
            "api_key_id": api_key_id,
            "end_user_id": end_user_id,
            "tool_name": tool_name,
            "mode": mode,
            "alert_thresholds": None if alert_thresholds is None else list(alert_thresholds),
        }
        body = {key: value for key, value in fields.items() if value is not None}
        return cast(Budget, self._send("POST", self._path(organization_id), body=body, idempotent=False))

    def get(self, organization_id: str, budget_id: str) -> Budget:
        """One budget with its window in progress."""
        return cast(Budget, self._send("GET", self._path(organization_id, budget_id)))

    def update(
        self,
        organization_id: str,
        budget_id: str,
        *,
        limit_credits: Union[int, None, _Keep] = KEEP,
        limit_ai_tokens: Union[int, None, _Keep] = KEEP,
        window: Optional[BudgetWindow] = None,
        mode: Optional[BudgetMode] = None,
        alert_thresholds: Optional[Sequence[int]] = None,
    ) -> Budget:
        """Changes what is named; the rest keeps its value. ``limit_credits=None`` removes that limit
        (while the other remains). A budget's scope and ids cannot change: a budget for something else is a new budget."""
        body: dict[str, Any] = {}
        if limit_credits is not KEEP:
            body["limit_credits"] = limit_credits
        if limit_ai_tokens is not KEEP:
            body["limit_ai_tokens"] = limit_ai_tokens
        for key, value in (("window", window), ("mode", mode)):
            if value is not None:
                body[key] = value
        if alert_thresholds is not None:
            body["alert_thresholds"] = list(alert_thresholds)
        if not body:
            raise CreditgateError("INVALID_REQUEST", "budgets.update needs at least one change")
        return cast(Budget, self._send("PUT", self._path(organization_id, budget_id), body=body))

    def delete(self, organization_id: str, budget_id: str) -> Budget:
        """Deletes the budget and its windows; answers it as it was."""
        return cast(Budget, self._send("DELETE", self._path(organization_id, budget_id), idempotent=False))


class _AutoTopUp:
    """An organization's auto top-up setting through the application API
    (``/organizations/{id}/auto-top-up``, docs/billing.md, "Auto top-up"), with the client's API key,
    which needs ``admin`` to read or change it. Answers are the envelope's ``data``. Both calls are
    retried like every safe call: a PUT sets the whole setting, so a repeat changes nothing more."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def _send(self, method: str, organization_id: str, body: Any = None) -> AutoTopUp:
        c = self._c
        path = f"/organizations/{_quote(organization_id)}/auto-top-up"
        return cast(AutoTopUp, c._call(method, path, c._api_key_headers(), body=body).data["data"])

    def get(self, organization_id: str) -> AutoTopUp:
        """The setting; never set, ``enabled`` is False and the rest None."""
        return self._send("GET", organization_id)

    def set(self, organization_id: str, *, enabled: bool, below_credits: int, pack: str, max_per_month: int) -> AutoTopUp:
        """Sets the whole setting: every field is required. ``pack`` is a credit pack's name (an unknown
        one is VALIDATION_ERROR 400 naming the packs). Enabling needs billing available and a saved
        payment method, else CONFLICT 409 with ``body["details"]["missing"]`` (``billing_available``,
        ``payment_method``) and nothing changes; ``enabled=False`` needs neither. Enabling resets the
        count of failures in a row."""
        body = {"enabled": enabled, "below_credits": below_credits, "pack": pack, "max_per_month": max_per_month}
        return self._send("PUT", organization_id, body)

