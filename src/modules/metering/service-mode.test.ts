import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  adminHeaders,
  createHarness,
  createTenant,
  grant,
  type Harness,
  json,
  serviceHeaders,
  unique,
} from '../../../test/harness.js';
import { MINUTE, SECOND } from '../../clock.js';
import { findLedgerMismatches } from '../credits/ledger.js';
import { addMember } from '../organizations/service.js';
import { createUser } from '../users/service.js';

/** Service-to-service mode (the shared service key) over HTTP, with reservations and idempotency (docs/metering.md). */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

const resolve = (userId: string, headers: Record<string, string> = serviceHeaders(h)) =>
  h.request({ method: 'GET', url: `/api/v1/mcp/resolve-deployment?user_id=${encodeURIComponent(userId)}`, headers });
const check = (body: Record<string, unknown>, headers: Record<string, string> = serviceHeaders(h)) =>
  h.request({ method: 'POST', url: '/api/v1/mcp/check-entitlement', headers, payload: body });
const usage = (body: Record<string, unknown>, headers: Record<string, string> = serviceHeaders(h)) =>
  h.request({ method: 'POST', url: '/api/v1/mcp/usage', headers, payload: body });
const costs = (headers: Record<string, string> = serviceHeaders(h)) =>
  h.request({ method: 'GET', url: '/api/v1/mcp/credit-costs', headers });

async function admin(method: 'PUT' | 'POST', url: string, payload: Record<string, unknown>): Promise<void> {
  const res = await h.request({ method, url, headers: adminHeaders(h), payload });
  expect(res.statusCode, `${method} ${url}: ${res.body}`).toBe(200);
}
const setDeployment = (id: string, body: { tier?: string; status?: string }) => admin('PUT', `/api/v1/admin/deployments/${id}`, body);
const setFlags = (id: string, body: Record<string, boolean | null>) => admin('PUT', `/api/v1/admin/deployments/${id}/flags`, body);
const setMonthly = (id: string, credits: number) => admin('PUT', `/api/v1/admin/deployments/${id}/overrides`, { monthly_credits: credits });

/** A tool name of this test only, mapped to `action` (tool_actions is shared by every test of the run). */
async function toolFor(action: string): Promise<string> {
  const tool = unique(`tool-${action}`);
  await admin('PUT', `/api/v1/admin/tool-actions/${tool}`, { action });
  return tool;
}

async function balanceOf(deploymentId: string) {
  const rows = await h.deps.db.query<{ monthly_used: number; purchased_balance: number; reserved: number }>(
    'SELECT monthly_used, purchased_balance, reserved FROM credit_balances WHERE deployment_id = $1',
    [deploymentId],
  );
  return rows[0]!;
}

const NO_DEPLOYMENT = { deployment_id: null, organization_id: null, tier: null, mcp_enabled: false, error: 'no_deployment_found' };

describe('X-MCP-Service-Key', () => {
  it('is required on every service-mode route: missing or wrong → 401 with the flat unauthorized body', async () => {
    const t = await createTenant(h);
    const wrongKeys: Array<Record<string, string>> = [
      {},
      { 'x-mcp-service-key': '' },
      { 'x-mcp-service-key': 'wrong' },
      { 'x-mcp-service-key': `${h.config.mcpServiceKey}x` },
      { 'x-mcp-service-key': h.config.mcpServiceKey.slice(0, -1) },
      // Other credentials are not the service key.
      { 'x-mcp-service-key': h.config.adminApiKey },
      { 'x-mcp-service-key': t.apiKey },
      { authorization: `Bearer ${t.apiKey}` },
      { authorization: `Bearer ${h.config.mcpServiceKey}` },
    ];
    for (const headers of wrongKeys) {
      const answers = [
        await resolve(t.userId, headers),
        await check({ deployment_id: t.deploymentId, tool_name: 'x' }, headers),
        await usage({ deployment_id: t.deploymentId, tool_name: 'x' }, headers),
        // The cost table also answers an API key with read (credit-costs.test.ts): not a wrong key there.
        ...(headers.authorization === `Bearer ${t.apiKey}` ? [] : [await costs(headers)]),
      ];
      for (const [i, res] of answers.entries()) {
        expect(res.statusCode, `${JSON.stringify(headers)} route #${i}`).toBe(401);
        const body = json(res);
        expect(body).toMatchObject({ error: 'unauthorized', code: 'UNAUTHORIZED' });
        expect(typeof body.message).toBe('string');
        expect(String(body.message).length).toBeGreaterThan(0);
      }
    }
    // Nothing was metered by the refused calls.
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 0, reserved: 0 });
    const records = await h.deps.db.query('SELECT 1 FROM usage_records WHERE deployment_id = $1', [t.deploymentId]);
    expect(records).toHaveLength(0);
  });

  it('the right key is accepted', async () => {
    const t = await createTenant(h);
    expect((await resolve(t.userId)).statusCode).toBe(200);
    expect((await check({ deployment_id: t.deploymentId, tool_name: 'x' })).statusCode).toBe(200);
    expect((await costs()).statusCode).toBe(200);
  });
});

