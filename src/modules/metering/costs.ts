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
    deps.db.query<{ tool_name: string; action: string }>('SELECT tool_name, action FROM tool_actions', [], 'tool_table'),
  ]);
  return {
    costs: new Map(costs.map((c) => [c.action, { credits: c.credits, description: c.description }])),
    toolActions: new Map(tools.map((t) => [t.tool_name, t.action])),
  };
}

export async function costTable(deps: Deps): Promise<CostTable> {
  const cached = deps.caches.costs.get('all');
  if (cached) return cached;
  const table = await loadCostTable(deps);
  deps.caches.costs.set('all', table);
  return table;
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
