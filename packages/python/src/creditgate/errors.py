"""The one exception the client raises, and the metering denial that subclasses it.

A failure to set up a call (bad input, credentials, credits for a webhook send, rate limit, the
platform unreachable) is a CreditgateError carrying the service's machine-readable code. Answers
that are not errors (a denied check, a failed webhook target) are results, never exceptions.
"""

from __future__ import annotations

from typing import Any, Optional

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
    error is never transient and never retried.
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

    @property
    def is_transient(self) -> bool:
        """The platform could not be reached or answered with a transient failure: the same call may succeed later.

        Never true for an answer that said ``x-should-retry: false``, whatever its status.
        """
        if self.should_retry is False:
            return False
        if self.code in (NETWORK_ERROR, TIMEOUT, "IDEMPOTENCY_IN_PROGRESS"):
            return True
        return self.status is not None and self.status in RETRYABLE_STATUSES

    def __repr__(self) -> str:
        return f"CreditgateError(code={self.code!r}, status={self.status!r}, message={self.message!r})"


class MeteringDenied(CreditgateError):
    """``metered`` refused a call: the function did not run and nothing was charged.

    ``reason``: one of the service's denial reasons (``sandbox_tier``, ``insufficient_credits``,
    ``no_deployment_found``, ``deployment_not_found``, ``mcp_disabled``) or ``no_user``,
    ``rate_limited``, ``platform_unavailable``, ``metering_misconfigured``. The message is the same
    sentence the TypeScript middleware returns, written for the model that called the tool.
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
    ) -> None:
        super().__init__(
            "METERING_DENIED",
            message,
            credits_available=credits_available,
            retry_after_seconds=retry_after_seconds,
            upgrade_url=upgrade_url,
        )
        self.reason = reason
        self.tool_name = tool_name
        self.tier = tier

    def __repr__(self) -> str:
        return f"MeteringDenied(reason={self.reason!r}, tool_name={self.tool_name!r})"