describe('resolve-deployment', () => {
  it('resolves a user id to the primary deployment of its organization', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const res = await resolve(t.userId);
    expect(res.statusCode).toBe(200);
    expect(json(res)).toEqual({
      deployment_id: t.deploymentId,
      organization_id: t.organizationId,
      tier: 'launch',
      mcp_enabled: true,
      error: null,
    });
  });

  it('resolves an external_id (the identity provider id) to the same answer', async () => {
    const externalId = unique('idp|auth0');
    const t = await createTenant(h, { tier: 'growth', externalId });
    expect(json(await resolve(externalId))).toEqual({
      deployment_id: t.deploymentId,
      organization_id: t.organizationId,
      tier: 'growth',
      mcp_enabled: true,
      error: null,
    });
  });

  it('reports mcp_enabled false for a sandbox deployment (found, but not enabled)', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    expect(json(await resolve(t.userId))).toEqual({
      deployment_id: t.deploymentId,
      organization_id: t.organizationId,
      tier: 'sandbox',
      mcp_enabled: false,
      error: null,
    });
  });

  it('follows a per-deployment mcp_enabled flag override', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    await setFlags(t.deploymentId, { mcp_enabled: false });
    expect(json(await resolve(t.userId))).toMatchObject({ deployment_id: t.deploymentId, mcp_enabled: false, error: null });
  });

  it('answers no_deployment_found for a user without membership, an unknown user id and an unknown external id', async () => {
    const loner = await createUser(h.ctx, { email: `${unique('loner')}@example.com`, externalId: unique('ext-loner') });
    for (const id of [loner.id, loner.external_id!, randomUUID(), unique('nobody'), 'not a uuid']) {
      const res = await resolve(id);
      expect(res.statusCode, id).toBe(200);
      expect(json(res), id).toEqual(NO_DEPLOYMENT);
    }
  });

  it('the earliest membership wins when no default organization is set', async () => {
    const first = await createTenant(h, { tier: 'launch' });
    h.clock.advance(SECOND);
    const second = await createTenant(h, { tier: 'growth' });
    await addMember(h.ctx, { organizationId: second.organizationId, userId: first.userId, role: 'member' });
    expect(json(await resolve(first.userId))).toMatchObject({
      deployment_id: first.deploymentId,
      organization_id: first.organizationId,
      tier: 'launch',
    });
  });

  it("the user's default organization wins over the earliest membership", async () => {
    const first = await createTenant(h, { tier: 'launch' });
    h.clock.advance(SECOND);
    const second = await createTenant(h, { tier: 'growth' });
    await addMember(h.ctx, { organizationId: second.organizationId, userId: first.userId, role: 'member' });
    await h.deps.db.query('UPDATE users SET default_organization_id = $2 WHERE id = $1', [first.userId, second.organizationId]);
    expect(json(await resolve(first.userId))).toEqual({
      deployment_id: second.deploymentId,
      organization_id: second.organizationId,
      tier: 'growth',
      mcp_enabled: true,
      error: null,
    });
  });

  it('skips an earliest membership whose primary deployment is suspended', async () => {
    const first = await createTenant(h, { tier: 'launch' });
    h.clock.advance(SECOND);
    const second = await createTenant(h, { tier: 'trial' });
    await addMember(h.ctx, { organizationId: second.organizationId, userId: first.userId, role: 'viewer' });
    await setDeployment(first.deploymentId, { status: 'suspended' });
    expect(json(await resolve(first.userId))).toMatchObject({ deployment_id: second.deploymentId, tier: 'trial', error: null });
  });

  it('answers no_deployment_found when the only deployment is suspended', async () => {
    const t = await createTenant(h);
    await setDeployment(t.deploymentId, { status: 'suspended' });
    expect(json(await resolve(t.userId))).toEqual(NO_DEPLOYMENT);
  });

  it('serves an answer from the 5-minute cache even when the database changed behind its back, fresh after 5 minutes', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    expect(json(await resolve(t.userId)).tier).toBe('launch');
    // Raw SQL: no invalidation is published, so only the TTL can end the cached answer.
    await h.deps.db.query(`UPDATE deployments SET tier = 'growth' WHERE id = $1`, [t.deploymentId]);
    h.clock.advance(4 * MINUTE + 59 * SECOND);
    expect(json(await resolve(t.userId))).toMatchObject({ deployment_id: t.deploymentId, tier: 'launch' });
    h.clock.advance(2 * SECOND); // 5 min + 1 s after the first answer
    expect(json(await resolve(t.userId))).toMatchObject({ deployment_id: t.deploymentId, tier: 'growth', mcp_enabled: true });
  });

  it('caches a no_deployment_found answer too, and a new membership invalidates it at once', async () => {
    const loner = await createUser(h.ctx, { email: `${unique('late')}@example.com` });
    expect(json(await resolve(loner.id))).toEqual(NO_DEPLOYMENT);
    const t = await createTenant(h, { tier: 'launch' });
    await addMember(h.ctx, { organizationId: t.organizationId, userId: loner.id, role: 'member' });
    expect(json(await resolve(loner.id))).toMatchObject({ deployment_id: t.deploymentId, error: null });
  });

  it('a tier change through the operator API invalidates the cache at once', async () => {
    const externalId = unique('ext-tier');
    const t = await createTenant(h, { tier: 'sandbox', externalId });
    expect(json(await resolve(t.userId))).toMatchObject({ tier: 'sandbox', mcp_enabled: false });
    expect(json(await resolve(externalId))).toMatchObject({ tier: 'sandbox', mcp_enabled: false });
    await setDeployment(t.deploymentId, { tier: 'launch' });
    expect(json(await resolve(t.userId))).toMatchObject({ deployment_id: t.deploymentId, tier: 'launch', mcp_enabled: true });
    expect(json(await resolve(externalId))).toMatchObject({ deployment_id: t.deploymentId, tier: 'launch', mcp_enabled: true });
  });

  it('a suspension through the operator API invalidates the cache at once, and so does reactivation', async () => {
    const t = await createTenant(h, { tier: 'growth' });
    expect(json(await resolve(t.userId))).toMatchObject({ deployment_id: t.deploymentId, tier: 'growth' });
    await setDeployment(t.deploymentId, { status: 'suspended' });
    expect(json(await resolve(t.userId))).toEqual(NO_DEPLOYMENT);
    await setDeployment(t.deploymentId, { status: 'active' });
    expect(json(await resolve(t.userId))).toMatchObject({ deployment_id: t.deploymentId, tier: 'growth', error: null });
  });

  it('rejects a missing or empty user_id with 400', async () => {
    for (const url of ['/api/v1/mcp/resolve-deployment', '/api/v1/mcp/resolve-deployment?user_id=']) {
      const res = await h.request({ method: 'GET', url, headers: serviceHeaders(h) });
      expect(res.statusCode, url).toBe(400);
      expect(json(res)).toMatchObject({ error: 'invalid_request', code: 'INVALID_REQUEST' });
    }
  });
});

