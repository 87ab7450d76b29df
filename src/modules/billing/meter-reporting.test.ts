import { type ChildProcess, spawn } from 'node:child_process';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DAY } from '../../clock.js';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { bearer, createHarness, createPassesHarness, createTenant, dbKind, grant, type Harness, json, postgresUrlOf, serviceHeaders, type Tenant } from '../../../test/harness.js';
import { accountAiTokens } from '../quotas/ai-tokens.js';
import { type StripeStandIn, startStripeStandIn } from '../../../test/stripe-stand-in/server.js';
import { WORKERS } from '../../workers/catalog.js';

/**
 * Usage to Stripe meters (docs/billing.md): every successful deduction of a subscribed organization becomes a
 * meter event (identifier = usage record id) that the `meter-events` worker reports once — through
 * Stripe faults, resends and a worker killed mid-batch. Stripe is the stand-in, reached through a
 * small proxy of this file that counts requests per identifier and can withhold answers.
 */
const EVENT_NAME = 'creditgate_credits';
let h: Harness;
let standIn: StripeStandIn;
let proxy: MeterProxy;
const f = creditFixtures(() => h);

/**
 * In front of the stand-in: counts meter event requests per identifier; `stall(n, after)` lets `after`
 * more answers through, then keeps the next n (Stripe records those events; their answers never come).
 */
interface MeterProxy {
  url: string;
  sent: Map<string, number>;
  stalled: number;
  stall(n: number, after?: number): void;
  close(): Promise<void>;
}

async function startProxy(target: string): Promise<MeterProxy> {
  const held: ServerResponse[] = [];
  let toStall = 0;
  let toPass = 0;
  const state: MeterProxy = {
    url: '',
    sent: new Map(),
    stalled: 0,
    stall: (n, after = 0) => {
      toStall = n;
      toPass = after;
    },
    close: async () => {
      for (const res of held) res.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server: Server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks).toString();
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string' && k !== 'host' && k !== 'content-length') headers[k] = v;
    const answer = await fetch(target + req.url, { method: req.method, headers, body: req.method === 'GET' ? undefined : body });
    const text = await answer.text();
    if (req.url === '/v1/billing/meter_events') {
      const identifier = new URLSearchParams(body).get('identifier') ?? '';
      state.sent.set(identifier, (state.sent.get(identifier) ?? 0) + 1);
      if (toPass > 0) toPass -= 1;
      else if (toStall > 0) {
        // Stripe took it; the answer never arrives.
        toStall -= 1;
        state.stalled += 1;
        held.push(res);
        return;
      }
    }
    res.writeHead(answer.status, { 'content-type': 'application/json', 'request-id': answer.headers.get('request-id') ?? 'req_proxy' });
    res.end(text);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return state;
}

beforeAll(async () => {
  const start = new Date('2026-03-01T10:00:00.000Z');
  standIn = await startStripeStandIn({ now: () => (h ? h.clock.now() : start) });
  proxy = await startProxy(standIn.url);
  h = await createPassesHarness({ stripeSecretKey: standIn.secretKey, stripeApiBase: proxy.url, stripeMeterEventName: EVENT_NAME }, start.toISOString());
});
afterAll(async () => {
  await h?.close();
  await proxy?.close();
  await standIn?.close();
});

const q = <T>(sql: string, params: unknown[]) => h.deps.db.query<T>(sql, params);
const report = () => WORKERS.find((w) => w.name === 'meter-events')!.run(h.deps);

/** Subscribed in the database's terms: a Stripe customer and a subscription in force. */
async function subscribed(tier: 'trial' | 'launch' = 'launch'): Promise<Tenant & { customer: string }> {
  const t = await createTenant(h, { tier });
  const customer = standIn.createCustomer({ metadata: { organization_id: t.organizationId } }).id;
  await q(`UPDATE organizations SET stripe_customer_id = $2, subscription_status = 'active' WHERE id = $1`, [t.organizationId, customer]);
  return { ...t, customer };
}

async function record(t: Tenant, tool = 'plain-tool'): Promise<{ success: boolean; usage_id: string }> {
  const res = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: tool } });
  expect(res.statusCode, res.body).toBe(200);
  return json(res);
}

const outbox = (organizationId: string) =>
  q<{ identifier: string; status: string; processor_ref: string | null; last_error: string | null; next_attempt_at: Date; attempts: number }>(
    'SELECT identifier, status, processor_ref, last_error, next_attempt_at, attempts FROM meter_event_outbox WHERE organization_id = $1 ORDER BY event_at, identifier',
    [organizationId],
  );
const eventsOf = (customer: string) => standIn.meterEvents().filter((e) => e.payload.stripe_customer_id === customer);

