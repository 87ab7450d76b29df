import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { bearer, type Harness, signUpAsMember } from '../../../test/harness.js';
import { eventually, hooksUrl, startWebhookHarness, webhookFixtures } from '../../../test/organization-webhook-fixtures.js';
import { type Receiver, startReceiver } from '../../../test/receiver.js';
import { buildApp } from '../../app.js';
import { CLAIM_DUE_SQL, DELIVERY_POLICY, deliverDue, LEASE_MS } from './organization.js';
import { appendEvent } from '../events/outbox.js';

/**
 * The delivery worker's fairness (docs/webhooks.md, Delivery worker): a receiver gets one delivery at a
 * time whichever instance sends it, a slow or failing receiver holds up no other webhook, every
 * organization's oldest due delivery is claimed before anyone's second, and an attempt whose lease ran
 * out does not write over the outcome of the claim that took the row after it.
 */
let h: Harness;
let rx: Receiver;
const fx = webhookFixtures(() => h, () => rx);
const { owner, createHook, emit, deliveriesOf, delivery, byDelivery, drain } = fx;

/** A receiver on loopback that counts the requests it holds at once and can hold the next ones until released. */
interface Gate {
  url: string;
  seen: string[];
  maxInFlight: number;
  /** The next request is held until `release(status)`. */
  holdNext(): void;
  release(status: number): void;
  held(): number;
  close(): Promise<void>;
}

