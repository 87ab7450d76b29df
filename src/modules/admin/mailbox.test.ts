import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  adminHeaders,
  bearer,
  createHarness,
  createTenant,
  type Harness,
  json,
  signUpUnverified,
  signUpWithOrganization,
  unique,
} from '../../../test/harness.js';
import { sendMail } from '../../lib/mailer.js';
import type { MailboxMessage } from './mailbox.js';

/**
 * GET /api/v1/admin/mailbox: the operator reads the local outbox (docs/accounts.md, "The local
 * mailbox"), so verification and invitation links work on an install without SMTP.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

interface MailboxReply {
  messages: MailboxMessage[];
  next_cursor: string | null;
}

const mailbox = (query: string, headers: Record<string, string> = adminHeaders(h), on: Harness = h) =>
  on.request({ method: 'GET', url: `/api/v1/admin/mailbox${query}`, headers });

async function messagesTo(email: string, extra = ''): Promise<MailboxReply> {
  const res = await mailbox(`?to=${encodeURIComponent(email)}${extra}`);
  expect(res.statusCode, res.body).toBe(200);
  return json<MailboxReply>(res);
}

const addressOf = (prefix: string) => `${unique(prefix)}@example.com`.toLowerCase();

describe('GET /api/v1/admin/mailbox: who may read it', () => {
  it('answers 401 (flat) without the operator key: no key, a wrong one, a user\'s token, an API key, the key as a bearer', async () => {
    const owner = await signUpWithOrganization(h, 'mailbox-auth');
    const tenant = await createTenant(h);
    for (const headers of [{}, { 'x-admin-key': 'wrong-admin-key-0123456789' }, bearer(owner.accessToken), bearer(tenant.apiKey), bearer(h.config.adminApiKey)]) {
      const res = await mailbox(`?to=${encodeURIComponent(owner.email)}`, headers);
      expect(res.statusCode, res.body).toBe(401);
      expect(json(res)).toMatchObject({ error: 'unauthorized', code: 'UNAUTHORIZED' });
      expect(res.body).not.toContain('verify-email');
    }
  });

  it('is audited: each read writes a row (actor operator, action read, resource email) naming the address asked for', async () => {
    const email = addressOf('audited');
    await messagesTo(email);
    const rows = await h.deps.db.query<{ actor: string; action: string }>(
      "SELECT actor, action FROM audit_logs WHERE resource_type = 'email' AND metadata->>'to' = $1",
      [email],
    );
    expect(rows).toEqual([{ actor: 'operator', action: 'read' }]);
  });

  it('with SMTP_URL set, or under NODE_ENV=production, there is no mailbox: 404 NOT_FOUND saying why, nothing audited', async () => {
    const email = addressOf('closed');
    for (const overrides of [{ smtpUrl: 'smtp://127.0.0.1:9' }, { nodeEnv: 'production' as const }]) {
      const closed = await createHarness(overrides);
      try {
        const res = await mailbox(`?to=${encodeURIComponent(email)}`, adminHeaders(closed), closed);
        expect(res.statusCode, res.body).toBe(404);
        expect(json(res)).toMatchObject({ error: 'not_found', code: 'NOT_FOUND' });
        expect(json<{ message: string }>(res).message).toMatch(/only without SMTP_URL and outside NODE_ENV=production/);
        // Authentication still comes first.
        expect((await mailbox('', {}, closed)).statusCode).toBe(401);
      } finally {
        await closed.close();
      }
    }
    const audited = await h.deps.db.query("SELECT 1 FROM audit_logs WHERE resource_type = 'email' AND metadata->>'to' = $1", [email]);
    expect(audited).toEqual([]);
  });
});

describe('GET /api/v1/admin/mailbox: what it shows', () => {
  it('shows a new user\'s verification link, decrypted (stored encrypted); following it verifies the address', async () => {
    const user = await signUpUnverified(h);
    const reply = await messagesTo(user.email.toUpperCase());
    expect(reply.next_cursor).toBeNull();
    expect(reply.messages).toHaveLength(1);
    const [message] = reply.messages;
    expect(message).toMatchObject({ to: user.email, template: 'verify_email', status: 'unsent', sent_at: null, subject: 'Confirm your email address for creditgate' });
    expect(message!.links).toHaveLength(1);
    const link = message!.links[0]!;
    expect(link).toMatch(/^http:\/\/creditgate\.test\/verify-email#token=cgev_[0-9A-Za-z]{36}$/);
    expect(message!.text).toContain(link);
    const stored = await h.deps.db.query<{ body: string; body_encrypted: boolean }>('SELECT body, body_encrypted FROM email_outbox WHERE id = $1', [message!.id]);
    expect(stored[0]!.body_encrypted).toBe(true);
    expect(stored[0]!.body).not.toContain(link.split('#token=')[1]);

    const token = new URLSearchParams(new URL(link).hash.slice(1)).get('token')!;
    const verified = await h.request({ method: 'POST', url: '/auth/verify-email', payload: { token } });
    expect(verified.statusCode, verified.body).toBe(200);
    const me = await h.request({ method: 'GET', url: '/auth/me', headers: bearer(user.accessToken) });
    expect(json<{ data: { email_verified: boolean } }>(me).data.email_verified).toBe(true);
  });

  it('shows an invitation with its accept link, the one the invitation answer gave', async () => {
    const owner = await signUpWithOrganization(h, 'mailbox-invite');
    const invitee = addressOf('invitee');
    const res = await h.request({
      method: 'POST',
      url: `/organizations/${owner.organizationId}/users`,
      headers: bearer(owner.accessToken),
      payload: { email: invitee, role: 'member' },
    });
    expect(res.statusCode, res.body).toBe(201);
    const acceptUrl = json<{ data: { accept_url: string } }>(res).data.accept_url;
    const [message] = (await messagesTo(invitee)).messages;
    expect(message).toMatchObject({ to: invitee, template: 'invitation', status: 'unsent', links: [acceptUrl] });
  });

  it('pages newest first by (created_at, id) with next_cursor, ties included, each message once', async () => {
    const to = addressOf('paged');
    const sent: string[] = [];
    for (let i = 0; i < 5; i++) {
      // Two pairs share a timestamp: the id breaks the tie.
      if (i % 2 === 0) h.clock.advance(1000);
      const { id } = await sendMail(h.deps, { to, template: 'test', subject: `Message ${i}`, text: `Number ${i}: see http://creditgate.test/page-${i}.` });
      sent.push(id);
    }
    const seen: MailboxMessage[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const page: MailboxReply = await messagesTo(to, `&limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
      expect(page.messages.length).toBeLessThanOrEqual(2);
      seen.push(...page.messages);
      cursor = page.next_cursor;
      pages++;
    } while (cursor && pages < 10);
    expect(pages).toBe(3);
    expect(seen.map((m) => m.id).sort()).toEqual([...sent].sort());
    const times = seen.map((m) => m.created_at);
    expect([...times].sort().reverse()).toEqual(times);
    // A sentence's full stop is not part of the link.
    expect(seen.find((m) => m.subject === 'Message 3')!.links).toEqual(['http://creditgate.test/page-3']);
  });

  it('answers 400 naming the field for a bad limit, a cursor it did not give out, a long address and an unknown parameter', async () => {
    const invalid = async (query: string, field: string) => {
      const res = await mailbox(query);
      expect(res.statusCode, `${query}: ${res.body}`).toBe(400);
      const body = json<{ code: string; fields?: Array<{ field: string }> }>(res);
      expect(body.code).toBe('INVALID_REQUEST');
      expect((body.fields ?? []).map((f) => f.field).join(' ')).toContain(field);
    };
    await invalid('?limit=0', 'limit');
    await invalid('?limit=101', 'limit');
    await invalid('?cursor=garbage', 'cursor');
    await invalid(`?to=${'a'.repeat(321)}`, 'to');
    await invalid('?organization_id=x', 'organization_id');
  });

  it('lists a message it cannot decrypt (queued under another ENCRYPTION_KEY) without its text or links', async () => {
    const to = addressOf('undecryptable');
    await h.deps.db.query(
      `INSERT INTO email_outbox ("to", subject, body, body_encrypted, template, created_at) VALUES ($1, 'Old key', 'not-a-sealed-box', true, 'verify_email', $2)`,
      [to, h.clock.now()],
    );
    const [message] = (await messagesTo(to)).messages;
    expect(message).toMatchObject({ to, subject: 'Old key', text: null, links: [] });
  });
});