/** Run worker passes until this organization has nothing due (bounded). */
async function drain(organizationId: string): Promise<void> {
  for (let i = 0; i < 20; i++) {
    await report();
    const due = await q("SELECT 1 FROM meter_event_outbox WHERE organization_id = $1 AND status = 'pending' AND next_attempt_at <= $2", [organizationId, h.clock.now()]);
    if (due.length === 0) return;
  }
  throw new Error('the meter outbox did not drain in 20 passes');
}

describe('usage reaches the Stripe meter once', () => {
  it('each successful deduction of a subscriber is one meter event: identifier = usage id, value = credits, its time', async () => {
    const t = await subscribed();
    const usage: string[] = [];
    for (let i = 0; i < 5; i++) {
      usage.push((await record(t)).usage_id);
      h.clock.advance(1000);
    }
    await drain(t.organizationId);
    const events = eventsOf(t.customer);
    expect(events.map((e) => e.identifier).sort()).toEqual([...usage].sort());
    const times = await q<{ id: string; timestamp: Date }>('SELECT id, "timestamp" FROM usage_records WHERE id = ANY($1::uuid[])', [usage]);
    for (const e of events) {
      expect(e).toMatchObject({ event_name: EVENT_NAME, payload: { stripe_customer_id: t.customer, value: '1' } });
      expect(e.timestamp).toBe(Math.floor(times.find((r) => r.id === e.identifier)!.timestamp.getTime() / 1000));
    }
    const rows = await outbox(t.organizationId);
    expect(rows.every((r) => r.status === 'reported' && r.processor_ref === r.identifier)).toBe(true);
    const marked = await q<{ reported: boolean; processor_ref: string }>('SELECT reported, processor_ref FROM usage_records WHERE id = ANY($1::uuid[])', [usage]);
    expect(marked.every((m) => m.reported && usage.includes(m.processor_ref))).toBe(true);
    expect(usage.every((id) => proxy.sent.get(id) === 1)).toBe(true);
  });

  it('not reported: an organization without a subscription, a refused call, an installation with reporting off', async () => {
    const free = await createTenant(h, { tier: 'launch' });
    await record(free);
    const broke = await f.tenantWith(0);
    await q(`UPDATE organizations SET stripe_customer_id = $2, subscription_status = 'active' WHERE id = $1`, [broke.organizationId, standIn.createCustomer().id]);
    expect((await record(broke)).success).toBe(false);
    const t = await subscribed();
    const off = await createHarness({}, h.clock.now().toISOString(), h.deps.db);
    try {
      const res = await off.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: 'x' } });
      expect(json(res)).toMatchObject({ success: true });
    } finally {
      await off.close();
    }
    for (const org of [free.organizationId, broke.organizationId, t.organizationId]) expect(await outbox(org)).toEqual([]);
  });

  it('a Stripe answering 500 loses nothing: kept with the error, sent after the backoff, once', async () => {
    const t = await subscribed();
    const ids = [(await record(t)).usage_id, (await record(t)).usage_id];
    // Every try of this pass fails (the SDK tries each event twice).
    standIn.failNext(4, { path: /meter_events/ });
    await report();
    for (const row of await outbox(t.organizationId)) {
      expect(row).toMatchObject({ status: 'pending', attempts: 1 });
      expect(row.last_error).not.toBeNull();
      expect(row.next_attempt_at.getTime()).toBeGreaterThan(h.clock.now().getTime());
    }
    expect(eventsOf(t.customer)).toHaveLength(0);
    h.clock.advance(31_000);
    await drain(t.organizationId);
    expect(eventsOf(t.customer).map((e) => e.identifier).sort()).toEqual([...ids].sort());
    expect((await outbox(t.organizationId)).every((r) => r.status === 'reported')).toBe(true);
  });

  it('a refusal Stripe will repeat is kept as failed with its reason and not retried', async () => {
    const t = await subscribed();
    await q(`UPDATE organizations SET stripe_customer_id = 'cus_nobody_knows' WHERE id = $1`, [t.organizationId]);
    await record(t);
    await drain(t.organizationId);
    const [row] = await outbox(t.organizationId);
    expect(row).toMatchObject({ status: 'failed', last_error: expect.stringMatching(/customer/i) });
    h.clock.advance(DAY);
    await report();
    expect((await outbox(t.organizationId))[0]).toMatchObject({ status: 'failed', attempts: row!.attempts });
  });

  it('AI tokens past the limit, paid with purchased credits, are reported too', async () => {
    const t = await subscribed('trial');
    await f.admin('PUT', `/api/v1/admin/deployments/${t.deploymentId}/overrides`, { ai_tokens_limit: 0 });
    await grant(h, t.deploymentId, 100);
    const charged = await accountAiTokens({ ...h.ctx, actor: { type: 'system' } }, { id: t.deploymentId, organization_id: t.organizationId }, {
      inputTokens: 4000,
      outputTokens: 1000,
      model: 'gpt-4o-mini',
    });
    expect(charged.creditsCharged).toBe(5);
    await drain(t.organizationId);
    expect(eventsOf(t.customer).map((e) => [e.identifier, e.payload.value])).toEqual([[charged.usageId, '5']]);
  });

  it('usage refunded before it is reported is reported net, or not at all', async () => {
    const t = await subscribed();
    const action = `meter_${Date.now().toString(36)}`;
    await f.admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits: 10 });
    const tool = await f.toolFor(action);
    const part = (await record(t, tool)).usage_id;
    const whole = (await record(t, tool)).usage_id;
    const refund = (usageId: string, amount?: number) =>
      h.request({ method: 'POST', url: `/api/v1/mcp/usage/${usageId}/refund`, headers: serviceHeaders(h), payload: { reason: 'tool failed', ...(amount ? { amount } : {}) } });
    expect((await refund(part, 4)).statusCode).toBe(200);
    expect((await refund(whole)).statusCode).toBe(200);
    await drain(t.organizationId);
    expect(eventsOf(t.customer).map((e) => [e.identifier, e.payload.value])).toEqual([[part, '6']]);
    expect(proxy.sent.get(whole)).toBeUndefined();
    expect((await outbox(t.organizationId)).every((r) => r.status === 'reported')).toBe(true);
    const marks = await q<{ id: string; reported: boolean }>('SELECT id, reported FROM usage_records WHERE id = ANY($1::uuid[])', [[part, whole]]);
    expect(Object.fromEntries(marks.map((m) => [m.id, m.reported]))).toEqual({ [part]: true, [whole]: false });
  });

  it('a resend of events Stripe already took is deduplicated by their identifiers', async () => {
    const t = await subscribed();
    const ids = [(await record(t)).usage_id, (await record(t)).usage_id];
    await drain(t.organizationId);
    // As if the marks were lost: the rows are due again.
    await q(`UPDATE meter_event_outbox SET status = 'pending', next_attempt_at = $2 WHERE organization_id = $1`, [t.organizationId, h.clock.now()]);
    await drain(t.organizationId);
    expect(ids.every((id) => proxy.sent.get(id) === 2)).toBe(true);
    expect(eventsOf(t.customer)).toHaveLength(2);
  });
});

