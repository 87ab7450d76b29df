import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createHarness, type Harness, json, signUpWithOrganization } from '../../test/harness.js';
import { type SmtpStandIn, startSmtpStandIn } from '../../test/smtp-stand-in.js';
import { DELIVERED_SECRET_BODY, MAIL_MAX_ATTEMPTS, readOutboxBody, retryOutbox } from './mailer.js';

/** Mail that SMTP refused is not lost: the `mail-retry` worker sends it later, with backoff, once. */
let smtp: SmtpStandIn;
const behaviour = { rejectData: true };
let h: Harness;
beforeAll(async () => {
  smtp = await startSmtpStandIn(behaviour);
  h = await createHarness({ smtpUrl: smtp.url });
});
afterAll(async () => {
  await h.close();
  await smtp.close();
});

interface OutboxRow {
  attempts: number;
  sent_at: Date | null;
  next_attempt_at: Date | null;
  last_error: string | null;
  body: string;
  body_encrypted: boolean;
}

describe('mail-retry worker', () => {
  it('retries a refused invitation mail after its backoff, delivers it once, and scrubs the link afterwards', async () => {
    behaviour.rejectData = true;
    const owner = await signUpWithOrganization(h);
    const email = `retry-${Date.now()}@example.com`;
    const invite = await h.request({ method: 'POST', url: `/organizations/${owner.organizationId}/users`, headers: bearer(owner.accessToken), payload: { email } });
    expect(invite.statusCode).toBe(201);
    const token = json<{ data: { token: string } }>(invite).data.token;
    const row = async () =>
      (await h.deps.db.query<OutboxRow>('SELECT attempts, sent_at, next_attempt_at, last_error, body, body_encrypted FROM email_outbox WHERE "to" = $1', [email]))[0]!;
    const first = await row();
    expect(first).toMatchObject({ attempts: 1, sent_at: null });
    expect(first.last_error).toContain('response_code');
    // Unsent, the link is at rest encrypted; the worker decrypts it right before the send.
    expect(first.body).not.toContain(token);
    expect(readOutboxBody(h.config, first)).toContain(token);
    expect(first.next_attempt_at!.getTime()).toBe(h.clock.now().getTime() + 60_000);

    behaviour.rejectData = false;
    const before = smtp.messages.length;
    await retryOutbox(h.deps, 20, owner.organizationId);
    expect((await row()).sent_at).toBeNull(); // not due yet
    h.clock.advance(60_000);
    await retryOutbox(h.deps, 20, owner.organizationId);
    const messages = await smtp.waitFor(before + 1);
    expect(messages.filter((m) => m.to.includes(email))).toHaveLength(1);
    const sent = await row();
    expect(sent.sent_at).not.toBeNull();
    expect(sent.attempts).toBe(2);
    expect(sent).toMatchObject({ body: DELIVERED_SECRET_BODY, body_encrypted: false });
    expect(messages.find((m) => m.to.includes(email))?.data).toContain(token);
    h.clock.advance(3_600_000);
    await retryOutbox(h.deps, 20, owner.organizationId);
    expect(smtp.messages.filter((m) => m.to.includes(email))).toHaveLength(1);
  });

  it('a body that cannot be decrypted (another ENCRYPTION_KEY) is not sent and is left for an operator', async () => {
    behaviour.rejectData = true;
    const owner = await signUpWithOrganization(h);
    const email = `rekeyed-${Date.now()}@example.com`;
    await h.request({ method: 'POST', url: `/organizations/${owner.organizationId}/users`, headers: bearer(owner.accessToken), payload: { email } });
    behaviour.rejectData = false;
    const before = smtp.messages.length;
    h.clock.advance(60_000);
    await retryOutbox({ ...h.deps, config: { ...h.config, encryptionKey: 'another-encryption-key-0123456789-abcdef' } }, 20, owner.organizationId);
    const rows = await h.deps.db.query<OutboxRow>('SELECT attempts, sent_at, last_error FROM email_outbox WHERE "to" = $1', [email]);
    expect(rows[0]).toMatchObject({ attempts: MAIL_MAX_ATTEMPTS, sent_at: null, last_error: JSON.stringify({ code: 'EDECRYPT' }) });
    expect(smtp.messages.length).toBe(before);
  });

  it(`gives up after ${MAIL_MAX_ATTEMPTS} tries and keeps the row for an operator`, async () => {
    behaviour.rejectData = true;
    const owner = await signUpWithOrganization(h);
    const email = `giveup-${Date.now()}@example.com`;
    await h.request({ method: 'POST', url: `/organizations/${owner.organizationId}/users`, headers: bearer(owner.accessToken), payload: { email } });
    for (let i = 0; i < 10; i++) {
      h.clock.advance(3 * 3_600_000);
      await retryOutbox(h.deps, 20, owner.organizationId);
    }
    const rows = await h.deps.db.query<OutboxRow>('SELECT attempts, sent_at, last_error FROM email_outbox WHERE "to" = $1', [email]);
    expect(rows[0]).toMatchObject({ attempts: MAIL_MAX_ATTEMPTS, sent_at: null });
    behaviour.rejectData = false;
  });
});
