"""creditgate: a standard-library Python client for creditgate, and ``metered`` for MCP tools.

    from creditgate import Client, metered
    cg = Client(api_key=os.environ["CREDITGATE_API_KEY"], base_url=os.environ["CREDITGATE_URL"])
    cg.stdio.check_entitlement("search")
"""

from ._identity import IDEMPOTENCY_META_KEYS, canonical, derive_invocation_id, invocation_id_for, uuid7
from ._version import __version__
from .client import KEEP, CacheOptions, Client, CostsRevalidation
from .errors import BudgetRefusal, CreditgateError, MeteringDenied, budget_refusal
from .metered import META_PRICING, TOOLS_LIST_CHANGED, Metered, MeteredCall, ToolPricing, metered
from .types import (
    AiQuota,
    Budget,
    BudgetMode,
    BudgetScope,
    BudgetSubject,
    BudgetWindow,
    CreditCost,
    CreditCosts,
    DenialReason,
    EntitlementSnapshot,
    InvocationStatus,
    PaymentRequired,
    RecordResult,
    RefundResult,
    ReleaseResult,
    ResolveResult,
    ServiceCheckResult,
    StdioCheckResult,
    ToolAction,
    ToolPrice,
    WebhookDeliveries,
    WebhookDelivery,
    WebhookQuota,
    WebhookSendResult,
)

__all__ = [
    "IDEMPOTENCY_META_KEYS",
    "KEEP",
    "META_PRICING",
    "TOOLS_LIST_CHANGED",
    "AiQuota",
    "Budget",
    "BudgetMode",
    "BudgetRefusal",
    "BudgetScope",
    "BudgetSubject",
    "BudgetWindow",
    "CacheOptions",
    "Client",
    "CostsRevalidation",
    "CreditCost",
    "CreditCosts",
    "CreditgateError",
    "DenialReason",
    "EntitlementSnapshot",
    "InvocationStatus",
    "Metered",
    "MeteredCall",
    "MeteringDenied",
    "PaymentRequired",
    "RecordResult",
    "RefundResult",
    "ReleaseResult",
    "ResolveResult",
    "ServiceCheckResult",
    "StdioCheckResult",
    "ToolAction",
    "ToolPrice",
    "ToolPricing",
    "WebhookDeliveries",
    "WebhookDelivery",
    "WebhookQuota",
    "WebhookSendResult",
    "__version__",
    "budget_refusal",
    "canonical",
    "derive_invocation_id",
    "invocation_id_for",
    "metered",
    "uuid7",
]
