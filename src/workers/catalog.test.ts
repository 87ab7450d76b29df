import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPassesHarness, createTenant, type Harness, json, serviceHeaders } from '../../test/harness.js';
import { startWorkers, WORKERS, type WorkerDefinition } from './catalog.js';

let h: Harness;
beforeAll(async () => {
  // The passes below move the clock by minutes and days over every tenant's rows: a database of its own.
  h = await createPassesHarness();
});
afterAll(async () => {
  await h.close();
});

const worker = (name: string): WorkerDefinition => WORKERS.find((w) => w.name === name)!;

async function invocation(deploymentId: string, id: string) {
  const rows = await h.deps.db.query<{ status: string }>(
    'SELECT status FROM invocations WHERE deployment_id = $1 AND invocation_id = $2',
    [deploymentId, id],
  );
  return rows[0] ?? null;
}

describe('background workers', () => {
  it('reservation-expiry releases holds past their 5 minutes, and only those', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const reserve = (id: string) =>
      h.request({
        method: 'POST',
        url: '/api/v1/mcp/check-entitlement',
        headers: serviceHeaders(h),
        payload: { deployment_id: t.deploymentId, tool_name: 'x', reserve: true, invocation_id: id },
      });
    expect(json(await reserve('old')).allowed).toBe(true);
    h.clock.advance(4 * 60_000);
    expect(json(await reserve('young')).allowed).toBe(true);
    h.clock.advance(60_000 + 1);
    await worker('reservation-expiry').run(h.deps);
    expect(await invocation(t.deploymentId, 'old')).toEqual({ status: 'expired' });
    expect(await invocation(t.deploymentId, 'young')).toEqual({ status: 'reserved' });
    const b = await h.deps.db.query<{ reserved: number }>('SELECT reserved FROM credit_balances WHERE deployment_id = $1', [t.deploymentId]);
    expect(b[0]!.reserved).toBe(1);
  });

  it('invocation-retention deletes settled invocation rows after 7 days, never an open reservation', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await h.request({
      method: 'POST',
      url: '/api/v1/mcp/usage',
      headers: serviceHeaders(h),
      payload: { deployment_id: t.deploymentId, tool_name: 'x', invocation_id: 'kept-a-week' },
    });
    h.clock.advance(6 * 24 * 3600_000);
    await worker('invocation-retention').run(h.deps);
    expect(await invocation(t.deploymentId, 'kept-a-week')).toEqual({ status: 'recorded' });
    h.clock.advance(24 * 3600_000 + 1000);
    while ((await worker('invocation-retention').run(h.deps)) > 0) {
      // drain: the earlier tests' rows are older still
    }
    expect(await invocation(t.deploymentId, 'kept-a-week')).toBeNull();
  });

  it('startWorkers runs each pass again at once after a full batch, and stop() waits for the pass in flight', async () => {
    let runs = 0;
    let inFlight = false;
    const fake: WorkerDefinition = {
      name: 'fake',
      table: 'none',
      batchSize: 2,
      intervalMs: 5,
      run: async () => {
        inFlight = true;
        runs += 1;
        await new Promise((r) => setTimeout(r, 5));
        inFlight = false;
        return runs < 3 ? 2 : 0;
      },
    };
    const running = startWorkers(h.deps, [fake]);
    const deadline = Date.now() + 5_000;
    while (runs < 4 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    await running.stop();
    expect(runs).toBeGreaterThanOrEqual(4);
    expect(inFlight).toBe(false);
    const after = runs;
    await new Promise((r) => setTimeout(r, 30));
    expect(runs).toBe(after);
  });
});
