"""The one exception the client raises, and the metering denial that subclasses it.

A failure to set up a call (bad input, credentials, credits for a webhook send, rate limit, the
platform unreachable) is a CreditgateError carrying the service's machine-readable code. Answers
that are not errors (a denied check, a failed webhook target) are results, never exceptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

# Codes the client itself produces, next to the service's own (UNAUTHORIZED, INSUFFICIENT_CREDITS, ...).
CONFIGURATION_ERROR = "CONFIGURATION_ERROR"
MISSING_CREDENTIALS = "MISSING_CREDENTIALS"
NETWORK_ERROR = "NETWORK_ERROR"
TIMEOUT = "TIMEOUT"
INVALID_RESPONSE = "INVALID_RESPONSE"

RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


def is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUSES


class CreditgateError(Exception):
    """A call to creditgate failed.

    ``code``: the service's UPPER_SNAKE code or one of the client's (``CONFIGURATION_ERROR``,
    ``MISSING_CREDENTIALS``, ``NETWORK_ERROR``, ``TIMEOUT``, ``INVALID_RESPONSE``).
    ``status``: the HTTP status, None when no answer came. ``credits_required`` and
    ``credits_available`` come from the webhook proxy's camelCase ``creditsRequired`` /
    ``creditsAvailable`` (or a snake_case ``credits_required`` / ``credits_available`` where a body
    has them). ``should_retry``: the answer's ``x-should-retry`` header, ``False`` when the service
    says repeating the call cannot help (a refusal that waiting cannot cure), ``True`` when it sent
    ``true``, None when it sent neither or no answer came; only ``False`` changes anything: such an
    error is never transient and never retried. ``budget_id``: the budget that refused the call
    (``BUDGET_EXCEEDED``); ``resets_at``: when the refusal ends, the budget's window or the AI token
    quota's period (an ISO 8601 date-time, as sent).
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: Optional[int] = None,
        error: Optional[str] = None,
        credits_required: Optional[int] = None,
        credits_available: Optional[int] = None,
        retry_after_seconds: Optional[int] = None,
        should_retry: Optional[bool] = None,
        upgrade_url: Optional[str] = None,
        request_id: Optional[str] = None,
        fields: Optional[list[dict[str, str]]] = None,
        body: Any = None,
        budget_id: Optional[str] = None,
        resets_at: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.error = error
        self.credits_required = credits_required
        self.credits_available = credits_available
        self.retry_after_seconds = retry_after_seconds
        self.should_retry = should_retry
        self.upgrade_url = upgrade_url
        self.request_id = request_id
        self.fields = fields
        self.body = body
        self.budget_id = budget_id
        self.resets_at = resets_at

    @property
    def is_budget_exceeded(self) -> bool:
        """A budget refused the call: the webhook proxy's 403 and the AI proxy's 429 ``BUDGET_EXCEEDED``
        (``budget_id``, ``resets_at``). Buying credits does not lift it; its window's reset or a higher limit does."""
        return self.code == "BUDGET_EXCEEDED" or self.error == "budget_exceeded"

    @property
    def is_transient(self) -> bool:
        """The platform could not be reached or answered with a transient failure: the same call may succeed later.

        Never true for an answer that said ``x-should-retry: false``, whatever its status, nor for a
        budget's refusal, with or without that header (it holds until ``resets_at``).
        """
        if self.should_retry is False or self.is_budget_exceeded:
            return False
        if self.code in (NETWORK_ERROR, TIMEOUT, "IDEMPOTENCY_IN_PROGRESS"):
            return True
        return self.status is not None and self.status in RETRYABLE_STATUSES

    def __repr__(self) -> str:
        return f"CreditgateError(code={self.code!r}, status={self.status!r}, message={self.message!r})"


class MeteringDenied(CreditgateError):
    """``metered`` refused a call: the function did not run and nothing was charged.

    ``reason``: one of the service's denial reasons (``sandbox_tier``, ``insufficient_credits``,
    ``no_deployment_found``, ``deployment_not_found``, ``mcp_disabled``, ``budget_exceeded``) or
    ``no_user``, ``rate_limited``, ``platform_unavailable``, ``metering_misconfigured``. The message is
    the same sentence the TypeScript middleware returns, written for the model that called the tool.
    A ``budget_exceeded`` denial names the budget (``budget_id``) and when its window resets (``resets_at``).
    ``payment_required``: the service's object of a refusal money could lift, as received, or None
    (docs/client.md, "What the middleware puts in _meta").
    """

    def __init__(
        self,
        reason: str,
        tool_name: str,
        message: str,
        *,
        tier: Optional[str] = None,
        upgrade_url: Optional[str] = None,
        credits_available: Optional[int] = None,
        retry_after_seconds: Optional[int] = None,
        budget_id: Optional[str] = None,
        resets_at: Optional[str] = None,
        payment_required: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__(
            "METERING_DENIED",
            message,
            credits_available=credits_available,
            retry_after_seconds=retry_after_seconds,
            upgrade_url=upgrade_url,
            budget_id=budget_id,
            resets_at=resets_at,
        )
        self.reason = reason
        self.tool_name = tool_name
        self.tier = tier
        self.payment_required = payment_required

    def __repr__(self) -> str:
        return f"MeteringDenied(reason={self.reason!r}, tool_name={self.tool_name!r})"


@dataclass(frozen=True)
class BudgetRefusal:
    """A refusal by a budget (docs/budgets.md, Enforcement), whichever way it came."""

    # The budget that refused: the most restrictive when several would be crossed.
    budget_id: Optional[str]
    # When that budget's window ends and the count starts over (ISO 8601).
    resets_at: Optional[str]
    # What the call costs, where the answer says so.
    credits_required: Optional[int] = None
    # The balance, where the answer says so (None: unlimited or not said).
    credits_available: Optional[int] = None


def budget_refusal(value: object) -> Optional[BudgetRefusal]:
    """The budget refusal in a check answer (``allowed`` False, ``reason`` "budget_exceeded"), a record
    answer (``success`` False, ``error`` "budget_exceeded"), both with ``payment_required``, or a
    CreditgateError with ``is_budget_exceeded`` (the webhook proxy, the AI proxy); None for anything else.

    >>> budget = budget_refusal(cg.stdio.check_entitlement("search"))
    >>> if budget: print(f"over budget {budget.budget_id} until {budget.resets_at}")
    """
    if isinstance(value, MeteringDenied):
        if value.reason != "budget_exceeded":
            return None
        return BudgetRefusal(value.budget_id, value.resets_at, value.credits_required, value.credits_available)
    if isinstance(value, CreditgateError):
        if not value.is_budget_exceeded:
            return None
        return BudgetRefusal(value.budget_id, value.resets_at, value.credits_required, value.credits_available)
    if not isinstance(value, Mapping):
        return None
    required = value.get("payment_required")
    if not isinstance(required, Mapping) or required.get("reason") != "budget_exceeded":
        return None

    def text(v: Any) -> Optional[str]:
        return v if isinstance(v, str) else None

    def number(v: Any) -> Optional[int]:
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    return BudgetRefusal(
        text(required.get("budget_id")),
        text(required.get("resets_at")),
        number(required.get("credits_required")),
        number(required.get("credits_available")),
    )
