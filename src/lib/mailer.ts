import nodemailer from 'nodemailer';
import type { Config } from '../config.js';
import type { Deps } from '../context.js';
import type { Queryable } from '../db/client.js';
import type { ClaimSpec } from '../workers/claim.js';
import { exhausted, type JobPolicy, type JobQueue, retryAt, runJobs } from '../workers/jobs.js';
import { decryptSecret, encryptSecret } from './crypto-box.js';

/**
 * Outgoing mail (docs/accounts.md, Account safety). Every message is first a row of `email_outbox`, written in the transaction
 * of the change that causes it (an invitation, a test send), so a mail failure never rolls the change
 * back and nothing is lost. After the commit, when SMTP_URL is set, it is sent by SMTP and the row gets
 * its `sent_at`; without SMTP_URL the outbox row is the delivery (operators and tests read it there,
 * through `readOutboxBody` when the body holds a secret and is stored encrypted).
 */
export const MAIL_TEMPLATES = ['welcome', 'invitation', 'test', 'webhook_disabled', 'verify_email'] as const;
export type MailTemplate = (typeof MAIL_TEMPLATES)[number];
export type Delivery = 'smtp' | 'outbox';

export interface Mail {
  to: string;
  template: MailTemplate;
  subject: string;
  text: string;
  organizationId?: string | null;
  /**
   * The text holds a bearer secret (an invitation link, a verification link). Such a body is
   * stored encrypted (AES-256-GCM under ENCRYPTION_KEY, `body_encrypted`) until SMTP accepts it, and
   * then replaced by a notice, so the outbox never keeps a live secret readable. Pass the config to
   * `enqueueMail` with it; read a stored body with `readOutboxBody`.
   */
  containsSecret?: boolean;
}

export interface QueuedMail extends Mail {
  id: string;
}

/** Bounded waits so a dead or black-holed SMTP server cannot hold a request for minutes. */
const SMTP_TIMEOUTS = { connectionTimeout: 5_000, greetingTimeout: 5_000, socketTimeout: 10_000 };

export interface InvitationMailVars {
  organizationName: string;
  inviterName: string | null;
  role: string;
  acceptUrl: string;
  expiresAt: Date;
}

/**
 * Names that go into mail have line breaks removed (docs/accounts.md, Account safety). A value chosen by a user (an organization
 * name, an inviter's full name) must not start a new header line in the subject or forge lines in the
 * body, so every control character (CR, LF, tab, NEL …) and the Unicode line and paragraph separators
 * become a space.
 */
export function oneLine(value: string): string {
  return value.replace(/[\p{Cc}\p{Zl}\p{Zp}]/gu, ' ');
}

/** Every string of the template variables (one level of nesting) through `oneLine`, so a new template cannot forget it. */
function oneLineVars<T extends object>(vars: T): T {
  const clean = (value: unknown): unknown => {
    if (typeof value === 'string') return oneLine(value);
    if (value && typeof value === 'object' && !(value instanceof Date)) {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, typeof v === 'string' ? oneLine(v) : v]));
    }
    return value;
  };
  return Object.fromEntries(Object.entries(vars).map(([k, v]) => [k, clean(v)])) as T;
}

