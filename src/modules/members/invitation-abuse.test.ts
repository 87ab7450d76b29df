import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DAY, HOUR } from '../../clock.js';
import { readOutboxBody } from '../../lib/mailer.js';
import { bearer, createHarness, type Harness, json, signUp, signUpWithOrganization, unique } from '../../../test/harness.js';
import { createApiKey } from '../api-keys/service.js';
import { INVITATIONS_PER_ADDRESS_PER_DAY, INVITATIONS_PER_ORGANIZATION_PER_DAY } from './invitation-caps.js';

/**
 * SPEC §8 account safety, written as the attacks a security review ran: an invitation flood (300 in
 * 3 s, 25 to one address) and an organization name that forges mail lines.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

/** An organization and an admin API key of it (a key does not expire while the clock moves a day). */
type Inviter = { organizationId: string; headers: Record<string, string> };

async function newInviter(): Promise<Inviter> {
  const { organizationId } = await signUpWithOrganization(h);
  const { key } = await createApiKey(h.ctx, { organizationId, name: 'inviter', scopes: ['read', 'write', 'admin'] });
  return { organizationId, headers: { 'x-api-key': key } };
}

/** Both invite paths, so both are shown to go through the same capped verb. */
const invite = (inviter: Inviter, email: string, path: 'organizations' | 'api' = 'organizations') =>
  h.request({
    method: 'POST',
    url: path === 'api' ? `/api/organizations/${inviter.organizationId}/invitations` : `/organizations/${inviter.organizationId}/users`,
    headers: inviter.headers,
    payload: { email },
  });

function expectCapped(res: LightMyRequestResponse, retryAfterSeconds: number, message: RegExp): void {
  expect(res.statusCode).toBe(429);
  expect(json<{ error: { code: string; message: string } }>(res).error).toMatchObject({ code: 'RATE_LIMITED', message: expect.stringMatching(message) });
  expect(res.headers['retry-after']).toBe(String(retryAfterSeconds));
}

