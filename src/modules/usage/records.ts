import type { Ctx } from '../../context.js';
import { AppError } from '../../errors.js';
import { type KeysetPosition, pageOf } from '../../http/envelope.js';
import { authorize, MASKED_END_USER, seesEndUsers } from '../organizations/rbac.js';
import { csvDocument, plainCell, textCell } from './csv.js';
import { recordRange } from './range.js';
import { assertOwnDeployment } from './summary.js';

/** Rows per CSV answer (docs/usage-analytics.md): more than this continues at the `Link: rel="next"` cursor. */
export const CSV_PAGE_ROWS = 10_000;

export interface UsageRecordFilters {
  from?: string | undefined;
  to?: string | undefined;
  deploymentId?: string | undefined;
  toolName?: string | undefined;
  mcpUserId?: string | undefined;
  success?: boolean | undefined;
}

export interface UsageRecordView {
  id: string;
  deployment_id: string;
  tool_name: string;
  action: string;
  mcp_user_id: string | null;
  credits: number;
  credits_refunded: number;
  success: boolean;
  error: string | null;
  invocation_id: string | null;
  timestamp: string;
}

interface RecordRow {
  id: string;
  deployment_id: string;
  tool_name: string;
  action: string;
  mcp_user_id: string | null;
  quantity: number;
  refunded: number;
  success: boolean;
  error: string | null;
  invocation_id: string | null;
  timestamp: Date;
}

/**
 * An organization's usage records, newest first (usage.read), keyset-paginated over (timestamp, id)
 * on usage_records_org_ts_idx: records written while a client pages land before its cursor, so the
 * pages it has not read yet neither repeat nor skip a row. `metadata` is not part of the answer
 * (docs/usage-analytics.md).
 */
export async function listUsageRecords(
  ctx: Ctx,
  input: { organizationId: string; limit: number; cursor: KeysetPosition | null } & UsageRecordFilters,
): Promise<{ items: UsageRecordView[]; next: string | null }> {
  const auth = await authorize(ctx, input.organizationId, 'usage.read');
  const masked = !seesEndUsers(auth);
  if (masked && input.mcpUserId !== undefined) throw new AppError('FORBIDDEN', 'Your role (viewer) does not see end users: filtering by mcp_user_id is not allowed');
  const { from, to } = recordRange(input);
  await assertOwnDeployment(ctx, input.organizationId, input.deploymentId);
  // "timestamp" <= the cursor's time bounds the index scan; the row comparison breaks ties by id.
  const rows = await ctx.db.query<RecordRow>(
    `SELECT id, deployment_id, tool_name, metric AS action, mcp_user_id, quantity, refunded, success, error, invocation_id, "timestamp"
     FROM usage_records
     WHERE organization_id = $1
       AND ($2::timestamptz IS NULL OR "timestamp" >= $2::timestamptz)
       AND ($3::timestamptz IS NULL OR "timestamp" < $3::timestamptz)
       AND ($4::uuid IS NULL OR deployment_id = $4::uuid)
       AND ($5::text IS NULL OR tool_name = $5::text)
       AND ($6::text IS NULL OR mcp_user_id = $6::text)
       AND ($7::boolean IS NULL OR success = $7::boolean)
       AND ($8::timestamptz IS NULL OR ("timestamp" <= $8::timestamptz AND ("timestamp", id) < ($8::timestamptz, $9::uuid)))
     ORDER BY "timestamp" DESC, id DESC LIMIT $10`,
    [
      input.organizationId,
      from,
      to,
      input.deploymentId ?? null,
      input.toolName ?? null,
      input.mcpUserId ?? null,
      input.success ?? null,
      input.cursor?.at ?? null,
      input.cursor?.id ?? null,
      input.limit + 1,
    ],
  );
  const { items, next } = pageOf(rows, input.limit, (r) => r.timestamp);
  return { items: items.map((r) => viewOf(r, masked)), next };
}

function viewOf(r: RecordRow, masked: boolean): UsageRecordView {
  return {
    id: r.id,
    deployment_id: r.deployment_id,
    tool_name: r.tool_name,
    action: r.action,
    mcp_user_id: masked && r.mcp_user_id !== null ? MASKED_END_USER : r.mcp_user_id,
    // Failed records deducted nothing (quantity 0); a refund lowers what the record cost.
    credits: r.success ? r.quantity - r.refunded : 0,
    credits_refunded: r.refunded,
    success: r.success,
    error: r.error,
    invocation_id: r.invocation_id,
    timestamp: r.timestamp.toISOString(),
  };
}

export const CSV_HEADER = [
  'id',
  'timestamp',
  'deployment_id',
  'tool_name',
  'action',
  'mcp_user_id',
  'success',
  'credits',
  'credits_refunded',
  'error',
  'invocation_id',
] as const;

/** The records as CSV, one row each, in CSV_HEADER's order (caller-supplied text neutralised: csv.ts). */
export function usageRecordsCsv(items: UsageRecordView[]): string {
  return csvDocument(
    CSV_HEADER,
    items.map((r) => [
      plainCell(r.id),
      plainCell(r.timestamp),
      plainCell(r.deployment_id),
      textCell(r.tool_name),
      textCell(r.action),
      textCell(r.mcp_user_id),
      plainCell(r.success),
      plainCell(r.credits),
      plainCell(r.credits_refunded),
      textCell(r.error),
      textCell(r.invocation_id),
    ]),
  );
}