describe.runIf(dbKind === 'postgres')('a worker process killed mid-batch (PostgreSQL)', () => {
  const childScript = fileURLToPath(new URL('../../../test/meter-worker-child.ts', import.meta.url));
  const root = fileURLToPath(new URL('../../../', import.meta.url));

  it('Stripe took some events, their answers never came: after SIGKILL and the lease each is reported once', async () => {
    const t = await subscribed();
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) ids.push((await record(t)).usage_id);
    // The child's first 5 events are answered (and marked); the next 8 — one per lane — are recorded by Stripe but never answered.
    proxy.stall(8, 5);
    const child: ChildProcess = spawn(
      process.execPath,
      ['--import', 'tsx', childScript, postgresUrlOf(h.deps.db), h.clock.now().toISOString(), proxy.url, standIn.secretKey, EVENT_NAME],
      { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    try {
      for (let waited = 0; proxy.stalled < 8; waited += 50) {
        if (waited > 30_000) throw new Error(`the worker process did not send its batch in time: ${stderr}`);
        if (child.exitCode !== null) throw new Error(`the worker process exited (${child.exitCode}): ${stderr}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      const exited = new Promise<NodeJS.Signals | null>((resolve) => child.once('exit', (_code, signal) => resolve(signal)));
      expect(child.kill('SIGKILL')).toBe(true);
      expect(await exited).toBe('SIGKILL');
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
    const reported = (await outbox(t.organizationId)).filter((r) => r.status === 'reported').map((r) => r.identifier);
    expect(reported).toHaveLength(5);
    const stalled = ids.filter((id) => proxy.sent.get(id) === 1 && !reported.includes(id));
    expect(stalled).toHaveLength(8);
    // The rest are leased to the dead worker for two minutes: a pass now sends nothing.
    await report();
    expect(eventsOf(t.customer)).toHaveLength(13);
    h.clock.advance(2 * 60_000 + 1000);
    await drain(t.organizationId);
    // Each usage record is one meter event at Stripe; the stalled ones were sent twice and deduplicated.
    expect(eventsOf(t.customer).map((e) => e.identifier).sort()).toEqual([...ids].sort());
    expect(stalled.every((id) => proxy.sent.get(id) === 2)).toBe(true);
    expect(ids.filter((id) => !stalled.includes(id)).every((id) => proxy.sent.get(id) === 1)).toBe(true);
    expect(reported.every((id) => !stalled.includes(id))).toBe(true);
    expect((await outbox(t.organizationId)).every((r) => r.status === 'reported')).toBe(true);
  }, 60_000);
});
