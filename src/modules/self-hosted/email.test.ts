import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createHarness, createTenant, type Harness, json, signUp, unique } from '../../../test/harness.js';
import { type SmtpStandIn, startSmtpStandIn } from '../../../test/smtp-stand-in.js';
import { EMAIL_TEST_LIMIT } from './email.js';

let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type Err = { error: { code: string }; details: { fields?: Array<{ field: string }> } };
const send = (harness: Harness, headers: Record<string, string>, payload: Record<string, unknown>) =>
  harness.request({ method: 'POST', url: '/api/email/test', headers, payload });

describe('POST /api/email/test', () => {
  it('without SMTP_URL the message goes to the outbox; the answer says so; an audit row is written', async () => {
    const user = await signUp(h);
    const to = `${unique('ops')}@example.com`;
    const res = await send(h, bearer(user.accessToken), { to, template: 'welcome' });
    expect(res.statusCode).toBe(200);
    expect(json(res)).toMatchObject({ success: true, data: { to, template: 'welcome', delivered: 'outbox' } });
    const rows = await h.deps.db.query<{ id: string; template: string; sent_at: Date | null }>('SELECT * FROM email_outbox WHERE "to" = $1', [to]);
    expect(rows).toEqual([expect.objectContaining({ template: 'welcome', sent_at: null })]);
    const audit = await h.deps.db.query("SELECT * FROM audit_logs WHERE action = 'send' AND resource_id = $1 AND user_id = $2", [rows[0]!.id, user.userId]);
    expect(audit).toHaveLength(1);
  });

  it('an API key (any scope, X-API-Key or Bearer) may send; no credentials is 401', async () => {
    const t = await createTenant(h, { scopes: ['read'] });
    expect((await send(h, { 'x-api-key': t.apiKey }, { to: `${unique('k')}@example.com`, template: 'test' })).statusCode).toBe(200);
    expect((await send(h, bearer(t.apiKey), { to: `${unique('k')}@example.com`, template: 'invitation' })).statusCode).toBe(200);
    expect((await send(h, {}, { to: 'a@example.com', template: 'test' })).statusCode).toBe(401);
  });

  it('refuses an unknown template, a malformed or over-long address and unknown fields (400 naming the field)', async () => {
    const user = await signUp(h);
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ to: 'a@example.com', template: 'newsletter' }, 'template'],
      [{ to: 'not an email', template: 'test' }, 'to'],
      [{ to: `${'a'.repeat(315)}@example.com`, template: 'test' }, 'to'],
      [{ to: 'a@example.com', template: 'test', cc: 'b@example.com' }, 'cc'],
      [{ template: 'test' }, 'to'],
    ];
    for (const [payload, field] of cases) {
      const res = await send(h, bearer(user.accessToken), payload);
      expect(res.statusCode, JSON.stringify(payload).slice(0, 60)).toBe(400);
      expect(json<Err>(res).error.code).toBe('VALIDATION_ERROR');
      expect(json<Err>(res).details.fields?.map((f) => f.field)).toContain(field);
    }
  });

  it(`allows ${EMAIL_TEST_LIMIT} sends per caller per hour, then 429 with Retry-After`, async () => {
    const user = await signUp(h);
    for (let i = 0; i < EMAIL_TEST_LIMIT; i++) {
      expect((await send(h, bearer(user.accessToken), { to: `${unique('r')}@example.com`, template: 'test' })).statusCode).toBe(200);
    }
    const limited = await send(h, bearer(user.accessToken), { to: `${unique('r')}@example.com`, template: 'test' });
    expect(limited.statusCode).toBe(429);
    expect(json<Err>(limited).error.code).toBe('RATE_LIMITED');
    expect(Number(limited.headers['retry-after'])).toBeGreaterThanOrEqual(1);
  });

  describe('with SMTP_URL', () => {
    let smtp: SmtpStandIn;
    let hs: Harness;
    beforeAll(async () => {
      smtp = await startSmtpStandIn();
      hs = await createHarness({ smtpUrl: smtp.url });
    });
    afterAll(async () => {
      await hs.close();
      await smtp.close();
    });

    it('delivers through the SMTP server and answers delivered: smtp', async () => {
      const user = await signUp(hs);
      const to = `${unique('smtp')}@example.com`;
      const res = await send(hs, bearer(user.accessToken), { to, template: 'test' });
      expect(json(res)).toMatchObject({ data: { to, template: 'test', delivered: 'smtp' } });
      const got = (await smtp.waitFor(1)).find((m) => m.to.includes(to));
      expect(got?.data).toContain('Subject: creditgate test message');
      const rows = await hs.deps.db.query<{ sent_at: Date | null }>('SELECT sent_at FROM email_outbox WHERE "to" = $1', [to]);
      expect(rows[0]!.sent_at).toBeInstanceOf(Date);
    });
  });
});