describe('check-entitlement (service mode)', () => {
  const denied = (reason: string, tier: string | null, payment?: { credits_required: number; credits_available: number }) => ({
    allowed: false,
    tier,
    credit_cost: 0,
    credits_available: null,
    reason,
    // A refusal for credits says what the call costs and what is spendable (docs/metering.md, Denials).
    ...(payment ? { payment_required: { reason, ...payment } } : {}),
  });

  it('allows an active launch deployment and names the cost and the spendable credits', async () => {
    const t = await createTenant(h, { tier: 'launch', purchased: 10 });
    const res = await check({ deployment_id: t.deploymentId, tool_name: 'some_tool' });
    expect(res.statusCode).toBe(200);
    expect(json(res)).toEqual({ allowed: true, tier: 'launch', credit_cost: 1, credits_available: 2010, reason: null });
  });

  it('names the cost of the action the tool maps to', async () => {
    const t = await createTenant(h, { tier: 'growth' });
    const crew = await toolFor('crew_execute');
    expect(json(await check({ deployment_id: t.deploymentId, tool_name: crew }))).toEqual({
      allowed: true,
      tier: 'growth',
      credit_cost: 5,
      credits_available: 20_000,
      reason: null,
    });
  });

  it('reports credits_available null for an unlimited (enterprise) deployment', async () => {
    const t = await createTenant(h, { tier: 'enterprise' });
    expect(json(await check({ deployment_id: t.deploymentId, tool_name: 'x' }))).toEqual({
      allowed: true,
      tier: 'enterprise',
      credit_cost: 1,
      credits_available: null,
      reason: null,
    });
  });

  it('an unknown deployment_id → deployment_not_found, credit_cost 0, credits_available null; one that is not a UUID is 400', async () => {
    for (const deploymentId of [randomUUID(), '00000000-0000-0000-0000-000000000000']) {
      const res = await check({ deployment_id: deploymentId, tool_name: 'x' });
      expect(res.statusCode, deploymentId).toBe(200);
      expect(json(res), deploymentId).toEqual(denied('deployment_not_found', null));
    }
    // docs/input.md: an id that must be a UUID and is not is 400 in a body.
    expect(json(await check({ deployment_id: 'not-a-uuid', tool_name: 'x' }))).toMatchObject({ code: 'INVALID_REQUEST' });
  });

  it('a suspended deployment → deployment_not_found, before every other reason', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    await setFlags(t.deploymentId, { mcp_enabled: false });
    await setDeployment(t.deploymentId, { status: 'suspended' });
    expect(json(await check({ deployment_id: t.deploymentId, tool_name: 'x' }))).toEqual(denied('deployment_not_found', null));
  });

  it('sandbox → sandbox_tier, before mcp_disabled and the balance', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    expect(json(await check({ deployment_id: t.deploymentId, tool_name: 'x' }))).toEqual(denied('sandbox_tier', 'sandbox'));
    // Even with MCP switched on for it and credits to spend, sandbox stays refused.
    await setFlags(t.deploymentId, { mcp_enabled: true });
    await grant(h, t.deploymentId, 50);
    expect(json(await check({ deployment_id: t.deploymentId, tool_name: 'x' }))).toEqual(denied('sandbox_tier', 'sandbox'));
    await setFlags(t.deploymentId, { mcp_enabled: false });
    expect(json(await check({ deployment_id: t.deploymentId, tool_name: 'x' }))).toEqual(denied('sandbox_tier', 'sandbox'));
  });

  it('MCP flag off → mcp_disabled, before the balance', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await setMonthly(t.deploymentId, 0);
    await setFlags(t.deploymentId, { mcp_enabled: false });
    expect(json(await check({ deployment_id: t.deploymentId, tool_name: 'x' }))).toEqual(denied('mcp_disabled', 'trial'));
    await setFlags(t.deploymentId, { mcp_enabled: null });
    expect(json(await check({ deployment_id: t.deploymentId, tool_name: 'x' }))).toEqual(
      denied('insufficient_credits', 'trial', { credits_required: 1, credits_available: 0 }),
    );
  });

  it('a balance below the cost → insufficient_credits; exactly the cost is allowed', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const advanced = await toolFor('task_advanced');
    await setMonthly(t.deploymentId, 2);
    expect(json(await check({ deployment_id: t.deploymentId, tool_name: advanced }))).toEqual(
      denied('insufficient_credits', 'trial', { credits_required: 3, credits_available: 2 }),
    );
    await grant(h, t.deploymentId, 1);
    expect(json(await check({ deployment_id: t.deploymentId, tool_name: advanced }))).toEqual({
      allowed: true,
      tier: 'trial',
      credit_cost: 3,
      credits_available: 3,
      reason: null,
    });
  });

  it('is advisory: a check deducts and records nothing', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    for (let i = 0; i < 3; i++) await check({ deployment_id: t.deploymentId, tool_name: 'x' });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 0, reserved: 0 });
    expect(await h.deps.db.query('SELECT 1 FROM usage_records WHERE deployment_id = $1', [t.deploymentId])).toHaveLength(0);
  });
});

