import type { Ctx } from '../../context.js';
import { authorize } from '../organizations/rbac.js';
import { costTable, type PriceList, priceListOf } from './costs.js';

/**
 * The price list for a signed-in member of any role (organization.read; an API key needs `read`): the
 * same costs and tool → action map as GET /api/v1/mcp/credit-costs (docs/metering.md, Prices up front).
 * The table is the platform's, the same for every organization; the organization only decides who may read it.
 */
export async function organizationPriceList(
  ctx: Ctx,
  organizationId: string,
): Promise<Omit<PriceList, 'etag'>> {
  await authorize(ctx, organizationId, 'organization.read');
  const list = priceListOf(await costTable(ctx));
  return { costs: list.costs, tools: list.tools };
}
