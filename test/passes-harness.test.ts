import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deliverDue } from '../src/modules/webhooks/organization.js';
import { bearer, createHarness, createPassesHarness, dbKind, type Harness, json, signUpWithOrganization } from './harness.js';
import { type Receiver, startReceiver } from './receiver.js';

/**
 * Why a test file that runs a worker pass at a moved clock gets a database of its own on PostgreSQL
 * (createPassesHarness): the run's other files share one database, and a pass hours ahead of their
 * clocks finds the leases of their rows in flight run out. Replayed: a test send in flight on the shared
 * database while such a pass runs. On the file's own database the pass never sees it, and the receiver
 * gets the test once. PGlite is one database per vitest worker, whose files run one after another.
 */
describe.runIf(dbKind === 'postgres')('a harness for worker passes (PostgreSQL)', () => {
  let shared: Harness;
  let passes: Harness;
  let rx: Receiver;

  beforeAll(async () => {
    const now = new Date().toISOString();
    shared = await createHarness({ webhookAllowPrivateNetworks: true, webhookAttemptTimeoutMs: 5000 }, now);
    passes = await createPassesHarness({ webhookAllowPrivateNetworks: true, webhookAttemptTimeoutMs: 5000 }, now);
    rx = await startReceiver();
  });
  afterAll(async () => {
    await rx?.close();
    await passes?.close();
    await shared?.close();
  });

  it('a pass two hours ahead does not send the test another file has in flight', async () => {
    const o = await signUpWithOrganization(shared, 'passes');
    const created = await shared.request({
      method: 'POST',
      url: `/organizations/${o.organizationId}/webhooks`,
      headers: bearer(o.accessToken),
      payload: { url: `${rx.url}/hooks`, events: ['api_key.created'] },
    });
    expect(created.statusCode, created.body).toBe(201);
    const hook = json<{ data: { id: string } }>(created).data.id;
    // The receiver holds the test send's request while the pass runs.
    rx.script({ status: 200, body: 'ok', delayMs: 1000 });
    const sending = shared.request({ method: 'POST', url: `/organizations/${o.organizationId}/webhooks/${hook}/test`, headers: bearer(o.accessToken) });
    const deadline = Date.now() + 10_000;
    while (rx.received.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    expect(rx.received).toHaveLength(1);

    passes.clock.advance(2 * 3_600_000);
    for (let pass = 0; pass < 10 && (await deliverDue(passes.deps, 100)) > 0; pass++);

    const res = await sending;
    expect(res.statusCode, res.body).toBe(200);
    expect(json<{ data: { status: string } }>(res).data.status).toBe('delivered');
    expect(rx.received).toHaveLength(1);
  });
});
