"""Answers of every route the client calls, as the service's OpenAPI document describes them
(packages/client/src/generated/openapi.ts). They are the parsed JSON, typed: new fields the
service adds later arrive too."""

from __future__ import annotations

from typing import Any, Literal, Optional, TypedDict

DenialReason = Literal[
    "sandbox_tier", "insufficient_credits", "no_deployment_found", "deployment_not_found", "mcp_disabled", "budget_exceeded"
]


class _BudgetNamed(TypedDict, total=False):
    # budget_exceeded: the budget that refused the call, and when its window ends.
    budget_id: str
    resets_at: str


class PaymentRequired(_BudgetNamed):
    """A check's or record's refusal for money (docs/budgets.md, Enforcement)."""

    reason: Literal["insufficient_credits", "budget_exceeded"]
    credits_required: int
    credits_available: Optional[int]


class _Refused(TypedDict, total=False):
    # Present on a refusal for money: insufficient_credits, or budget_exceeded naming the budget.
    payment_required: PaymentRequired


class _Reservation(TypedDict, total=False):
    # Present when the check carried reserve (and is allowed): the held invocation and until when.
    invocation_id: str
    reservation_expires_at: str


class StdioCheckResult(_Reservation, _Refused):
    allowed: bool
    credit_cost: int
    reason: Optional[DenialReason]
    tier: Optional[str]


class ServiceCheckResult(StdioCheckResult):
    credits_available: Optional[int]


class RecordResult(_Refused):
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


class ToolAction(TypedDict):
    tool_name: str
    action: str


class CreditCosts(TypedDict):
    costs: list[CreditCost]
    # The tool → action map; a tool not listed is metered as platform_basic.
    tools: list[ToolAction]


class ToolPrice(TypedDict):
    """``_meta["io.creditgate/pricing"]`` of a metered tool in tools/list."""

    credits: int
    action: str


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


# ---- budgets (docs/budgets.md, API) ----

BudgetScope = Literal["organization", "deployment", "api_key", "end_user", "tool"]
BudgetWindow = Literal["hour", "day", "week", "month", "period"]
BudgetMode = Literal["block", "alert"]


class BudgetSubject(TypedDict):
    id: str  # the end user ("***" for a viewer) or the tool
    spent_credits: int
    spent_ai_tokens: int


class Budget(TypedDict):
    """An organization's budget, with what its window in progress has counted."""

    id: str
    organization_id: str
    scope: BudgetScope
    deployment_id: Optional[str]
    api_key_id: Optional[str]
    end_user_id: Optional[str]
    tool_name: Optional[str]
    limit_credits: Optional[int]
    limit_ai_tokens: Optional[int]
    window: BudgetWindow
    mode: BudgetMode
    alert_thresholds: list[int]
    spent_credits: Optional[int]
    remaining_credits: Optional[int]
    spent_ai_tokens: Optional[int]
    remaining_ai_tokens: Optional[int]
    window_start: str
    resets_at: str
    subjects: Optional[list[BudgetSubject]]
    created_at: str
    updated_at: str


# ---- auto top-up (docs/billing.md, "Auto top-up") ----


class AutoTopUp(TypedDict):
    """An organization's auto top-up setting; never set, it is off with nulls."""

    enabled: bool
    below_credits: Optional[int]
    pack: Optional[str]
    max_per_month: Optional[int]
    # Failed top-ups in a row; the third switches auto top-up off.
    consecutive_failures: int
    # Why failures switched it off; None otherwise.
    disabled_reason: Optional[str]
    updated_at: Optional[str]