/** The text of each template: plain text, no tracking, no markup to escape; interpolated values are one line each. */
export function renderMail(
  template: MailTemplate,
  unsafeVars: {
    publicBaseUrl: string;
    invitation?: InvitationMailVars;
    webhook?: { url: string; reason: string };
    verification?: { verifyUrl: string; expiresAt: Date };
  },
): { subject: string; text: string } {
  const vars = oneLineVars(unsafeVars);
  switch (template) {
    case 'welcome':
      return {
        subject: 'Welcome to creditgate',
        text: `Welcome to creditgate.\n\nSign in at ${vars.publicBaseUrl} to create an organization, invite your team and issue API keys.\n`,
      };
    case 'invitation': {
      const inv = vars.invitation ?? {
        organizationName: 'Example organization',
        inviterName: 'A teammate',
        role: 'member',
        acceptUrl: `${vars.publicBaseUrl}/invitations/example`,
        expiresAt: new Date(0),
      };
      const who = inv.inviterName ? `${inv.inviterName} invited you` : 'You have been invited';
      return {
        subject: `You are invited to join ${inv.organizationName} on creditgate`,
        text:
          `${who} to join ${inv.organizationName} on creditgate as ${inv.role}.\n\n` +
          `Accept the invitation: ${inv.acceptUrl}\n\n` +
          `The link is valid until ${inv.expiresAt.toISOString()}. If you did not expect it, ignore this message.\n`,
      };
    }
    case 'test':
      return {
        subject: 'creditgate test message',
        text: `This is a test message from creditgate (${vars.publicBaseUrl}). Mail delivery works.\n`,
      };
    case 'webhook_disabled': {
      const webhook = vars.webhook ?? { url: 'https://example.com/hooks', reason: 'it failed for 5 days' };
      return {
        subject: 'A webhook of your organization was disabled',
        text:
          `creditgate disabled the webhook ${webhook.url}: ${webhook.reason}.\n\n` +
          `Events are no longer sent to it. Fix the receiver, then enable the webhook again (PATCH is_active: true) at ${vars.publicBaseUrl}.\n`,
      };
    }
    case 'verify_email': {
      const v = vars.verification ?? { verifyUrl: `${vars.publicBaseUrl}/verify-email#token=example`, expiresAt: new Date(0) };
      return {
        subject: 'Confirm your email address for creditgate',
        text:
          `Confirm that this address belongs to your creditgate account: ${v.verifyUrl}\n\n` +
          `The link is valid until ${v.expiresAt.toISOString()}. If you did not sign up, ignore this message.\n`,
      };
    }
  }
}

/**
 * Write the message into the outbox inside the caller's transaction. A message that `containsSecret`
 * needs the config (its ENCRYPTION_KEY): its body is stored encrypted. The subject is one line whatever
 * the caller passed (a header line cannot be forged through it).
 */
export function enqueueMail(tx: Queryable, now: Date, mail: Mail & { containsSecret?: false }): Promise<QueuedMail>;
export function enqueueMail(tx: Queryable, now: Date, mail: Mail, config: Pick<Config, 'encryptionKey'>): Promise<QueuedMail>;
export async function enqueueMail(tx: Queryable, now: Date, mail: Mail, config?: Pick<Config, 'encryptionKey'>): Promise<QueuedMail> {
  if (mail.containsSecret && !config) throw new Error('enqueueMail: a message that contains a secret needs the encryption key');
  const encrypted = mail.containsSecret === true;
  const body = encrypted ? encryptSecret(config!.encryptionKey, mail.text) : mail.text;
  const subject = oneLine(mail.subject);
  const rows = await tx.query<{ id: string }>(
    `INSERT INTO email_outbox (organization_id, "to", subject, body, body_encrypted, template, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id`,
    [mail.organizationId ?? null, mail.to, subject, body, encrypted, mail.template, now],
  );
  return { ...mail, subject, id: rows[0]!.id };
}

/** The readable body of an outbox row (for operators and tests): decrypted when it was stored encrypted. */
export function readOutboxBody(config: Pick<Config, 'encryptionKey'>, row: { body: string; body_encrypted: boolean }): string {
  return row.body_encrypted ? decryptSecret(config.encryptionKey, row.body) : row.body;
}

/** What stays of a secret-bearing body once SMTP accepted it: the message is delivered, its secret is not kept. */
export const DELIVERED_SECRET_BODY = '[removed after delivery: the message held a secret]';

/** The sender address: `?from=` on SMTP_URL, else no-reply at PUBLIC_BASE_URL's host. */
export function senderOf(smtpUrl: string, publicBaseUrl: string): string {
  const from = new URL(smtpUrl).searchParams.get('from');
  if (from) return from;
  return `creditgate <no-reply@${new URL(publicBaseUrl).hostname}>`;
}

function smtpOptions(smtpUrl: string): { url: string } {
  const url = new URL(smtpUrl);
  url.searchParams.delete('from');
  return { url: url.toString() };
}

/** Send one message by SMTP; throws on refusal or timeout. */
export async function sendSmtp(smtpUrl: string, from: string, mail: Pick<Mail, 'to' | 'subject' | 'text'>): Promise<void> {
  const transport = nodemailer.createTransport({ ...SMTP_TIMEOUTS, ...smtpOptions(smtpUrl) });
  try {
    await transport.sendMail({ from, to: mail.to, subject: mail.subject, text: mail.text });
  } finally {
    transport.close();
  }
}

