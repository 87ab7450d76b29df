import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { DenialReason, PaymentRequired } from '../types.js';

/** Where the middleware puts what it knows about a call in a tool result's `_meta`. */
export const META_DENIAL = 'io.creditgate/denial';
export const META_USAGE = 'io.creditgate/usage';
/** A refusal money could lift: the service's `payment_required`, copied as received (docs/metering.md). */
export const META_PAYMENT_REQUIRED = 'io.creditgate/payment_required';

export type MeteringRefusal = DenialReason | 'no_user' | 'rate_limited' | 'platform_unavailable' | 'metering_misconfigured';

export interface DenialInfo {
  reason: MeteringRefusal;
  tool_name: string;
  tier: string | null;
  message: string;
  upgrade_url?: string | undefined;
  retry_after_seconds?: number | undefined;
  credits_available?: number | null | undefined;
  /** budget_exceeded: the budget that refused the call, and when its window resets (docs/budgets.md). */
  budget_id?: string | undefined;
  resets_at?: string | undefined;
}

const credits = (n: number) => `${n} ${n === 1 ? 'credit' : 'credits'}`;

/**
 * What a refusal with `payment_required` says (docs/client.md, "What the middleware puts in _meta"):
 * the price and the balance, and the top-up link when the service sent one; a budget's names the budget
 * and when its window resets. Undefined when the refusal carries none (the general sentence applies).
 */
function paymentMessage(reason: MeteringRefusal, tool: string, payment: PaymentRequired | undefined): string | undefined {
  if (!payment || payment.reason !== reason) return undefined;
  const price = `it costs ${credits(payment.credits_required)}`;
  const balance = payment.credits_available === null ? 'unlimited or unknown' : credits(payment.credits_available);
  if (reason === 'insufficient_credits') {
    const advice = payment.top_up_url
      ? `Buy credits at ${payment.top_up_url} (the link is valid for 30 minutes), then call the tool again.`
      : 'Buy credits or wait for the monthly allocation to reset, then call the tool again.';
    return `Not enough credits to run "${tool}": ${price} and the balance is ${balance}. ${advice}`;
  }
  if (reason === 'budget_exceeded') {
    const budget = payment.budget_id ? `the spending budget ${payment.budget_id}` : 'a spending budget';
    const resets = payment.resets_at ? ` The budget's window resets at ${payment.resets_at}.` : '';
    return `"${tool}" would go over ${budget} of this workspace (${price}), so it did not run and nothing was charged.${resets} Buying credits does not lift a budget: wait for its window to reset, or ask the workspace owner to raise it.`;
  }
  return undefined;
}

function messageFor(reason: MeteringRefusal, tool: string, tier: string | null, upgradeUrl: string | undefined, retryAfterSeconds?: number, payment?: PaymentRequired): string {
  const upgrade = upgradeUrl ? ` Upgrade at ${upgradeUrl}.` : ' Upgrade the plan to use it.';
  const forPayment = paymentMessage(reason, tool, payment);
  if (forPayment) return forPayment;
  switch (reason) {
    case 'sandbox_tier':
      return `The tool "${tool}" is not available on the sandbox tier.${upgrade}`;
    case 'mcp_disabled':
      return `MCP tools are turned off for this deployment${tier ? ` (tier ${tier})` : ''}.${upgrade}`;
    case 'insufficient_credits':
      return `Not enough credits to run "${tool}". Buy credits or wait for the monthly allocation to reset, then call the tool again.`;
    case 'budget_exceeded':
      return `"${tool}" would go over a spending budget of this workspace, so it did not run and nothing was charged. Buying credits does not lift a budget: wait for its window to reset, or ask the workspace owner to raise it.`;
    case 'no_deployment_found':
      return `No active deployment is linked to this account, so "${tool}" cannot be metered. Create or join an organization, then try again.`;
    case 'deployment_not_found':
      return `The deployment this session meters against is unknown or suspended, so "${tool}" cannot run. Contact the workspace owner.`;
    case 'no_user':
      return `"${tool}" needs a signed-in user: this request carried no user identity. Sign in and call the tool again.`;
    case 'rate_limited':
      return `Too many calls: this deployment's rate limit is reached, so "${tool}" did not run and nothing was charged. Try again in ${retryAfterSeconds ?? 60} seconds.`;
    case 'platform_unavailable':
      return `Usage metering is unreachable right now, so "${tool}" did not run and nothing was charged. Try again in a moment.`;
    case 'metering_misconfigured':
      return `This server's metering credentials were refused, so "${tool}" did not run and nothing was charged. The server's operator must fix its creditgate key.`;
  }
}

export function denialInfo(
  reason: MeteringRefusal,
  tool: string,
  tier: string | null,
  upgradeUrl: string | undefined,
  creditsAvailable?: number | null,
  retryAfterSeconds?: number,
  paymentRequired?: PaymentRequired,
): DenialInfo {
  const budget = reason === 'budget_exceeded' ? paymentRequired : undefined;
  const wantsUpgrade = reason === 'sandbox_tier' || reason === 'mcp_disabled' || reason === 'insufficient_credits';
  return {
    reason,
    tool_name: tool,
    tier,
    message: messageFor(reason, tool, tier, upgradeUrl, retryAfterSeconds, paymentRequired),
    ...(wantsUpgrade && upgradeUrl ? { upgrade_url: upgradeUrl } : {}),
    ...(creditsAvailable !== undefined ? { credits_available: creditsAvailable } : {}),
    ...(retryAfterSeconds !== undefined ? { retry_after_seconds: retryAfterSeconds } : {}),
    ...(budget?.budget_id !== undefined ? { budget_id: budget.budget_id } : {}),
    ...(budget?.resets_at !== undefined ? { resets_at: budget.resets_at } : {}),
  };
}

/**
 * A refused call as an MCP tool error the model can read and act on. structuredContent is added only
 * where the tool declares no outputSchema (a client validates structured content against it, errors included).
 * A refusal money could lift also carries the service's `payment_required`, as received, under
 * META_PAYMENT_REQUIRED.
 */
export function refusalResult(info: DenialInfo, withStructuredContent: boolean, paymentRequired?: PaymentRequired): CallToolResult {
  return {
    isError: true,
    content: [{ type: 'text', text: info.message }],
    ...(withStructuredContent ? { structuredContent: { error: 'creditgate_denied', ...info } } : {}),
    _meta: { [META_DENIAL]: info, ...(paymentRequired ? { [META_PAYMENT_REQUIRED]: paymentRequired } : {}) },
  };
}
