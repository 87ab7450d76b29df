import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { ctxOf } from '../../http/auth.js';
import { decodeCursor, PageQuery } from '../../http/envelope.js';
import { flatErrors, Nullable, StringEnum } from '../../http/schemas.js';
import { adminListMailbox } from './mailbox.js';
import { security, tags } from './routes.js';

const MailboxMessageSchema = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    to: Type.String({ description: 'Recipient address', examples: ['ada@example.com'] }),
    subject: Type.String({ examples: ['Confirm your email address for creditgate'] }),
    template: Type.String({ description: 'welcome, invitation, test, webhook_disabled or verify_email', examples: ['verify_email'] }),
    status: StringEnum(['unsent', 'sent'], { description: 'unsent: the message is still only here (always so without SMTP_URL); sent: SMTP accepted it' }),
    created_at: Type.String({ format: 'date-time' }),
    sent_at: Nullable(Type.String({ format: 'date-time' })),
    text: Nullable(
      Type.String({
        description: 'The body, decrypted when it was stored encrypted; null when ENCRYPTION_KEY cannot open it (queued under another key)',
      }),
    ),
    links: Type.Array(Type.String(), {
      description: 'The http(s) links of the body in order (a verification or invitation link holds its token: follow it as the recipient would)',
      examples: [['http://127.0.0.1:8080/verify-email#token=cgev_4fT9aQ2xYz…']],
    }),
  },
  { title: 'AdminMailboxMessage' },
);

/**
 * The local mailbox (docs/accounts.md, "The local mailbox"): without SMTP_URL and outside
 * NODE_ENV=production the outbox is where mail is delivered, and the operator reads it here.
 */
export async function adminMailboxRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/api/v1/admin/mailbox',
    {
      config: { auth: 'admin' },
      schema: {
        tags,
        security,
        operationId: 'adminListMailbox',
        summary: 'Read the local outbox: every message with its links (only without SMTP_URL, outside NODE_ENV=production)',
        description:
          'Newest first, keyset-paginated (`limit` 1–100, default 20; pass `next_cursor` as `cursor`); `to` keeps the messages to one ' +
          'address (case-insensitive). Bodies holding a secret are stored encrypted and shown decrypted: the operator only, never an ' +
          'organization user. With SMTP_URL set, or under NODE_ENV=production, there is no mailbox: 404 `NOT_FOUND`.',
        querystring: Type.Object(
          {
            to: Type.Optional(Type.String({ maxLength: 320, description: 'Only the messages to this address (case-insensitive)', examples: ['ada@example.com'] })),
            ...PageQuery.properties,
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({
            messages: Type.Array(MailboxMessageSchema),
            next_cursor: Nullable(Type.String({ description: 'Pass as ?cursor= for the next page' })),
          }),
          ...flatErrors(400, 401, 404),
        },
      },
    },
    async (request) => {
      const { items, next } = await adminListMailbox(ctxOf(request), {
        to: request.query.to,
        limit: request.query.limit ?? 20,
        cursor: decodeCursor(request.query.cursor),
      });
      return { messages: items, next_cursor: next };
    },
  );
}
