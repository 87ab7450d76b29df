import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { testConfig } from '../src/config.js';
import { creditFixtures } from './credit-fixtures.js';
import { adminHeaders, createHarness, dbKind, type Harness, json, serviceHeaders, testDatabase } from './harness.js';

/**
 * Refunds of one usage on two instances, while records of its deployment run (docs/adr/0004-group-commit.md,
 * Consequences): a refund locks the balance row before the usage row, as a batch with a record does,
 * so they never deadlock (a 500), and the usage is never refunded past what it cost.
 */
let h: Harness;
let a: FastifyInstance;
let b: FastifyInstance;
beforeAll(async () => {
  h = await createHarness();
  if (dbKind !== 'postgres') return;
  a = await buildApp({ config: testConfig({ logLevel: 'error' }), db: await testDatabase(), clock: h.clock });
  b = await buildApp({ config: testConfig({ logLevel: 'error' }), db: await testDatabase(), clock: h.clock });
  await Promise.all([a.ready(), b.ready()]);
});
afterAll(async () => {
  await Promise.all([a?.close(), b?.close(), h.close()]);
});

const { tenantWith, balanceOf, expectLedgerConsistent } = creditFixtures(() => h);
type Body = Record<string, unknown>;
const post = (app: FastifyInstance, url: string, headers: Record<string, string>, payload: Body) => app.inject({ method: 'POST', url, headers, payload });

// Two connections at once: PGlite has one, so the race exists on PostgreSQL only.
describe.runIf(dbKind === 'postgres')('refunds of one usage on two instances (PostgreSQL)', () => {
  it('with records of the deployment in the same batches: no deadlock, refunded once', async () => {
    for (let round = 0; round < 6; round++) {
      const t = await tenantWith(2, 5);
      const id = `lock-order-${round}`;
      const recorded = json<{ success: boolean; usage_id: string }>(
        await post(a, '/api/v1/mcp/usage', serviceHeaders(h), { deployment_id: t.deploymentId, tool_name: 'lock_order_tool', invocation_id: id }),
      );
      expect(recorded.success).toBe(true);
      const usage = recorded.usage_id;
      const refund = (app: FastifyInstance, body: Body) => post(app, `/api/v1/mcp/usage/${usage}/refund`, serviceHeaders(h), { reason: 'r', ...body });
      const operatorRefund = (app: FastifyInstance, body: Body) => post(app, `/api/v1/admin/usage/${usage}/refund`, adminHeaders(h), { reason: 'r', ...body });
      const answers = await Promise.all([
        refund(a, { idempotency_key: 'k1' }),
        refund(b, { idempotency_key: 'k2' }),
        operatorRefund(a, {}),
        operatorRefund(b, { amount: 1 }),
        refund(b, { amount: 1, idempotency_key: 'k3' }),
        post(b, '/api/v1/mcp/usage', serviceHeaders(h), { deployment_id: t.deploymentId, tool_name: 'lock_order_tool', invocation_id: id }),
        post(a, '/api/v1/mcp/usage', serviceHeaders(h), { deployment_id: t.deploymentId, tool_name: 'lock_order_tool', invocation_id: id }),
      ]);
      for (const answer of answers) expect([200, 400, 409, 422], answer.body).toContain(answer.statusCode);
      const [row] = await h.deps.db.query<{ refunded: number; quantity: number }>('SELECT refunded, quantity FROM usage_records WHERE id = $1', [usage]);
      expect(row!.refunded).toBe(row!.quantity);
      expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 5, reserved: 0 });
      await expectLedgerConsistent(t);
    }
  });
});
