"""Answers of every route the client calls, as the service's OpenAPI document describes them
(packages/client/src/generated/openapi.ts). They are the parsed JSON, typed: new fields the
service adds later arrive too."""

from __future__ import annotations

from typing import Any, Literal, Optional, TypedDict

DenialReason = Literal["sandbox_tier", "insufficient_credits", "no_deployment_found", "deployment_not_found", "mcp_disabled"]


class _Reservation(TypedDict, total=False):
    # Present when the check carried reserve (and is allowed): the held invocation and until when.
    invocation_id: str
    reservation_expires_at: str


class StdioCheckResult(_Reservation):
    allowed: bool
    credit_cost: int
    reason: Optional[DenialReason]
    tier: Optional[str]


class ServiceCheckResult(StdioCheckResult):
    credits_available: Optional[int]


class RecordResult(TypedDict):
    success: bool
    credits_used: int
    credits_remaining: Optional[int]
    error: Optional[str]
    invocation_id: Optional[str]
    usage_id: Optional[str]
    # Added by the client: the service replayed the first answer to this invocation id.
    replayed: bool


class ResolveResult(TypedDict):
    deployment_id: Optional[str]
    organization_id: Optional[str]
    tier: Optional[str]
    mcp_enabled: bool
    error: Optional[str]


class CreditCost(TypedDict):
    action: str
    credits: int
    description: Optional[str]


class CreditCosts(TypedDict):
    costs: list[CreditCost]


class ReleaseResult(TypedDict):
    invocation_id: str
    status: str
    released_credits: int


class InvocationStatus(TypedDict):
    invocation_id: str
    deployment_id: str
    tool_name: str
    status: str  # reserved, recorded, released, expired, refunded (or denied)
    reserved_credits: int
    credits_used: int
    credits_refunded: int
    usage_id: Optional[str]
    reservation_expires_at: Optional[str]
    created_at: str
    updated_at: str


class RefundResult(TypedDict):
    usage_id: str
    refund_id: Optional[str]
    credits_refunded: int
    credits_forfeited: int
    total_refunded: int
    credits_remaining: Optional[int]


class Features(TypedDict):
    ai_enabled: bool
    billing_enabled: bool
    custom_domain: bool
    white_label: bool
    mcp_enabled: bool
    ai_monthly_limit: Optional[int]
    api_rate_limit: Optional[int]
    support_level: str


class AiTokensQuota(TypedDict):
    used: int
    limit: Optional[int]
    remaining: Optional[int]
    resets_at: str


class Quotas(TypedDict):
    ai_tokens: AiTokensQuota


class EntitlementSnapshot(TypedDict):
    status: str
    tier: str
    features: Features
    quotas: Quotas
    message: Optional[str]
    next_check_seconds: int


class AiQuota(TypedDict):
    tier: str
    used: int
    limit: Optional[int]
    remaining: Optional[int]
    resets_at: str
    credits_available: Optional[int]
    credits_per_standard: int
    credits_per_advanced: int
    credits_per_premium: int


# The webhook proxy's answers are camelCase on the wire (docs/webhooks.md, The proxy), and stay so here.
WebhookSendResult = TypedDict(
    "WebhookSendResult",
    {
        "success": bool,
        "webhookId": str,
        "statusCode": Optional[int],
        "responseBody": Optional[str],
        "error": Optional[str],
        "creditsUsed": int,
        "creditsRemaining": Optional[int],
        "attempts": int,
        "deliveredAt": Optional[str],
        # Added by the client: the service replayed the first answer to this idempotency key.
        "replayed": bool,
    },
)

WebhookQuota = TypedDict(
    "WebhookQuota",
    {"creditsAvailable": Optional[int], "creditsPerWebhook": int, "webhooksAvailable": Optional[int], "periodEnds": str},
)


class WebhookDelivery(TypedDict):
    id: str
    webhook_id: Optional[str]
    url: str
    method: str
    event_type: Optional[str]
    payload: Any
    status: str
    status_code: Optional[int]
    response_body: Optional[str]
    error: Optional[str]
    attempt_count: int
    next_retry_at: Optional[str]
    delivered_at: Optional[str]
    created_at: str


class WebhookDeliveries(TypedDict):
    data: list[WebhookDelivery]
    next_cursor: Optional[str]