async function startGate(answerAfterMs = 0): Promise<Gate> {
  let inFlight = 0;
  let hold = false;
  const waiting: ServerResponse[] = [];
  const gate = { seen: [] as string[], maxInFlight: 0 };
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      gate.seen.push(String(req.headers['x-service-delivery']));
      inFlight += 1;
      gate.maxInFlight = Math.max(gate.maxInFlight, inFlight);
      const answer = (status: number) => {
        inFlight -= 1;
        if (!res.destroyed) res.writeHead(status).end('ok');
      };
      res.on('close', () => {
        if (!res.writableEnded) inFlight -= 1;
      });
      if (hold) {
        hold = false;
        waiting.push(res);
        (res as ServerResponse & { answer?: (s: number) => void }).answer = answer;
      } else setTimeout(() => answer(200), answerAfterMs);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return Object.assign(gate, {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`,
    holdNext: () => {
      hold = true;
    },
    release: (status: number) => {
      for (const res of waiting.splice(0)) (res as ServerResponse & { answer: (s: number) => void }).answer(status);
    },
    held: () => waiting.length,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  });
}

const gates: Gate[] = [];
async function gate(answerAfterMs = 0): Promise<Gate> {
  const g = await startGate(answerAfterMs);
  gates.push(g);
  return g;
}

beforeAll(async () => {
  h = await startWebhookHarness();
  rx = await startReceiver();
});
afterAll(async () => {
  await rx.close();
  await h.close();
});
beforeEach(() => fx.resetEach());
afterEach(async () => {
  for (const g of gates.splice(0)) {
    g.release(200);
    await g.close();
  }
  await fx.cleanUpEach();
});

describe('one receiver cannot hold up the others', () => {
  it('a receiver that does not answer gets one attempt a pass; another organization is delivered in that same pass', async () => {
    const slow = await owner();
    const slowHook = await createHook(slow);
    // Every answer of the shared receiver comes after the attempt's timeout (1 s here): the slow
    // organization's receiver hangs. Its 25 events are due before the other organization's one.
    rx.script({ status: 200, delayMs: 5_000 });
    for (let i = 0; i < 25; i++) await emit(slow.organizationId, { i });
    const fast = await owner();
    const g = await gate();
    const fastHook = await createHook(fast, { url: g.url });
    await emit(fast.organizationId, { n: 1 });

    await deliverDue(h.deps, DELIVERY_POLICY.batchSize, [slow.organizationId, fast.organizationId]);

    const [fastRow] = await deliveriesOf(fastHook.id);
    expect(fastRow).toMatchObject({ status: 'delivered', attempt_count: 1 });
    expect(g.seen).toEqual([fastRow!.id]);
    // The hanging receiver got one request: its failure ends its lane for the pass; the other 24 wait.
    expect(rx.received).toHaveLength(1);
    const slowRows = await deliveriesOf(slowHook.id);
    expect(slowRows.filter((r) => r.attempt_count > 0)).toHaveLength(1);
    expect(slowRows.filter((r) => r.status === 'pending')).toHaveLength(25);
  });

  it('every organization’s oldest due delivery is claimed before anyone’s second', async () => {
    const big = await owner();
    const hooks = [await createHook(big), await createHook(big), await createHook(big)];
    for (let i = 0; i < 3; i++) await emit(big.organizationId, { i });
    h.clock.advance(1_000);
    const small = await owner();
    const smallHook = await createHook(small);
    await emit(small.organizationId, { n: 1 });
    h.clock.advance(1_000);

    const now = h.clock.now();
    const claimed = await h.deps.db.query<{ id: string; webhook_id: string }>(CLAIM_DUE_SQL, [
      now,
      2,
      new Date(now.getTime() + LEASE_MS),
      null,
      [big.organizationId, small.organizationId],
    ]);
    const bigRows = (await Promise.all(hooks.map((w) => deliveriesOf(w.id)))).flat();
    expect(bigRows).toHaveLength(9);
    // The big organization's nine deliveries are all older; a claim of two still takes the small one's.
    expect(claimed.map((r) => r.webhook_id)).toContain(smallHook.id);
    expect(claimed.filter((r) => hooks.some((w) => w.id === r.webhook_id))).toHaveLength(1);
  });

  it('a succeeding receiver is drained in one pass: its lane goes on with the webhook’s next delivery', async () => {
    const o = await owner();
    const hook = await createHook(o);
    for (let i = 0; i < 30; i++) await emit(o.organizationId, { i });
    expect(await deliverDue(h.deps, DELIVERY_POLICY.batchSize, [o.organizationId])).toBe(30);
    expect(rx.received).toHaveLength(30);
    expect((await deliveriesOf(hook.id)).every((r) => r.status === 'delivered')).toBe(true);
  });
});

describe('one delivery in flight per webhook', () => {
  let b: FastifyInstance;
  beforeAll(async () => {
    // A second instance on the same database and clock, whose attempts wait 30 s for an answer.
    b = await buildApp({ config: { ...h.config, webhookAttemptTimeoutMs: 30_000 }, db: h.deps.db, clock: h.clock });
    await b.ready();
  });
  afterAll(async () => {
    await b.close();
  });

  it('passes of two instances at once send a webhook its deliveries one at a time, each once', async () => {
    const o = await owner();
    const g = await gate(15);
    const hook = await createHook(o, { url: g.url });
    for (let i = 0; i < 12; i++) await emit(o.organizationId, { i });
    for (let round = 0; ; round++) {
      expect(round).toBeLessThan(30);
      const mine = [o.organizationId];
      const handled = await Promise.all([deliverDue(h.deps, 3, mine), deliverDue(b.deps, 3, mine), deliverDue(h.deps, 3, mine), deliverDue(b.deps, 3, mine)]);
      if (handled.every((n) => n === 0)) break;
    }
    const rows = await deliveriesOf(hook.id);
    expect(rows.map((r) => r.status)).toEqual(Array(12).fill('delivered'));
    expect([...g.seen].sort()).toEqual(rows.map((r) => r.id).sort());
    expect(g.maxInFlight).toBe(1);
  });

  it('an attempt whose lease ran out does not write over the outcome of the claim that took the row after it', async () => {
    const o = await owner();
    const g = await gate();
    const hook = await createHook(o, { url: g.url });
    await emit(o.organizationId, { n: 1 });
    const [row] = await deliveriesOf(hook.id);
    // The first pass's request is held (a receiver slower than the lease, or a worker paused) ...
    g.holdNext();
    const first = deliverDue(b.deps, 1, [o.organizationId]);
    await eventually(() => g.held() === 1);
    // ... its lease runs out, and another instance claims the row again and delivers it.
    h.clock.advance(LEASE_MS + 1_000);
    expect(await deliverDue(h.deps, 1, [o.organizationId])).toBe(1);
    expect(await delivery(row!.id)).toMatchObject({ status: 'delivered', attempt_count: 1 });
    // The first answer comes late, a failure: the row stays as the later claim wrote it.
    g.release(500);
    await first;
    expect(await delivery(row!.id)).toMatchObject({ status: 'delivered', attempt_count: 1, status_code: 200 });
    expect(g.seen).toEqual([row!.id, row!.id]);
    await drain();
    expect(byDelivery(row!.id)).toHaveLength(0);
  });
  it('a delivery that commits after a later one was claimed waits for it: due earlier, it is not sent alongside', async () => {
    const o = await owner();
    const g = await gate();
    const hook = await createHook(o, { url: g.url });
    await emit(o.organizationId, { n: 'later' });
    const [x] = await deliveriesOf(hook.id);
    g.holdNext();
    const first = deliverDue(b.deps, 1, [o.organizationId]);
    await eventually(() => g.held() === 1);
    // A transaction that took its time a second earlier commits its event now: its delivery is due
    // before X, so it is the webhook's head, unleased, while X is in flight.
    const at = new Date(h.clock.now().getTime() - 1_000);
    await h.deps.db.transaction((tx) =>
      appendEvent(tx, { organizationId: o.organizationId, deploymentId: null, type: 'api_key.created', data: { n: 'earlier' }, dedupeKey: null, at }),
    );
    expect(await deliverDue(h.deps, 20, [o.organizationId])).toBe(0);
    expect(g.seen).toEqual([x!.id]);
    g.release(200);
    await first;
    await drain();
    expect(g.seen).toHaveLength(2);
    expect(g.maxInFlight).toBe(1);
  });

  it('a webhook disabled and enabled again while a delivery is in flight: the next one waits for it', async () => {
    const o = await owner();
    const admin = await signUpAsMember(h, o.organizationId, 'admin');
    const g = await gate();
    const made = await h.request({ method: 'POST', url: hooksUrl(o.organizationId), headers: bearer(admin.accessToken), payload: { url: g.url, events: ['api_key.created'] } });
    expect(made.statusCode, made.body).toBe(201);
    const hookId = (made.json() as { data: { id: string } }).data.id;
    await emit(o.organizationId, { n: 1 });
    const [x] = await deliveriesOf(hookId);
    g.holdNext();
    const first = deliverDue(b.deps, 1, [o.organizationId]);
    await eventually(() => g.held() === 1);
    // The admin who made it is removed (the webhook goes off, X fails), an owner turns it on, a new event.
    expect((await h.request({ method: 'DELETE', url: `/organizations/${o.organizationId}/users/${admin.userId}`, headers: bearer(o.accessToken) })).statusCode).toBe(200);
    expect(await delivery(x!.id)).toMatchObject({ status: 'failed' });
    expect((await h.request({ method: 'PATCH', url: `${hooksUrl(o.organizationId)}/${hookId}`, headers: bearer(o.accessToken), payload: { is_active: true } })).statusCode).toBe(200);
    await emit(o.organizationId, { n: 2 });
    expect(await deliverDue(h.deps, 20, [o.organizationId])).toBe(0);
    expect(g.seen).toEqual([x!.id]);
    g.release(200);
    await first;
    // X's late answer does not revive it; its lease ends, and the next delivery goes.
    expect(await delivery(x!.id)).toMatchObject({ status: 'failed' });
    h.clock.advance(LEASE_MS + 1_000);
    await drain();
    expect(g.seen).toHaveLength(2);
    expect(g.maxInFlight).toBe(1);
  });

  it('a webhook deleted while its delivery is in flight: the late answer leaves the row failed, not pending for good', async () => {
    const o = await owner();
    const g = await gate();
    const hook = await createHook(o, { url: g.url });
    await emit(o.organizationId);
    const [row] = await deliveriesOf(hook.id);
    g.holdNext();
    const first = deliverDue(b.deps, 1, [o.organizationId]);
    await eventually(() => g.held() === 1);
    const gone = await h.request({ method: 'DELETE', url: `${hooksUrl(o.organizationId)}/${hook.id}`, headers: bearer(o.accessToken) });
    expect(gone.statusCode, gone.body).toBe(200);
    g.release(500);
    await first;
    expect(await delivery(row!.id)).toMatchObject({ status: 'failed', error: 'webhook deleted', next_retry_at: null });
  });
});
