import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance } from 'fastify';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { dbKind, type Harness, postgresUrlOf } from '../../../test/harness.js';
import { eventually, type Owner, startWebhookHarness, type WebhookView, webhookFixtures } from '../../../test/organization-webhook-fixtures.js';
import { type Receiver, startReceiver } from '../../../test/receiver.js';
import { CLAIM_SQL, LEASE_MS } from '../../../test/webhook-worker-child.js';
import { buildApp } from '../../app.js';
import { deliverDue } from './organization.js';

/**
 * Organization webhooks (docs/webhooks.md) against a real receiver on loopback: exactly-once delivery with concurrent
 * workers and workers that die mid-pass.
 * Shared helpers: test/organization-webhook-fixtures.ts.
 */
let h: Harness;
let rx: Receiver;
const fx = webhookFixtures(() => h, () => rx);
const { children, owner, createHook, emit, deliveriesOf, delivery, byDelivery, drain } = fx;

beforeAll(async () => {
  h = await startWebhookHarness();
  rx = await startReceiver();
});
afterAll(async () => {
  await rx.close();
  await h.close();
});
beforeEach(() => fx.resetEach());
afterEach(() => fx.cleanUpEach());

describe('exactly once with concurrent and dying workers', () => {
  async function twentyEvents(): Promise<{ o: Owner; hook: WebhookView; ids: string[] }> {
    const o = await owner();
    const hook = await createHook(o);
    for (let i = 0; i < 20; i++) await emit(o.organizationId, { i });
    const ids = (await deliveriesOf(hook.id)).map((d) => d.id);
    expect(ids).toHaveLength(20);
    return { o, hook, ids };
  }

  function expectEachOnce(ids: string[]): void {
    const counts = new Map<string, number>();
    for (const r of rx.received) {
      const id = String(r.headers['x-service-delivery']);
      counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    for (const id of ids) expect(counts.get(id) ?? 0, id).toBe(1);
    expect([...counts.values()].every((n) => n === 1)).toBe(true);
  }

  /** The webhook's head: its earliest pending delivery, the one a claim takes (docs/webhooks.md, Delivery worker). */
  async function headOf(ids: string[]): Promise<string> {
    const rows = await h.deps.db.query<{ id: string }>(
      'SELECT id FROM webhook_deliveries WHERE id = ANY($1::uuid[]) ORDER BY next_retry_at, id LIMIT 1',
      [ids],
    );
    return rows[0]!.id;
  }

  async function allDelivered(ids: string[]): Promise<void> {
    const rows = await h.deps.db.query<{ status: string; attempt_count: number }>(
      'SELECT status, attempt_count FROM webhook_deliveries WHERE id = ANY($1::uuid[])',
      [ids],
    );
    expect(rows).toHaveLength(ids.length);
    for (const r of rows) expect(r).toEqual({ status: 'delivered', attempt_count: 1 });
  }

  describe('two instances on one database', () => {
    let b: FastifyInstance;
    beforeAll(async () => {
      b = await buildApp({ config: h.config, db: h.deps.db, clock: h.clock });
      await b.ready();
    });
    afterAll(async () => {
      await b.close();
    });

    it('concurrent passes on two instances deliver each of 20 events exactly once', async () => {
      const { o, ids } = await twentyEvents();
      const mine = [o.organizationId];
      // Slow answers keep several requests in flight while the other worker claims.
      rx.script({ status: 200, delayMs: 20 });
      for (let round = 0; ; round++) {
        expect(round).toBeLessThan(30);
        const handled = await Promise.all([deliverDue(h.deps, 3, mine), deliverDue(b.deps, 3, mine), deliverDue(h.deps, 3, mine), deliverDue(b.deps, 3, mine)]);
        if (handled.every((n) => n === 0)) break;
      }
      expect(rx.received).toHaveLength(20);
      expectEachOnce(ids);
      await allDelivered(ids);
    });
  });

  it('rows claimed by a worker that died are leased for 60 s, then delivered once by another', async () => {
    const { o, ids } = await twentyEvents();
    const now = h.clock.now();
    // The dead worker's pass: the claim statement of deliverDue, and then nothing.
    const claimed = await h.deps.db.query<{ id: string }>(CLAIM_SQL, [now, 20, new Date(now.getTime() + LEASE_MS), null, [o.organizationId]]);
    // One webhook, one delivery in flight: the claim takes its head, and the rest wait behind it.
    expect(claimed.map((r) => r.id)).toEqual([await headOf(ids)]);
    await drain();
    expect(rx.received).toHaveLength(0);
    h.clock.advance(LEASE_MS - 1_000);
    await drain();
    expect(rx.received).toHaveLength(0);
    h.clock.advance(2_000);
    await drain();
    expect(rx.received).toHaveLength(20);
    expectEachOnce(ids);
    await allDelivered(ids);
    h.clock.advance(LEASE_MS * 10);
    await drain();
    expect(rx.received).toHaveLength(20);
  });

  it('a worker whose attempt times out records the failure and retries later; the receiver sees the same delivery id', async () => {
    const o = await owner();
    const hook = await createHook(o);
    rx.script({ status: 200, delayMs: 3_000 }, { status: 200 });
    await emit(o.organizationId);
    const id = (await deliveriesOf(hook.id))[0]!.id;
    await drain();
    expect(await delivery(id)).toMatchObject({ status: 'pending', attempt_count: 1, status_code: null });
    expect((await delivery(id)).error).toMatch(/timed out/i);
    h.clock.advance(40_000);
    await drain();
    expect(await delivery(id)).toMatchObject({ status: 'delivered', attempt_count: 2 });
    expect(byDelivery(id)).toHaveLength(2);
  });

  describe.runIf(dbKind === 'postgres')('a worker process killed mid-pass (PostgreSQL)', () => {
    const child = fileURLToPath(new URL('../../../test/webhook-worker-child.ts', import.meta.url));
    const root = fileURLToPath(new URL('../../../', import.meta.url));

    async function spawnWorker(mode: 'lease' | 'lock', organizationId: string): Promise<{ proc: ChildProcess; claimed: string[] }> {
      const proc = spawn(process.execPath, ['--import', 'tsx', child, postgresUrlOf(h.deps.db), h.clock.now().toISOString(), '100', mode, organizationId], {
        cwd: root,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      children.add(proc);
      const claimed = await new Promise<string[]>((resolve, reject) => {
        let out = '';
        let err = '';
        const timer = setTimeout(() => reject(new Error(`the worker process did not claim in time: ${err}`)), 20_000);
        proc.stdout!.on('data', (chunk: Buffer) => {
          out += chunk.toString();
          const nl = out.indexOf('\n');
          if (nl >= 0) {
            clearTimeout(timer);
            resolve((JSON.parse(out.slice(0, nl)) as { claimed: string[] }).claimed);
          }
        });
        proc.stderr!.on('data', (chunk: Buffer) => {
          err += chunk.toString();
        });
        proc.once('exit', (code, signal) => {
          clearTimeout(timer);
          reject(new Error(`the worker process exited (${code ?? signal}) before claiming: ${err}`));
        });
      });
      return { proc, claimed };
    }

    async function killHard(proc: ChildProcess): Promise<void> {
      const exited = new Promise<NodeJS.Signals | null>((resolve) => proc.once('exit', (_code, signal) => resolve(signal)));
      expect(proc.kill('SIGKILL')).toBe(true);
      const signal = await Promise.race([exited, new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 10_000))]);
      expect(signal).toBe('SIGKILL');
    }

    it('claimed and committed (leased): after SIGKILL and the lease, the test process delivers each once', async () => {
      const { o, ids } = await twentyEvents();
      const { proc, claimed } = await spawnWorker('lease', o.organizationId);
      expect(claimed).toEqual([await headOf(ids)]);
      await killHard(proc);
      await drain();
      expect(rx.received).toHaveLength(0);
      h.clock.advance(LEASE_MS + 1_000);
      await drain();
      expect(rx.received).toHaveLength(20);
      expectEachOnce(ids);
      await allDelivered(ids);
    });

    it('claimed inside an open transaction: other workers skip the locked rows; SIGKILL releases them at once', async () => {
      const { o, ids } = await twentyEvents();
      const { proc, claimed } = await spawnWorker('lock', o.organizationId);
      expect(claimed).toEqual([await headOf(ids)]);
      // SKIP LOCKED: while the process lives, our worker passes over its rows.
      await drain();
      expect(rx.received).toHaveLength(0);
      await killHard(proc);
      // The server rolls the dead connection's transaction back: due again without moving the clock.
      await eventually(async () => {
        await deliverDue(h.deps, 20, [o.organizationId]);
        return rx.received.length >= 20;
      });
      await drain();
      expect(rx.received).toHaveLength(20);
      expectEachOnce(ids);
      await allDelivered(ids);
    });
  });
});