/** Why a send failed, without anything that could carry a credential (the URL, the message). */
function failureOf(err: unknown): Record<string, unknown> {
  const e = err as { code?: unknown; responseCode?: unknown; command?: unknown };
  return {
    code: typeof e.code === 'string' ? e.code : undefined,
    response_code: typeof e.responseCode === 'number' ? e.responseCode : undefined,
    command: typeof e.command === 'string' ? e.command.split(' ')[0] : undefined,
  };
}

/**
 * After the commit: send a queued message by SMTP when SMTP_URL is set and mark it sent. Never throws:
 * a failed send leaves the row unsent in the outbox (and is logged without secrets or the body).
 */
export async function deliverMail(deps: Pick<Deps, 'config' | 'db' | 'clock' | 'log'>, mail: QueuedMail): Promise<Delivery> {
  const { smtpUrl, publicBaseUrl } = deps.config;
  if (!smtpUrl) return 'outbox';
  return (await attemptSmtp(deps, smtpUrl, publicBaseUrl, mail, 1)) ? 'smtp' : 'outbox';
}

/** SMTP tries per message before it is left in the outbox for an operator (last_error says why). */
export const MAIL_MAX_ATTEMPTS = 5;

/**
 * The `mail-retry` queue's policy (docs/jobs.md): 1 min, 5 min, 30 min, 2 h between tries, no jitter;
 * a claimed row is its worker's for 10 minutes (a send times out far sooner).
 */
export const MAIL_POLICY: JobPolicy = {
  batchSize: 20,
  leaseMs: 10 * 60_000,
  maxAttempts: MAIL_MAX_ATTEMPTS,
  backoff: { kind: 'schedule', stepsMs: [60_000, 5 * 60_000, 30 * 60_000, 2 * 3_600_000], jitter: 0 },
  concurrency: 1,
};

/**
 * One SMTP try of a queued row (`text` is the readable body): marks it sent, a secret-bearing body
 * replaced by DELIVERED_SECRET_BODY, or records the failure and the next try.
 */
async function attemptSmtp(
  deps: Pick<Deps, 'db' | 'clock' | 'log'>,
  smtpUrl: string,
  publicBaseUrl: string,
  mail: Pick<QueuedMail, 'id' | 'to' | 'subject' | 'text' | 'template'>,
  attempt: number,
): Promise<boolean> {
  try {
    await sendSmtp(smtpUrl, senderOf(smtpUrl, publicBaseUrl), mail);
  } catch (err) {
    const failure = failureOf(err);
    deps.log.warn({ outbox_id: mail.id, template: mail.template, attempt, smtp: failure }, 'smtp delivery failed; the message stays in the outbox');
    await deps.db
      .query('UPDATE email_outbox SET attempts = $2, next_attempt_at = $3, last_error = $4 WHERE id = $1 AND sent_at IS NULL', [
        mail.id,
        attempt,
        retryAt(MAIL_POLICY, attempt, deps.clock.now()),
        JSON.stringify(failure),
      ])
      .catch(() => {});
    return false;
  }
  try {
    // The row itself says whether its body held a secret (body_encrypted), whoever queued it and whichever worker sends it.
    await deps.db.query(
      `UPDATE email_outbox SET sent_at = $2, attempts = $3, last_error = NULL,
         body = CASE WHEN body_encrypted THEN $4 ELSE body END, body_encrypted = false
       WHERE id = $1 AND sent_at IS NULL`,
      [mail.id, deps.clock.now(), attempt, DELIVERED_SECRET_BODY],
    );
  } catch (err) {
    // Sent but not marked: the worst case is one more copy when the row is retried.
    deps.log.warn({ outbox_id: mail.id, err: (err as Error).message }, 'mail sent but not marked in the outbox');
  }
  return true;
}

type MailDeps = Pick<Deps, 'config' | 'db' | 'clock' | 'log'> & Partial<Pick<Deps, 'metrics'>>;

interface OutboxRow {
  id: string;
  to: string;
  subject: string;
  body: string;
  body_encrypted: boolean;
  template: MailTemplate;
  attempts: number;
}

