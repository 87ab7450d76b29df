import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createHarness, type Harness, json, signUpWithOrganization } from '../../../test/harness.js';
import { type Receiver, startReceiver } from '../../../test/receiver.js';
import { SENDS_ON_REQUEST_LIMIT } from './organization.js';

/**
 * Sends on request (docs/webhooks.md, Organization webhooks): test sends and manual retries cost no
 * credit but are outbound POSTs whose answer the organization reads, so they are limited per
 * organization per minute; past it 429 RATE_LIMITED with Retry-After and nothing is sent or recorded.
 */
let h: Harness;
let rx: Receiver;

beforeAll(async () => {
  h = await createHarness({ webhookAllowPrivateNetworks: true, webhookAttemptTimeoutMs: 1000 });
  rx = await startReceiver();
});
afterAll(async () => {
  await rx.close();
  await h.close();
});

type Owner = Awaited<ReturnType<typeof signUpWithOrganization>>;
const hooksUrl = (orgId: string) => `/organizations/${orgId}/webhooks`;

async function createHook(o: Owner): Promise<string> {
  const res = await h.request({ method: 'POST', url: hooksUrl(o.organizationId), headers: bearer(o.accessToken), payload: { url: `${rx.url}/limited`, events: ['api_key.created'] } });
  expect(res.statusCode, res.body).toBe(201);
  return json<{ data: { id: string } }>(res).data.id;
}
const testSend = (o: Owner, hookId: string) => h.request({ method: 'POST', url: `${hooksUrl(o.organizationId)}/${hookId}/test`, headers: bearer(o.accessToken) });
const retry = (o: Owner, hookId: string, deliveryId: string) =>
  h.request({ method: 'POST', url: `${hooksUrl(o.organizationId)}/${hookId}/deliveries/${deliveryId}/retry`, headers: bearer(o.accessToken) });
const rowCount = async (hookId: string) =>
  Number((await h.deps.db.query<{ n: string }>('SELECT count(*) AS n FROM webhook_deliveries WHERE webhook_id = $1', [hookId]))[0]!.n);

describe('test sends and manual retries per organization', () => {
  it(`${SENDS_ON_REQUEST_LIMIT} a minute, test sends and retries together; then 429 RATE_LIMITED with Retry-After, nothing sent; free again a minute later`, async () => {
    const o = await signUpWithOrganization(h);
    const hook = await createHook(o);
    rx.script({ status: 500, body: 'down' });
    const first = await testSend(o, hook);
    expect(first.statusCode, first.body).toBe(200);
    const failed = json<{ data: { id: string } }>(first).data.id;
    for (let i = 1; i < SENDS_ON_REQUEST_LIMIT - 1; i++) expect((await testSend(o, hook)).statusCode).toBe(200);
    expect((await retry(o, hook, failed)).statusCode).toBe(200); // the allowance's last
    const sent = rx.received.length;
    const rows = await rowCount(hook);

    for (const refused of [await testSend(o, hook), await retry(o, hook, failed)]) {
      expect(refused.statusCode, refused.body).toBe(429);
      expect(json(refused)).toMatchObject({ success: false, error: { code: 'RATE_LIMITED' } });
      expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
    }
    expect(rx.received).toHaveLength(sent);
    expect(await rowCount(hook)).toBe(rows);

    // Another organization has an allowance of its own.
    const other = await signUpWithOrganization(h);
    expect((await testSend(other, await createHook(other))).statusCode).toBe(200);

    h.clock.advance(60_000);
    expect((await testSend(o, hook)).statusCode).toBe(200);
  });
});
