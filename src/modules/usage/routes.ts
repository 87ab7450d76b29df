import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { ctxOf } from '../../http/auth.js';
import { decodeCursor, Envelope, envelopeErrors, ok, page, PageEnvelope } from '../../http/envelope.js';
import { anyOf } from '../../http/schemas.js';
import { acceptsCsv } from './csv.js';
import { CSV_PAGE_ROWS, listUsageRecords, usageRecordsCsv } from './records.js';
import { OrgParams, RecordsQuery, SummaryQuery, UsageRecordSchema, UsageSummarySchema } from './schemas.js';
import { summarizeUsage } from './summary.js';

const tags = ['Usage'];
const security = anyOf('bearerAuth', 'apiKeyHeader', 'apiKey');

/** The same request with `cursor` set to the next page's: the `Link: rel="next"` of a CSV answer. */
function nextUrl(requestUrl: string, cursor: string): string {
  const url = new URL(requestUrl, 'http://localhost');
  url.searchParams.set('cursor', cursor);
  return `${url.pathname}${url.search}`;
}

/** `20260115T120000Z`: the moment of an export, for its file name. */
const compactStamp = (at: Date) => at.toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, '');

/** Usage analytics of an organization (docs/usage-analytics.md): a grouped summary and the records, JSON or CSV. */
export async function usageRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/organizations/:id/usage/summary',
    {
      config: { auth: 'account' },
      schema: {
        tags,
        security,
        operationId: 'getUsageSummary',
        summary: 'Calls, outcomes and credits in a range, by UTC day or hour, tool, action or end user (usage.read: every role; key scope read)',
        params: OrgParams,
        querystring: SummaryQuery,
        response: { 200: Envelope(UsageSummarySchema), ...envelopeErrors(400, 401, 403, 404) },
      },
    },
    async (request) => {
      const summary = await summarizeUsage(ctxOf(request), {
        organizationId: request.params.id,
        groupBy: request.query.group_by ?? 'day',
        from: request.query.from,
        to: request.query.to,
        deploymentId: request.query.deployment_id,
        splitBy: request.query.split_by,
        tz: request.query.tz,
      });
      return ok(summary);
    },
  );

  app.get(
    '/organizations/:id/usage/records',
    {
      config: { auth: 'account' },
      schema: {
        tags,
        security,
        operationId: 'listUsageRecords',
        summary: 'Usage records newest first, filtered; Accept: text/csv for a CSV export (usage.read: every role; key scope read)',
        description:
          'JSON: a page of `limit` records (default 20) in the envelope, `meta.next_cursor` for the next. ' +
          `With \`Accept: text/csv\`: a header row and up to ${CSV_PAGE_ROWS.toLocaleString('en-US')} records (or \`limit\` when given) as an attachment; ` +
          'when more match, `Link: <…&cursor=…>; rel="next"` gives the next part. Text cells starting with = + - @ get a leading apostrophe.',
        params: OrgParams,
        querystring: RecordsQuery,
        response: {
          200: {
            description: 'Usage records, newest first: the envelope, or CSV with Accept: text/csv',
            headers: {
              Link: Type.String({ description: 'CSV only: the next part of the export, `<url>; rel="next"`, when more records match' }),
              'Content-Disposition': Type.String({ description: 'CSV only: `attachment; filename="usage-<organization>-<time>.csv"`' }),
            },
            content: {
              'application/json': { schema: PageEnvelope(UsageRecordSchema) },
              'text/csv': {
                schema: Type.String({
                  description: 'CRLF-separated rows, a header row first: id, timestamp, deployment_id, tool_name, action, mcp_user_id, success, credits, credits_refunded, error, invocation_id',
                }),
              },
            },
          },
          ...envelopeErrors(400, 401, 403, 404),
        },
      },
    },
    async (request, reply) => {
      const ctx = ctxOf(request);
      const csv = acceptsCsv(request.headers.accept);
      const { items, next } = await listUsageRecords(ctx, {
        organizationId: request.params.id,
        limit: csv ? (request.query.limit ?? CSV_PAGE_ROWS) : (request.query.limit ?? 20),
        cursor: decodeCursor(request.query.cursor),
        from: request.query.from,
        to: request.query.to,
        deploymentId: request.query.deployment_id,
        toolName: request.query.tool_name,
        mcpUserId: request.query.mcp_user_id,
        success: request.query.success,
      });
      // One URL, two representations: a cache must key on Accept.
      reply.header('vary', 'Accept');
      if (!csv) return page(items, next);
      if (next) reply.header('link', `<${nextUrl(request.url, next)}>; rel="next"`);
      const filename = `usage-${request.params.id}-${compactStamp(ctx.clock.now())}.csv`;
      return reply
        .type('text/csv; charset=utf-8')
        .header('content-disposition', `attachment; filename="${filename}"`)
        .send(usageRecordsCsv(items));
    },
  );
}