/**
 * The `mail-retry` queue (docs/jobs.md): unsent rows with tries left whose next try is due (or, never
 * tried by a worker, older than a minute — the sender right after the commit had its chance), leased
 * by moving next_attempt_at; `:organization` narrows the claim to one organization's mail. Without
 * SMTP_URL the outbox row is the delivery and there is nothing to retry.
 */
const MAIL_CLAIM: ClaimSpec = {
  name: 'mail-retry',
  table: 'email_outbox',
  key: 'id',
  pending: `q.sent_at IS NULL AND q.attempts < ${MAIL_MAX_ATTEMPTS}`,
  dueAt: "COALESCE(q.next_attempt_at, q.created_at + interval '1 minute')",
  lease: { kind: 'due', column: 'next_attempt_at' },
  where: ['(:organization::uuid IS NULL OR q.organization_id = :organization::uuid)'],
  orderBy: 'q.created_at',
  returning: 'j.id, j."to", j.subject, j.body, j.body_encrypted, j.template, j.attempts',
};

export const MAIL_QUEUE: JobQueue<OutboxRow, MailDeps, { smtpUrl: string; publicBaseUrl: string }> = {
  name: 'mail-retry',
  table: 'email_outbox',
  policy: MAIL_POLICY,
  claim: MAIL_CLAIM,
  setup: ({ config }) => (config.smtpUrl ? { smtpUrl: config.smtpUrl, publicBaseUrl: config.publicBaseUrl } : null),
  keyOf: (row) => row.id,
  async handle({ row, setup }, deps) {
    let text: string;
    try {
      // Decrypted only now, right before the send, and only in memory.
      text = readOutboxBody(deps.config, row);
    } catch {
      // Another ENCRYPTION_KEY than the one that queued it: retrying cannot help, so the row is left for an operator.
      deps.log.error({ outbox_id: row.id, template: row.template }, 'outbox body cannot be decrypted with ENCRYPTION_KEY; giving up on it');
      await deps.db.query('UPDATE email_outbox SET attempts = $2, last_error = $3 WHERE id = $1 AND sent_at IS NULL', [
        row.id,
        MAIL_MAX_ATTEMPTS,
        JSON.stringify({ code: 'EDECRYPT' }),
      ]);
      return 'failed';
    }
    const attempt = row.attempts + 1;
    if (await attemptSmtp(deps, setup.smtpUrl, setup.publicBaseUrl, { ...row, text }, attempt)) return 'done';
    return exhausted(MAIL_POLICY, attempt) ? 'failed' : 'retry';
  },
};

/** The `mail-retry` worker's pass (MAIL_QUEUE through the job runner); returns how many rows it claimed. */
export function retryOutbox(
  deps: MailDeps,
  batch = MAIL_POLICY.batchSize,
  /** One organization's mail only (tests share a database; the worker passes none). */
  organizationId: string | null = null,
): Promise<number> {
  return runJobs(deps, MAIL_QUEUE, { batch, params: { organization: organizationId } });
}

/** Queue (in its own transaction, with `inTx` for the caller's rows) and deliver: for sends not tied to another change. */
export async function sendMail(
  deps: Pick<Deps, 'config' | 'db' | 'clock' | 'log'>,
  mail: Mail,
  inTx?: (tx: Queryable, queued: QueuedMail) => Promise<void>,
): Promise<{ id: string; delivered: Delivery }> {
  const queued = await deps.db.transaction(async (tx) => {
    const q = await enqueueMail(tx, deps.clock.now(), mail, deps.config);
    if (inTx) await inTx(tx, q);
    return q;
  });
  return { id: queued.id, delivered: await deliverMail(deps, queued) };
}

/** Trailing characters that end a sentence around a URL rather than belong to it ("…at http://x.test." or "(http://x.test)"). */
const URL_TAIL = /[.,;:!?)\]}'"]+$/;

/**
 * The http(s) links of a message's text, in order, each once: what the operator's mailbox shows and
 * lets one follow (docs/accounts.md, "The local mailbox"). Plain text templates put each link
 * between spaces or at a line's end, so a link ends at whitespace.
 */
export function linksOf(text: string): string[] {
  const found = (text.match(/https?:\/\/[^\s<>"]+/g) ?? []).map((link) => link.replace(URL_TAIL, ''));
  return [...new Set(found)];
}
