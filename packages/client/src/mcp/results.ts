import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { DenialReason, PaymentRequired } from '../types.js';

/** Where the middleware puts what it knows about a call in a tool result's `_meta`. */
export const META_DENIAL = 'io.creditgate/denial';
export const META_USAGE = 'io.creditgate/usage';

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

function messageFor(reason: MeteringRefusal, tool: string, tier: string | null, upgradeUrl: string | undefined, retryAfterSeconds?: number): string {
  const upgrade = upgradeUrl ? ` Upgrade at ${upgradeUrl}.` : ' Upgrade the plan to use it.';
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
    message: messageFor(reason, tool, tier, upgradeUrl, retryAfterSeconds),
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
 */
export function refusalResult(info: DenialInfo, withStructuredContent: boolean): CallToolResult {
  return {
    isError: true,
    content: [{ type: 'text', text: info.message }],
    ...(withStructuredContent ? { structuredContent: { error: 'creditgate_denied', ...info } } : {}),
    _meta: { [META_DENIAL]: info },
  };
}