describe('usage (service mode)', () => {
  interface UsageRow {
    id: string;
    organization_id: string;
    deployment_id: string;
    metric: string;
    quantity: number;
    tool_name: string;
    mcp_user_id: string | null;
    metadata: unknown;
    success: boolean;
    error: string | null;
    ledger_id: number | null;
  }
  const usageRows = (deploymentId: string) =>
    h.deps.db.query<UsageRow>(
      `SELECT id, organization_id, deployment_id, metric, quantity, tool_name, mcp_user_id, metadata, success, error, ledger_id
       FROM usage_records WHERE deployment_id = $1 ORDER BY "timestamp", id`,
      [deploymentId],
    );

  it('deducts, and stores a usage record (metric = action, quantity = credits) with mcp_user_id, metadata and its ledger row', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const rag = await toolFor('rag_query');
    const metadata = { session: 's-1', nested: { list: [1, 'two', null], flag: true }, 'key with spaces': 'ok' };
    const res = await usage({ deployment_id: t.deploymentId, tool_name: rag, mcp_user_id: 'end-user-42', metadata });
    expect(res.statusCode).toBe(200);
    const body = json(res);
    expect(body).toMatchObject({ success: true, credits_used: 2, credits_remaining: 1998, error: null });
    expect(typeof body.usage_id).toBe('string');

    const rows = await usageRows(t.deploymentId);
    expect(rows).toHaveLength(1);
    const row = rows[0]!;
    expect(row).toMatchObject({
      id: body.usage_id,
      organization_id: t.organizationId,
      deployment_id: t.deploymentId,
      metric: 'rag_query',
      quantity: 2,
      tool_name: rag,
      mcp_user_id: 'end-user-42',
      success: true,
      error: null,
    });
    expect(row.metadata).toEqual(metadata);
    expect(row.ledger_id).not.toBeNull();

    const ledger = await h.deps.db.query<{ kind: string; amount: number; usage_id: string; deployment_id: string; organization_id: string }>(
      'SELECT kind, amount, usage_id, deployment_id, organization_id FROM credit_ledger WHERE id = $1',
      [row.ledger_id],
    );
    expect(ledger).toEqual([
      { kind: 'deduct', amount: -2, usage_id: row.id, deployment_id: t.deploymentId, organization_id: t.organizationId },
    ]);
    expect(await balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 2, purchased_balance: 0 });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('a tool with no mapping is metered as platform_basic; mcp_user_id and metadata may be left out or null', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const tool = unique('unmapped');
    expect(json(await usage({ deployment_id: t.deploymentId, tool_name: tool }))).toMatchObject({
      success: true,
      credits_used: 1,
      credits_remaining: 99,
      error: null,
    });
    expect(json(await usage({ deployment_id: t.deploymentId, tool_name: tool, mcp_user_id: null, metadata: null }))).toMatchObject({
      success: true,
      credits_used: 1,
      credits_remaining: 98,
    });
    const rows = await usageRows(t.deploymentId);
    expect(rows.map((r) => [r.metric, r.quantity, r.tool_name, r.mcp_user_id, r.metadata, r.success])).toEqual([
      ['platform_basic', 1, tool, null, null, true],
      ['platform_basic', 1, tool, null, null, true],
    ]);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('takes the monthly allocation first, then purchased credits, and reports credits_remaining', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 4 });
    await setMonthly(t.deploymentId, 1);
    const advanced = await toolFor('task_advanced');
    expect(json(await usage({ deployment_id: t.deploymentId, tool_name: advanced }))).toMatchObject({
      success: true,
      credits_used: 3,
      credits_remaining: 2,
    });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 1, purchased_balance: 2, reserved: 0 });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('enterprise is never denied for credits and reports credits_remaining null', async () => {
    const t = await createTenant(h, { tier: 'enterprise' });
    const crew = await toolFor('crew_execute');
    expect(json(await usage({ deployment_id: t.deploymentId, tool_name: crew }))).toMatchObject({
      success: true,
      credits_used: 5,
      credits_remaining: null,
      error: null,
    });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('a denial answers 200 with success false, credits_used 0 and the reason, deducts nothing and keeps a failed record', async () => {
    const sandbox = await createTenant(h, { tier: 'sandbox', purchased: 10 });
    const disabled = await createTenant(h, { tier: 'launch' });
    await setFlags(disabled.deploymentId, { mcp_enabled: false });
    const broke = await createTenant(h, { tier: 'trial' });
    await setMonthly(broke.deploymentId, 0);
    const suspended = await createTenant(h, { tier: 'launch' });
    await setDeployment(suspended.deploymentId, { status: 'suspended' });

    const cases: Array<[typeof sandbox, string]> = [
      [sandbox, 'sandbox_tier'],
      [disabled, 'mcp_disabled'],
      [broke, 'insufficient_credits'],
      [suspended, 'deployment_not_found'],
    ];
    for (const [t, reason] of cases) {
      const before = await balanceOf(t.deploymentId);
      const res = await usage({ deployment_id: t.deploymentId, tool_name: 'x', mcp_user_id: 'u-1', metadata: { why: reason } });
      expect(res.statusCode, reason).toBe(200);
      expect(json(res), reason).toMatchObject({ success: false, credits_used: 0, error: reason });
      expect(await balanceOf(t.deploymentId), reason).toEqual(before);
      const rows = await usageRows(t.deploymentId);
      expect(rows, reason).toHaveLength(1);
      expect(rows[0], reason).toMatchObject({ success: false, quantity: 0, error: reason, ledger_id: null, mcp_user_id: 'u-1' });
      // A refusal keeps no metadata (docs/metering.md, Denials and what is recorded).
      expect(rows[0]!.metadata, reason).toBeNull();
      const deducts = await h.deps.db.query("SELECT 1 FROM credit_ledger WHERE deployment_id = $1 AND kind = 'deduct'", [t.deploymentId]);
      expect(deducts, reason).toHaveLength(0);
      expect(await findLedgerMismatches(h.deps.db, t.organizationId), reason).toEqual([]);
    }
  });

  it('an unknown deployment_id answers 200 with error deployment_not_found; one that is not a UUID is 400', async () => {
    const res = await usage({ deployment_id: randomUUID(), tool_name: 'x' });
    expect(res.statusCode).toBe(200);
    expect(json(res)).toMatchObject({ success: false, credits_used: 0, error: 'deployment_not_found' });
    // docs/input.md: an id that must be a UUID and is not is 400 in a body.
    expect((await usage({ deployment_id: 'nope', tool_name: 'x' })).statusCode).toBe(400);
  });

  it('a depleted account refuses the deduction (no prior check needed to find out)', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await setMonthly(t.deploymentId, 2);
    const results = [];
    for (let i = 0; i < 3; i++) results.push(json(await usage({ deployment_id: t.deploymentId, tool_name: 'x' })));
    expect(results.map((r) => [r.success, r.credits_used, r.credits_remaining, r.error])).toEqual([
      [true, 1, 1, null],
      [true, 1, 0, null],
      [false, 0, 0, 'insufficient_credits'],
    ]);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});

describe('credit-costs', () => {
  const SEED: Record<string, number> = {
    task_basic: 1,
    task_advanced: 3,
    crew_execute: 5,
    rag_query: 2,
    rag_ingest: 2,
    generate: 3,
    tao_trace: 1,
    tao_evaluate: 3,
    tao_analytics: 2,
    platform_basic: 1,
  };

  it("lists the ten actions the migration seeds with their credits and null descriptions, cacheable for one hour", async () => {
    const res = await costs();
    expect(res.statusCode).toBe(200);
    expect(String(res.headers['cache-control'])).toMatch(/(^|[\s,])max-age=3600($|[\s,])/);
    const body = json<{ costs: Array<{ action: string; credits: number; description: string | null }> }>(res);
    expect(Array.isArray(body.costs)).toBe(true);
    for (const entry of body.costs) expect(Object.keys(entry).sort()).toEqual(['action', 'credits', 'description']);
    // Other tests of the run may add actions to the shared database; the ten seeded ones must all be there, once.
    for (const [action, credits] of Object.entries(SEED)) {
      const entries = body.costs.filter((c) => c.action === action);
      expect(entries, action).toEqual([{ action, credits, description: null }]);
    }
  });
});
