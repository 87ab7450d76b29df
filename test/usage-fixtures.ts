import type { LightMyRequestResponse } from 'fastify';
import { expect } from 'vitest';
import { createDeployment } from '../src/modules/deployments/service.js';
import type { UsageRecordView } from '../src/modules/usage/records.js';
import type { UsageCounts, UsageGroup, UsageSummaryView } from '../src/modules/usage/summary.js';
import { adminHeaders, type Harness, json, serviceHeaders, unique } from './harness.js';

// The wire shapes are the service's own view types: a test cannot drift from what the routes answer.
export type Counts = UsageCounts;
export type Group = UsageGroup;
export type Summary = UsageSummaryView;
export type UsageRecord = UsageRecordView;
export type RecordPage = { data: UsageRecord[]; meta: { next_cursor: string | null } };
export type ErrorBody = { error: { code: string; message: string }; details: { fields?: Array<{ field: string }> } };

/**
 * Fixtures of the usage analytics suites: usage recorded through the service-mode API at the
 * harness clock's time, and readers of the two routes. `harness` is read at call time.
 */
export function usageFixtures(harness: () => Harness) {
  const h = () => harness();
  return {
    /** POST /api/v1/mcp/usage at the clock's current time (optionally set first); must answer 200. */
    async record(
      deploymentId: string,
      toolName: string,
      options: { mcpUserId?: string | null; at?: string; invocationId?: string } = {},
    ): Promise<{ success: boolean; credits_used: number; usage_id: string | null; error: string | null }> {
      if (options.at) h().clock.set(options.at);
      const res = await h().request({
        method: 'POST',
        url: '/api/v1/mcp/usage',
        headers: serviceHeaders(h()),
        payload: {
          deployment_id: deploymentId,
          tool_name: toolName,
          ...(options.mcpUserId !== undefined ? { mcp_user_id: options.mcpUserId } : {}),
          ...(options.invocationId ? { invocation_id: options.invocationId } : {}),
        },
      });
      expect(res.statusCode, res.body).toBe(200);
      return json(res);
    },
    /** A tool name of this run mapped to `action` (tool_actions is shared by every test of the run). */
    async toolFor(action: string, name = unique(`tool-${action}`)): Promise<string> {
      const res = await h().request({ method: 'PUT', url: `/api/v1/admin/tool-actions/${encodeURIComponent(name)}`, headers: adminHeaders(h()), payload: { action } });
      expect(res.statusCode, res.body).toBe(200);
      return name;
    },
    async refund(usageId: string, amount: number): Promise<void> {
      const res = await h().request({ method: 'POST', url: `/api/v1/admin/usage/${usageId}/refund`, headers: adminHeaders(h()), payload: { amount, reason: 'test' } });
      expect(res.statusCode, res.body).toBe(200);
    },
    /** A second (non-primary) deployment of the organization, through the service layer. */
    async addDeployment(organizationId: string): Promise<string> {
      const { deployment } = await h().deps.db.transaction((tx) =>
        createDeployment(tx, h().ctx, { organizationId, name: unique('second'), tier: 'launch', isPrimary: false }),
      );
      return deployment.id;
    },
    summaryRes: (headers: Record<string, string>, organizationId: string, query = ''): Promise<LightMyRequestResponse> =>
      h().request({ method: 'GET', url: `/organizations/${organizationId}/usage/summary${query}`, headers }),
    async summary(headers: Record<string, string>, organizationId: string, query = ''): Promise<Summary> {
      const res = await h().request({ method: 'GET', url: `/organizations/${organizationId}/usage/summary${query}`, headers });
      expect(res.statusCode, res.body).toBe(200);
      return json<{ data: Summary }>(res).data;
    },
    recordsRes: (headers: Record<string, string>, organizationId: string, query = ''): Promise<LightMyRequestResponse> =>
      h().request({ method: 'GET', url: `/organizations/${organizationId}/usage/records${query}`, headers }),
    /** Every record matching `query`, page by page from `cursor`. */
    async walk(headers: Record<string, string>, organizationId: string, query: string, cursor: string | null = null): Promise<UsageRecord[]> {
      const all: UsageRecord[] = [];
      let pages = 0;
      let next = cursor;
      do {
        const sep = query.includes('?') ? '&' : '?';
        const res = await h().request({
          method: 'GET',
          url: `/organizations/${organizationId}/usage/records${query}${next ? `${sep}cursor=${encodeURIComponent(next)}` : ''}`,
          headers,
        });
        expect(res.statusCode, res.body).toBe(200);
        const body = json<RecordPage>(res);
        all.push(...body.data);
        next = body.meta.next_cursor;
        pages += 1;
      } while (next && pages < 200);
      return all;
    },
  };
}

/** The sum of each count over groups: must equal the totals. */
export function sumGroups(groups: Group[]): Counts {
  const sum: Counts = { calls: 0, successful: 0, failed: 0, credits: 0, credits_refunded: 0, input_tokens: 0, output_tokens: 0 };
  for (const g of groups) for (const k of Object.keys(sum) as Array<keyof Counts>) sum[k] += g[k];
  return sum;
}

/** Rollup A computed from an organization's records ($1), and read from the rollup: they must be equal. */
export const HOURS_FROM_RECORDS = `
  SELECT deployment_id, date_bin('1 hour'::interval, "timestamp", TIMESTAMPTZ '1970-01-01 00:00:00+00') AS hour, tool_name, metric AS action,
         CASE WHEN metric = 'ai_tokens' THEN tool_name ELSE '' END AS model,
         count(*)::int AS calls, (count(*) FILTER (WHERE success))::int AS successful,
         COALESCE(sum(quantity) FILTER (WHERE success), 0)::int AS credits, COALESCE(sum(refunded) FILTER (WHERE success), 0)::int AS refunded,
         COALESCE(sum((metadata->>'input_tokens')::bigint) FILTER (WHERE metric = 'ai_tokens'), 0)::int AS input_tokens,
         COALESCE(sum((metadata->>'output_tokens')::bigint) FILTER (WHERE metric = 'ai_tokens'), 0)::int AS output_tokens
  FROM usage_records WHERE organization_id = $1 GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5`;
export const HOURS_FROM_ROLLUP = `
  SELECT deployment_id, hour, tool_name, action, model, calls::int, successful::int, credits::int, refunded::int, input_tokens::int, output_tokens::int
  FROM usage_rollup_hours WHERE organization_id = $1 AND calls > 0 ORDER BY 1, 2, 3, 4, 5`;
/** Rollup B, the same way. */
export const DAYS_FROM_RECORDS = `
  SELECT deployment_id, date_bin('1 day'::interval, "timestamp", TIMESTAMPTZ '1970-01-01 00:00:00+00') AS day, COALESCE(mcp_user_id, '') AS end_user,
         count(*)::int AS calls, (count(*) FILTER (WHERE success))::int AS successful,
         COALESCE(sum(quantity) FILTER (WHERE success), 0)::int AS credits, COALESCE(sum(refunded) FILTER (WHERE success), 0)::int AS refunded
  FROM usage_records WHERE organization_id = $1 GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`;
export const DAYS_FROM_ROLLUP = `
  SELECT deployment_id, day, end_user, calls::int, successful::int, credits::int, refunded::int
  FROM usage_rollup_days WHERE organization_id = $1 AND calls > 0 ORDER BY 1, 2, 3`;