const countFor = async (where: string, value: string) =>
  (await h.deps.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM invitations WHERE ${where}`, [value]))[0]!.n;

describe('invitation cap per organization', () => {
  const flood = INVITATIONS_PER_ORGANIZATION_PER_DAY + 10;
  it(`${flood} invites at once create exactly ${INVITATIONS_PER_ORGANIZATION_PER_DAY}; the rest get 429 until the window passes, to the ms`, async () => {
    const owner = await newInviter();
    const results = await Promise.all(
      Array.from({ length: flood }, (_, i) =>
        invite(owner, `${owner.organizationId}-${i}@example.com`, i % 2 === 0 ? 'organizations' : 'api'),
      ),
    );
    expect(results.filter((r) => r.statusCode === 201)).toHaveLength(INVITATIONS_PER_ORGANIZATION_PER_DAY);
    const refused = results.filter((r) => r.statusCode !== 201);
    expect(refused).toHaveLength(10);
    for (const res of refused) expectCapped(res, DAY / 1000, /organization sent 50 invitations in the last 24 hours/);
    expect(await countFor('organization_id = $1', owner.organizationId)).toBe(INVITATIONS_PER_ORGANIZATION_PER_DAY);
    const mails = await h.deps.db.query('SELECT 1 FROM email_outbox WHERE organization_id = $1', [owner.organizationId]);
    expect(mails).toHaveLength(INVITATIONS_PER_ORGANIZATION_PER_DAY);

    // All 50 were made at the same instant: they leave the rolling window together, exactly 24 h later.
    h.clock.advance(DAY - 1);
    expectCapped(await invite(owner, `${owner.organizationId}-late@example.com`, 'api'), 1, /organization/);
    h.clock.advance(1);
    expect((await invite(owner, `${owner.organizationId}-late@example.com`, 'api')).statusCode).toBe(201);
  });

  it('another organization is not affected by a capped one', async () => {
    const capped = await newInviter();
    // The day's invitations, written directly: this test is about who else the cap touches, not about reaching it.
    await h.deps.db.query(
      `INSERT INTO invitations (organization_id, email, role, token_hash, expires_at, created_at)
       SELECT $1::uuid, $1::text || '-' || g || '@example.com', 'member', md5($1::text || g), $2::timestamptz + interval '7 days', $2::timestamptz
       FROM generate_series(1, $3::int) g`,
      [capped.organizationId, h.clock.now(), INVITATIONS_PER_ORGANIZATION_PER_DAY],
    );
    expect((await invite(capped, `${unique('c')}@example.com`)).statusCode).toBe(429);
    const other = await newInviter();
    expect((await invite(other, `${unique('c')}@example.com`)).statusCode).toBe(201);
  });
});

describe('invitation cap per address (across organizations)', () => {
  it(`${INVITATIONS_PER_ADDRESS_PER_DAY * 2} organizations inviting one address at once: exactly ${INVITATIONS_PER_ADDRESS_PER_DAY} invitations, in any letter case`, async () => {
    const owners: Inviter[] = [];
    for (let i = 0; i < INVITATIONS_PER_ADDRESS_PER_DAY * 2; i++) owners.push(await newInviter());
    const email = `${unique('target')}@example.com`;
    const results = await Promise.all(owners.map((o, i) => invite(o, i % 2 === 0 ? email : email.toUpperCase(), i % 3 === 0 ? 'api' : 'organizations')));
    expect(results.filter((r) => r.statusCode === 201)).toHaveLength(INVITATIONS_PER_ADDRESS_PER_DAY);
    for (const res of results.filter((r) => r.statusCode !== 201)) expectCapped(res, DAY / 1000, /address was invited 3 times in the last 24 hours/);
    expect(await countFor('lower(email) = lower($1)', email)).toBe(INVITATIONS_PER_ADDRESS_PER_DAY);
  });

  it('re-invites count too; Retry-After is when the oldest counted invitation leaves the rolling window', async () => {
    const owner = await newInviter();
    const email = `${unique('again')}@example.com`;
    // 25 invitations to one address got through before: now the fourth within 24 h is refused.
    for (let i = 0; i < INVITATIONS_PER_ADDRESS_PER_DAY; i++) {
      expect((await invite(owner, email)).statusCode).toBe(201);
      h.clock.advance(HOUR);
    }
    expectCapped(await invite(owner, email), 21 * 3600, /address/);
    h.clock.advance(21 * HOUR - 1);
    expectCapped(await invite(owner, email, 'api'), 1, /address/);
    h.clock.advance(1);
    expect((await invite(owner, email, 'api')).statusCode).toBe(201);
    // The second one (made an hour after the first) is now the oldest counted.
    expectCapped(await invite(owner, email), 3600, /address/);
  });
});

describe('names that go into mail', () => {
  it('an organization name with CR/LF cannot add a header or a line to the invitation mail', async () => {
    const owner = await signUp(h);
    const name = 'Acme\r\nBcc: victim@evil.example\r\n\r\nClick https://evil.example\u2028now';
    const created = await h.request({ method: 'POST', url: '/organizations', headers: bearer(owner.accessToken), payload: { name, slug: unique('evil').toLowerCase() } });
    expect(created.statusCode).toBe(201);
    const organizationId = json<{ data: { id: string } }>(created).data.id;
    expect((await invite({ organizationId, headers: bearer(owner.accessToken) }, `${organizationId}-guest@example.com`)).statusCode).toBe(201);
    const [row] = await h.deps.db.query<{ subject: string; body: string; body_encrypted: boolean }>(
      'SELECT subject, body, body_encrypted FROM email_outbox WHERE organization_id = $1',
      [organizationId],
    );
    expect(row!.subject).toBe('You are invited to join Acme  Bcc: victim@evil.example    Click https://evil.example now on creditgate');
    const lines = readOutboxBody(h.config, row!).split('\n');
    expect(lines[0]).toBe('Test User invited you to join Acme  Bcc: victim@evil.example    Click https://evil.example now on creditgate as member.');
    expect(lines.filter((l) => l.startsWith('Bcc:') || l.startsWith('Click'))).toEqual([]);
  });
});
