import type { FastifyBaseLogger } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, type Harness, unique } from '../../test/harness.js';
import { closedPort, type SmtpStandIn, startSmtpStandIn } from '../../test/smtp-stand-in.js';
import type { Deps } from '../context.js';
import { DELIVERED_SECRET_BODY, MAIL_TEMPLATES, oneLine, readOutboxBody, renderMail, sendMail, senderOf } from './mailer.js';

let h: Harness;
let smtp: SmtpStandIn;
beforeAll(async () => {
  h = await createHarness();
  smtp = await startSmtpStandIn();
});
afterAll(async () => {
  await smtp.close();
  await h.close();
});

interface OutboxRow {
  to: string;
  subject: string;
  body: string;
  body_encrypted: boolean;
  template: string;
  sent_at: Date | null;
}

const outbox = async (id: string) => (await h.deps.db.query<OutboxRow>('SELECT * FROM email_outbox WHERE id = $1', [id]))[0]!;

/** Deps with another SMTP_URL and a logger that keeps what it was given. */
function depsWith(smtpUrl: string | undefined): { deps: Deps; logged: unknown[] } {
  const logged: unknown[] = [];
  const keep = (...args: unknown[]) => {
    logged.push(args);
  };
  const log = { warn: keep, error: keep, info: keep, debug: keep } as unknown as FastifyBaseLogger;
  return { deps: { ...h.deps, config: { ...h.config, smtpUrl }, log }, logged };
}

const message = (to: string, secret = 'cginv_secretsecret') => ({
  to,
  template: 'invitation' as const,
  subject: 'Hello',
  text: `Open http://creditgate.test/invitations/${secret} to join.\n`,
  containsSecret: true,
});

