import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DAY, SECOND } from '../../clock.js';
import { readOutboxBody } from '../../lib/mailer.js';
import { bearer, createHarness, type Harness, json, signUp, signUpWithOrganization, unique } from '../../../test/harness.js';
import { createApiKey } from '../api-keys/service.js';
import { INVITATIONS_PER_ADDRESS_PER_DAY, INVITATIONS_PER_ORGANIZATION_PER_DAY } from './invitation-caps.js';

/**
 * docs/accounts.md "Account safety", written as the attacks a security review ran: an invitation flood
 * (300 in 3 s, 25 to one address, then one mailbox under many `+tags`) and an organization name that
 * forges mail lines.
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
  const { organizationId, userId } = await signUpWithOrganization(h);
  // Made by the owner: an invitation acts for a member, and a key without a maker cannot invite.
  const { key } = await createApiKey(h.ctx, { organizationId, name: 'inviter', scopes: ['read', 'write', 'admin'], createdBy: userId });
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

/** Seconds from the harness clock to the next UTC midnight: when both caps lift. */
const untilMidnight = () => (DAY - (h.clock.now().getTime() % DAY)) / 1000;

describe('invitation cap per organization', () => {
  const flood = INVITATIONS_PER_ORGANIZATION_PER_DAY + 10;
  it(`${flood} invites at once create exactly ${INVITATIONS_PER_ORGANIZATION_PER_DAY}; the rest get 429 until the UTC day ends, to the ms`, async () => {
    const owner = await newInviter();
    const results = await Promise.all(
      Array.from({ length: flood }, (_, i) =>
        invite(owner, `${owner.organizationId}-${i}@example.com`, i % 2 === 0 ? 'organizations' : 'api'),
      ),
    );
    expect(results.filter((r) => r.statusCode === 201)).toHaveLength(INVITATIONS_PER_ORGANIZATION_PER_DAY);
    const refused = results.filter((r) => r.statusCode !== 201);
    expect(refused).toHaveLength(10);
    for (const res of refused) expectCapped(res, untilMidnight(), /organization sent 100 invitations today \(UTC\)/);
    expect(await countFor('organization_id = $1', owner.organizationId)).toBe(INVITATIONS_PER_ORGANIZATION_PER_DAY);
    const mails = await h.deps.db.query('SELECT 1 FROM email_outbox WHERE organization_id = $1', [owner.organizationId]);
    expect(mails).toHaveLength(INVITATIONS_PER_ORGANIZATION_PER_DAY);

    // The count is per UTC day: one millisecond before midnight still refused, at midnight a new day.
    h.clock.advance(untilMidnight() * 1000 - 1);
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

describe('invitation cap per normalised address (per organization)', () => {
  it('+tags and letter case do not make a new address: the 4th invitation to a+1@x, a+2@x, … is 429 with Retry-After', async () => {
    const owner = await newInviter();
    const local = unique('tagged').toLowerCase();
    const tagged = (tag: number) => `${local}+${tag}@Example.com`;
    for (let i = 1; i <= INVITATIONS_PER_ADDRESS_PER_DAY; i++) {
      expect((await invite(owner, i === 2 ? tagged(i).toUpperCase() : tagged(i), i % 2 === 0 ? 'api' : 'organizations')).statusCode).toBe(201);
    }
    expectCapped(await invite(owner, tagged(4)), untilMidnight(), /address \(with any \+tag\) was invited 3 times by this organization/);
    expectCapped(await invite(owner, `${local}@example.com`, 'api'), untilMidnight(), /address/);
    expect(await countFor(`organization_id = '${owner.organizationId}' AND lower(email) LIKE $1`, `${local}%`)).toBe(INVITATIONS_PER_ADDRESS_PER_DAY);
    // The tag still matters everywhere else: each invitation is to the address as given (three open ones).
    // Sorted by address: on the fake clock the three share one created_at, so that order is arbitrary.
    const open = await h.deps.db.query<{ email: string }>(
      'SELECT email FROM invitations WHERE organization_id = $1 AND revoked_at IS NULL ORDER BY lower(email)',
      [owner.organizationId],
    );
    expect(open.map((r) => r.email.toLowerCase())).toEqual([1, 2, 3].map((i) => tagged(i).toLowerCase()));
    // Another organization may still invite that mailbox; the next UTC day this one may too.
    expect((await invite(await newInviter(), tagged(5))).statusCode).toBe(201);
    h.clock.advance(untilMidnight() * 1000);
    expect((await invite(owner, tagged(6))).statusCode).toBe(201);
  });

  it('concurrent invites to one mailbox under different tags: exactly 3 get through', async () => {
    const owner = await newInviter();
    const local = unique('race').toLowerCase();
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) => invite(owner, `${local}+${i}@example.com`, i % 2 === 0 ? 'api' : 'organizations')),
    );
    expect(results.filter((r) => r.statusCode === 201)).toHaveLength(INVITATIONS_PER_ADDRESS_PER_DAY);
    for (const res of results.filter((r) => r.statusCode !== 201)) expectCapped(res, untilMidnight(), /address/);
  });

  it('re-invites of one address count too', async () => {
    const owner = await newInviter();
    const email = `${unique('again')}@example.com`;
    for (let i = 0; i < INVITATIONS_PER_ADDRESS_PER_DAY; i++) {
      expect((await invite(owner, email)).statusCode).toBe(201);
      h.clock.advance(SECOND);
    }
    expectCapped(await invite(owner, email), untilMidnight(), /address/);
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
