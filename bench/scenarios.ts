import type { Tenant } from './fixtures.js';
import type { LoadTarget, RequestShape } from './lib/load.js';
import type { Endpoint, Spread } from './lib/results.js';

/** A tool with no tool_actions row: metered as platform_basic, 1 credit per call. */
export const BENCH_TOOL = 'bench_tool';

export const ENDPOINTS: Record<Endpoint, { label: string; path: string; expect: string }> = {
  check: { label: 'stdio check-entitlement', path: '/api/v1/mcp/stdio/check-entitlement', expect: '"allowed":true' },
  record: { label: 'stdio record-usage', path: '/api/v1/mcp/stdio/record-usage', expect: '"success":true' },
  usage: { label: 'service usage', path: '/api/v1/mcp/usage', expect: '"success":true' },
};

export const SPREADS: Record<Spread, string> = {
  many: 'many deployments',
  hot: 'one hot deployment',
};

function shape(endpoint: Endpoint, tenant: Tenant, serviceKey: string): RequestShape {
  if (endpoint === 'usage') {
    return {
      headers: { 'x-mcp-service-key': serviceKey },
      body: JSON.stringify({ deployment_id: tenant.deploymentId, tool_name: BENCH_TOOL }),
    };
  }
  return { headers: { authorization: `Bearer ${tenant.apiKey}` }, body: JSON.stringify({ tool_name: BENCH_TOOL }) };
}

/** Many deployments: requests go round-robin over every tenant's key (or deployment id); hot: all on one. */
export function creditgateTarget(
  url: string,
  endpoint: Endpoint,
  spread: Spread,
  tenants: { many: Tenant[]; hot: Tenant },
  serviceKey: string,
): LoadTarget {
  const chosen = spread === 'many' ? tenants.many : [tenants.hot];
  const { path, expect } = ENDPOINTS[endpoint];
  return {
    url,
    path,
    shapes: chosen.map((t) => shape(endpoint, t, serviceKey)),
    isSuccess: (body) => body.includes(expect),
    // Records always carry a fresh invocation id, as the SDK middleware sends (docs/benchmarks.md, Method).
    uniqueInvocationIds: endpoint !== 'check',
  };
}

export function baselineTarget(url: string): LoadTarget {
  return {
    url,
    path: '/baseline',
    shapes: [{ headers: {}, body: JSON.stringify({ tool_name: BENCH_TOOL }) }],
    isSuccess: (body) => body.includes('"ok":true'),
  };
}