describe('mailer', () => {
  it('without SMTP_URL the message is a row of email_outbox, unsent; a body holding a secret is encrypted at rest', async () => {
    const { deps } = depsWith(undefined);
    const to = `${unique('m')}@example.com`;
    const { id, delivered } = await sendMail(deps, message(to));
    expect(delivered).toBe('outbox');
    const row = await outbox(id);
    expect(row).toMatchObject({ to, subject: 'Hello', template: 'invitation', sent_at: null, body_encrypted: true });
    expect(row.body).not.toContain('cginv_secretsecret');
    expect(readOutboxBody(h.config, row)).toBe('Open http://creditgate.test/invitations/cginv_secretsecret to join.\n');
    // A message without a secret stays plain text (operators read it as it is).
    const plain = await sendMail(deps, { to, template: 'test', subject: 'Plain', text: 'Nothing secret.\n' });
    expect(await outbox(plain.id)).toMatchObject({ body: 'Nothing secret.\n', body_encrypted: false });
  });

  it('with SMTP_URL it is sent by SMTP, marked sent, and its secrets are scrubbed from the stored body', async () => {
    const { deps } = depsWith(`smtp://mailuser:mailpass@127.0.0.1:${smtp.port}?from=${encodeURIComponent('Ops <ops@example.com>')}`);
    const to = `${unique('m')}@example.com`;
    const before = smtp.messages.length;
    const { id, delivered } = await sendMail(deps, message(to, 'cginv_livetoken'));
    expect(delivered).toBe('smtp');
    const got = (await smtp.waitFor(before + 1))[before]!;
    expect(got.to).toEqual([to]);
    expect(got.from).toBe('ops@example.com');
    expect(got.auth).toEqual({ user: 'mailuser', pass: 'mailpass' });
    expect(got.data).toContain('Subject: Hello');
    expect(got.data).toContain('cginv_livetoken');
    const row = await outbox(id);
    expect(row.sent_at).toBeInstanceOf(Date);
    // Delivered: the secret-bearing body is not kept, in any form.
    expect(row).toMatchObject({ body: DELIVERED_SECRET_BODY, body_encrypted: false });
  });

  it('an unreachable SMTP server leaves the row unsent and logs no credential, token or body', async () => {
    const port = await closedPort();
    const { deps, logged } = depsWith(`smtp://mailuser:hunter2secret@127.0.0.1:${port}`);
    const { id, delivered } = await sendMail(deps, message(`${unique('m')}@example.com`, 'cginv_mustnotleak'));
    expect(delivered).toBe('outbox');
    expect((await outbox(id)).sent_at).toBeNull();
    const text = JSON.stringify(logged);
    expect(logged.length).toBeGreaterThan(0);
    expect(text).not.toContain('hunter2secret');
    expect(text).not.toContain('cginv_mustnotleak');
    expect(text).not.toContain('mailuser');
  });

  it('a message the server refuses stays in the outbox', async () => {
    const refusing = await startSmtpStandIn({ rejectData: true });
    try {
      const { deps } = depsWith(refusing.url);
      const { id, delivered } = await sendMail(deps, message(`${unique('m')}@example.com`));
      expect(delivered).toBe('outbox');
      expect((await outbox(id)).sent_at).toBeNull();
    } finally {
      await refusing.close();
    }
  });

  it('renders every template; the sender defaults to no-reply at PUBLIC_BASE_URL', () => {
    for (const template of MAIL_TEMPLATES) {
      const { subject, text } = renderMail(template, { publicBaseUrl: 'https://cg.example.com' });
      expect(subject.length).toBeGreaterThan(0);
      expect(text.length).toBeGreaterThan(0);
    }
    const invitation = renderMail('invitation', {
      publicBaseUrl: 'https://cg.example.com',
      invitation: { organizationName: 'Acme', inviterName: 'Ada', role: 'admin', acceptUrl: 'https://x/invitations/t', expiresAt: new Date('2026-01-22T00:00:00Z') },
    });
    expect(invitation.subject).toContain('Acme');
    expect(invitation.text).toContain('Ada invited you to join Acme on creditgate as admin');
    expect(invitation.text).toContain('https://x/invitations/t');
    expect(senderOf('smtp://127.0.0.1:25', 'https://cg.example.com')).toBe('creditgate <no-reply@cg.example.com>');
  });

  it('names with line breaks or other control characters cannot add lines to a subject or a body', async () => {
    const hostile = 'Acme\r\nBcc: victim@evil.example\u2028X-Spam: no\u0085\u2029\tend';
    const { subject, text } = renderMail('invitation', {
      publicBaseUrl: 'https://cg.example.com',
      invitation: { organizationName: hostile, inviterName: `Eve\nReply-To: eve@evil.example`, role: 'member', acceptUrl: 'https://x/invitations/t', expiresAt: new Date(0) },
    });
    expect(subject).toBe('You are invited to join Acme  Bcc: victim@evil.example X-Spam: no   end on creditgate');
    expect(text.split('\n')[0]).toBe('Eve Reply-To: eve@evil.example invited you to join Acme  Bcc: victim@evil.example X-Spam: no   end on creditgate as member.');
    expect(oneLine('a\u0000b\u007fc\u000bd')).toBe('a b c d');
    // Over SMTP: one Subject line, no forged header.
    const { deps } = depsWith(smtp.url);
    const to = `${unique('m')}@example.com`;
    const before = smtp.messages.length;
    await sendMail(deps, { to, template: 'invitation', subject, text, containsSecret: true });
    const got = (await smtp.waitFor(before + 1)).find((m) => m.to.includes(to))!;
    expect(got.data).not.toMatch(/^(Bcc|X-Spam|Reply-To):/im);
    // A long header is folded (continuation lines start with white space, RFC 5322); unfolded, it is the one Subject.
    const headers = got.data.split('\r\n\r\n')[0]!.replace(/\r\n[ \t]+/g, ' ');
    expect(headers).toMatch(/^Subject: You are invited to join Acme +Bcc: victim@evil\.example X-Spam: no +end on creditgate$/m);
  });
});
