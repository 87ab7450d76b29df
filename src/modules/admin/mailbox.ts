import type { Config } from '../../config.js';
import type { Ctx } from '../../context.js';
import { AppError } from '../../errors.js';
import { type KeysetPosition, pageOf } from '../../http/envelope.js';
import { linksOf, readOutboxBody } from '../../lib/mailer.js';
import { writeAudit } from '../audit/service.js';

/**
 * The operator's view of the local outbox (docs/accounts.md, "The local mailbox"). Without SMTP_URL
 * an outbox row is the delivery: a verification or invitation link waits there, so on a fresh
 * install someone must be able to read it. The operator may (they hold everyone's tokens anyway);
 * organization users never: the rows hold every user's tokens.
 */
export interface MailboxMessage {
  id: string;
  to: string;
  subject: string;
  template: string;
  status: 'unsent' | 'sent';
  created_at: string;
  sent_at: string | null;
  /** The readable body (decrypted when stored encrypted); null when ENCRYPTION_KEY cannot open it. */
  text: string | null;
  links: string[];
}

interface OutboxRow {
  id: string;
  to: string;
  subject: string;
  template: string;
  body: string;
  body_encrypted: boolean;
  created_at: Date;
  sent_at: Date | null;
}

/**
 * The mailbox exists where mail stays local: no SMTP_URL, and not NODE_ENV=production (where mail
 * must leave, and an operator screen of live tokens is one more thing to protect).
 */
export function isMailboxOpen(config: Pick<Config, 'smtpUrl' | 'nodeEnv'>): boolean {
  return !config.smtpUrl && config.nodeEnv !== 'production';
}

export const MAILBOX_CLOSED_MESSAGE =
  'The mailbox exists only without SMTP_URL and outside NODE_ENV=production; here mail is sent by SMTP, read it in the recipients\' mailboxes';

function messageOf(config: Pick<Config, 'encryptionKey'>, row: OutboxRow): MailboxMessage {
  let text: string | null;
  try {
    text = readOutboxBody(config, row);
  } catch {
    // Queued under another ENCRYPTION_KEY: listed, but nothing of it can be shown.
    text = null;
  }
  return {
    id: row.id,
    to: row.to,
    subject: row.subject,
    template: row.template,
    status: row.sent_at ? 'sent' : 'unsent',
    created_at: row.created_at.toISOString(),
    sent_at: row.sent_at?.toISOString() ?? null,
    text,
    links: text === null ? [] : linksOf(text),
  };
}

/**
 * GET /api/v1/admin/mailbox: newest first, keyset-paginated over (created_at, id), optionally the
 * messages to one address (case-insensitive). 404 NOT_FOUND where the mailbox does not exist. Each
 * read is audited (actor operator, action read, resource email).
 */
export async function adminListMailbox(
  ctx: Ctx,
  input: { to?: string | undefined; limit: number; cursor: KeysetPosition | null },
): Promise<{ items: MailboxMessage[]; next: string | null }> {
  if (!isMailboxOpen(ctx.config)) throw new AppError('NOT_FOUND', MAILBOX_CLOSED_MESSAGE);
  const to = input.to?.trim() || null;
  const rows = await ctx.db.query<OutboxRow>(
    `SELECT id, "to", subject, template, body, body_encrypted, created_at, sent_at
     FROM email_outbox
     WHERE ($1::text IS NULL OR lower("to") = lower($1::text))
       AND ($2::timestamptz IS NULL OR (created_at, id) < ($2::timestamptz, $3::uuid))
     ORDER BY created_at DESC, id DESC
     LIMIT $4`,
    [to, input.cursor?.at ?? null, input.cursor?.id ?? null, input.limit + 1],
  );
  await writeAudit(ctx.db, ctx, { organizationId: null, action: 'read', resourceType: 'email', resourceId: null, metadata: { to } });
  const { items, next } = pageOf(rows, input.limit, (r) => r.created_at);
  return { items: items.map((row) => messageOf(ctx.config, row)), next };
}
