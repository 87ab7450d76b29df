import { createHash } from 'node:crypto';
import type { Deps } from '../../context.js';
import type { CostTable } from '../../lib/caches.js';

/** A tool with no row in tool_actions is metered as this action (docs/operator.md). */
export const DEFAULT_ACTION = 'platform_basic';

async function loadCostTable(deps: Deps): Promise<CostTable> {
  const [costs, tools] = await Promise.all([
    deps.db.query<{ action: string; credits: number; description: string | null }>(
      'SELECT action, credits, description FROM credit_costs ORDER BY action',
      [],
      'cost_table',
    ),
    deps.db.query<{ tool_name: string; action: string }>('SELECT tool_name, action FROM tool_actions ORDER BY tool_name', [], 'tool_table'),
  ]);
  return {
    costs: new Map(costs.map((c) => [c.action, { credits: c.credits, description: c.description }])),
    toolActions: new Map(tools.map((t) => [t.tool_name, t.action])),
  };
}

/** The cost table, cached; a read that raced an operator's change is answered but not kept (TtlCache.load). */
export function costTable(deps: Deps): Promise<CostTable> {
  return deps.caches.costs.load('all', () => loadCostTable(deps));
}

export interface ToolCost {
  action: string;
  credits: number;
}

export async function costOfTool(deps: Deps, toolName: string): Promise<ToolCost> {
  const table = await costTable(deps);
  const action = table.toolActions.get(toolName) ?? DEFAULT_ACTION;
  const cost = table.costs.get(action);
  // tool_actions references credit_costs and costs are never deleted, so this is a broken database.
  if (!cost) throw new Error(`credit cost for action ${action} is missing`);
  return { action, credits: cost.credits };
}

/** The price list of GET /api/v1/mcp/credit-costs (docs/metering.md, Prices up front): the table in order, and its ETag. */
export interface PriceList {
  costs: Array<{ action: string; credits: number; description: string | null }>;
  tools: Array<{ tool_name: string; action: string }>;
  /** A strong ETag over the list's content: equal lists (on any instance) have equal tags. */
  etag: string;
}

/** One list per cached table: a table is replaced, never changed, when the operator changes a cost or a mapping. */
const priceLists = new WeakMap<CostTable, PriceList>();

export function priceListOf(table: CostTable): PriceList {
  const known = priceLists.get(table);
  if (known) return known;
  const costs = [...table.costs.entries()]
    .map(([action, c]) => ({ action, credits: c.credits, description: c.description }))
    .sort((a, b) => (a.action < b.action ? -1 : a.action > b.action ? 1 : 0));
  const tools = [...table.toolActions.entries()]
    .map(([tool_name, action]) => ({ tool_name, action }))
    .sort((a, b) => (a.tool_name < b.tool_name ? -1 : a.tool_name > b.tool_name ? 1 : 0));
  const digest = createHash('sha256').update(JSON.stringify({ costs, tools })).digest('base64url');
  const list = { costs, tools, etag: `"${digest.slice(0, 32)}"` };
  priceLists.set(table, list);
  return list;
}

/**
 * Whether an If-None-Match header names the current list (RFC 9110 §13.1.2: weak comparison, so a
 * `W/` prefix a proxy added still matches; `*` matches any list).
 */
export function matchesEtag(ifNoneMatch: string | undefined, etag: string): boolean {
  if (ifNoneMatch === undefined) return false;
  if (ifNoneMatch.trim() === '*') return true;
  return ifNoneMatch.split(',').some((tag) => tag.trim().replace(/^W\//, '') === etag);
}
