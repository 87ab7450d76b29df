import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  bearer,
  createHarness,
  createTenant,
  grant,
  type Harness,
  json,
  serviceHeaders,
  type Tenant,
} from '../../../test/harness.js';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { DAY, HOUR, MINUTE, SECOND } from '../../clock.js';
import { createApiKey } from '../api-keys/service.js';
import { findLedgerMismatches } from '../credits/ledger.js';

/** Reservations, release, invocation status, refunds, the idempotency window (docs/metering.md). */
let h: Harness;
let advanced: string; // a tool of this file that costs 3 (task_advanced)
beforeAll(async () => {
  h = await createHarness();
  advanced = await toolFor('task_advanced');
});
afterAll(async () => {
  await h.close();
});

type Headers = Record<string, string>;
type Body = Record<string, unknown>;
const { admin, toolFor, setMonthly, tenantWith, balanceOf, ledgerKinds, expectLedgerConsistent } = creditFixtures(() => h);

const serviceCheck = (body: Body, headers: Headers = {}) =>
  h.request({ method: 'POST', url: '/api/v1/mcp/check-entitlement', headers: { ...serviceHeaders(h), ...headers }, payload: body });
const serviceUsage = (body: Body, headers: Headers = {}) =>
  h.request({ method: 'POST', url: '/api/v1/mcp/usage', headers: { ...serviceHeaders(h), ...headers }, payload: body });
const stdioCheck = (key: string, body: Body, headers: Headers = {}) =>
  h.request({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: { ...bearer(key), ...headers }, payload: body });
const stdioRecord = (key: string, body: Body, headers: Headers = {}) =>
  h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: { ...bearer(key), ...headers }, payload: body });
const releaseWithKey = (key: string, invocationId: string, body: Body = {}) =>
  h.request({
    method: 'POST',
    url: `/api/v1/mcp/reservations/${encodeURIComponent(invocationId)}/release`,
    headers: bearer(key),
    payload: body,
  });
const releaseWithService = (deploymentId: string, invocationId: string) =>
  h.request({
    method: 'POST',
    url: `/api/v1/mcp/reservations/${encodeURIComponent(invocationId)}/release`,
    headers: serviceHeaders(h),
    payload: { deployment_id: deploymentId },
  });
const invocationWithKey = (key: string, invocationId: string) =>
  h.request({ method: 'GET', url: `/api/v1/mcp/invocations/${encodeURIComponent(invocationId)}`, headers: bearer(key) });
const invocationWithService = (deploymentId: string, invocationId: string) =>
  h.request({
    method: 'GET',
    url: `/api/v1/mcp/invocations/${encodeURIComponent(invocationId)}?deployment_id=${deploymentId}`,
    headers: serviceHeaders(h),
  });
const refund = (usageId: string, body: Body, headers: Headers = serviceHeaders(h)) =>
  h.request({ method: 'POST', url: `/api/v1/mcp/usage/${usageId}/refund`, headers, payload: body });

/** Spendable credits as a plain check (cost 1) reports them; a refusal for balance means fewer than 1. */
async function available(t: Tenant): Promise<number | null> {
  const body = json(await serviceCheck({ deployment_id: t.deploymentId, tool_name: 'probe' }));
  if (body.reason === 'insufficient_credits') return 0;
  expect(body.allowed).toBe(true);
  return body.credits_available as number | null;
}

describe('reservations (check with reserve: true)', () => {
  it('service mode: holds credit_cost; others cannot take it; the record with the same invocation_id charges the hold', async () => {
    const t = await tenantWith(10);
    const res = await serviceCheck({ deployment_id: t.deploymentId, tool_name: advanced, reserve: true, invocation_id: 'job-1' });
    expect(res.statusCode).toBe(200);
    expect(json(res)).toEqual({
      allowed: true,
      tier: 'trial',
      credit_cost: 3,
      credits_available: 7,
      reason: null,
      invocation_id: 'job-1',
      reservation_expires_at: new Date(h.clock.now().getTime() + 5 * MINUTE).toISOString(),
    });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 0, reserved: 3 });
    expect(await available(t)).toBe(7);

    // Someone else (no invocation id) spends what is not held: 7 credits, then is refused.
    for (let i = 0; i < 2; i++) {
      expect(json(await serviceUsage({ deployment_id: t.deploymentId, tool_name: advanced }))).toMatchObject({ success: true, credits_used: 3 });
    }
    expect(json(await serviceUsage({ deployment_id: t.deploymentId, tool_name: advanced }))).toMatchObject({
      success: false,
      credits_used: 0,
      error: 'insufficient_credits',
    });
    expect(json(await serviceUsage({ deployment_id: t.deploymentId, tool_name: 'x' }))).toMatchObject({ success: true, credits_used: 1 });
    expect(json(await serviceUsage({ deployment_id: t.deploymentId, tool_name: 'x' }))).toMatchObject({
      success: false,
      error: 'insufficient_credits',
    });
    // A plain check sees no spendable credits, although 3 are still in the monthly bucket.
    expect(json(await serviceCheck({ deployment_id: t.deploymentId, tool_name: 'x' }))).toMatchObject({
      allowed: false,
      reason: 'insufficient_credits',
    });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 7, purchased_balance: 0, reserved: 3 });

    // The reservation's owner records: it cannot fail for balance and costs the held amount.
    const recorded = await serviceUsage({ deployment_id: t.deploymentId, tool_name: advanced, invocation_id: 'job-1' });
    expect(recorded.statusCode).toBe(200);
    expect(json(recorded)).toMatchObject({ success: true, credits_used: 3, credits_remaining: 0, error: null, invocation_id: 'job-1' });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 10, purchased_balance: 0, reserved: 0 });
    const status = json(await invocationWithService(t.deploymentId, 'job-1'));
    expect(status).toMatchObject({ status: 'recorded', reserved_credits: 0, usage_id: json(recorded).usage_id, credits_used: 3 });
    await expectLedgerConsistent(t);
  });

  it('the record charges the amount held even when the tool maps to a dearer action since', async () => {
    const t = await tenantWith(3);
    const tool = await toolFor('task_advanced');
    expect(json(await serviceCheck({ deployment_id: t.deploymentId, tool_name: tool, reserve: true, invocation_id: 'fixed' }))).toMatchObject({
      allowed: true,
      credit_cost: 3,
      credits_available: 0,
    });
    await admin('PUT', `/api/v1/admin/tool-actions/${tool}`, { action: 'crew_execute' });
    const res = json(await serviceUsage({ deployment_id: t.deploymentId, tool_name: tool, invocation_id: 'fixed' }));
    expect(res).toMatchObject({ success: true, credits_used: 3, credits_remaining: 0 });
    const rows = await h.deps.db.query<{ quantity: number }>('SELECT quantity FROM usage_records WHERE id = $1', [res.usage_id]);
    expect(rows).toEqual([{ quantity: 3 }]);
    await expectLedgerConsistent(t);
  });

  it('stdio: reserve needs the write scope; a held reservation survives a drained balance', async () => {
    const t = await tenantWith(3);
    const { key: readOnly } = await createApiKey(h.ctx, { organizationId: t.organizationId, name: 'read only', scopes: ['read'] });
    const { key: other } = await createApiKey(h.ctx, { organizationId: t.organizationId, name: 'other', scopes: ['read', 'write'] });

    const refused = await stdioCheck(readOnly, { tool_name: 'x', reserve: true, invocation_id: 'nope' });
    expect(refused.statusCode).toBe(403);
    expect(json(refused)).toMatchObject({ error: 'forbidden', code: 'INSUFFICIENT_SCOPE' });
    expect((await stdioCheck(readOnly, { tool_name: 'x' })).statusCode).toBe(200);
    expect(await balanceOf(t.deploymentId)).toMatchObject({ reserved: 0 });

    const held = await stdioCheck(t.apiKey, { tool_name: 'x', reserve: true, invocation_id: 'stdio-1' });
    expect(held.statusCode).toBe(200);
    const body = json(held);
    expect(body).toMatchObject({ allowed: true, credit_cost: 1, tier: 'trial', reason: null, invocation_id: 'stdio-1' });
    expect(body).not.toHaveProperty('credits_available');
    expect(typeof body.reservation_expires_at).toBe('string');
    expect(await balanceOf(t.deploymentId)).toMatchObject({ reserved: 1 });

    // Another key of the same organization drains what is not held.
    expect(json(await stdioRecord(other, { tool_name: 'x' }))).toMatchObject({ success: true });
    expect(json(await stdioRecord(other, { tool_name: 'x' }))).toMatchObject({ success: true });
    expect(json(await stdioRecord(other, { tool_name: 'x' }))).toMatchObject({ success: false, error: 'insufficient_credits' });

    const recorded = await stdioRecord(t.apiKey, { tool_name: 'x' }, { 'idempotency-key': 'stdio-1' });
    expect(json(recorded)).toMatchObject({ success: true, credits_used: 1, credits_remaining: 0, invocation_id: 'stdio-1' });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 3, purchased_balance: 0, reserved: 0 });
    expect(json(await invocationWithKey(t.apiKey, 'stdio-1'))).toMatchObject({ status: 'recorded', credits_used: 1 });
    await expectLedgerConsistent(t);
  });

  it('a reservation without invocation_id gets one from the server, usable to record', async () => {
    const t = await tenantWith(5);
    const body = json(await serviceCheck({ deployment_id: t.deploymentId, tool_name: 'x', reserve: true }));
    expect(body.allowed).toBe(true);
    expect(typeof body.invocation_id).toBe('string');
    const id = body.invocation_id as string;
    expect(json(await invocationWithService(t.deploymentId, id))).toMatchObject({ status: 'reserved', reserved_credits: 1 });
    expect(json(await serviceUsage({ deployment_id: t.deploymentId, tool_name: 'x', invocation_id: id }))).toMatchObject({
      success: true,
      credits_used: 1,
      credits_remaining: 4,
    });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 1, purchased_balance: 0, reserved: 0 });
    await expectLedgerConsistent(t);
  });

  it('repeating the reserve with the same invocation_id holds once', async () => {
    const t = await tenantWith(10);
    const first = json(await serviceCheck({ deployment_id: t.deploymentId, tool_name: advanced, reserve: true, invocation_id: 'twice' }));
    const again = json(await serviceCheck({ deployment_id: t.deploymentId, tool_name: advanced, reserve: true, invocation_id: 'twice' }));
    expect(again).toEqual(first);
    expect(await balanceOf(t.deploymentId)).toMatchObject({ reserved: 3 });
    const reused = await serviceCheck({ deployment_id: t.deploymentId, tool_name: 'another-tool', reserve: true, invocation_id: 'twice' });
    expect(reused.statusCode).toBe(422);
    expect(json(reused)).toMatchObject({ error: 'idempotency_key_reused', code: 'IDEMPOTENCY_KEY_REUSED' });
    expect(await balanceOf(t.deploymentId)).toMatchObject({ reserved: 3 });
  });

  it('reserving an id again after its hold lapsed holds anew, or is refused: never the lapsed hold answered', async () => {
    const t = await tenantWith(3);
    const reserve = (invocationId: string) => serviceCheck({ deployment_id: t.deploymentId, tool_name: advanced, reserve: true, invocation_id: invocationId });
    expect(json(await reserve('lapse-again')).allowed).toBe(true);
    h.clock.advance(5 * MINUTE + SECOND);
    // Not yet swept: the lapsed hold is released and a new one of 5 minutes taken, in one transaction.
    const again = json(await reserve('lapse-again'));
    expect(again).toMatchObject({ allowed: true, credit_cost: 3, invocation_id: 'lapse-again' });
    expect(new Date(again.reservation_expires_at as string).getTime()).toBe(h.clock.now().getTime() + 5 * MINUTE);
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 0, reserved: 3 });
    // The new hold is real: no one else gets its credits, and the record of the id spends it.
    expect(json(await reserve('someone-else'))).toMatchObject({ allowed: false, reason: 'insufficient_credits' });
    expect(json(await serviceUsage({ deployment_id: t.deploymentId, tool_name: advanced, invocation_id: 'lapse-again' }))).toMatchObject({
      success: true,
      credits_used: 3,
    });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 3, purchased_balance: 0, reserved: 0 });
    await expectLedgerConsistent(t);

    // The credits of a lapsed hold were taken by another call meanwhile: the id's new hold is refused.
    const u = await tenantWith(3);
    const reserveU = (invocationId: string) => serviceCheck({ deployment_id: u.deploymentId, tool_name: advanced, reserve: true, invocation_id: invocationId });
    expect(json(await reserveU('taken')).allowed).toBe(true);
    h.clock.advance(5 * MINUTE + SECOND);
    expect(json(await serviceUsage({ deployment_id: u.deploymentId, tool_name: advanced }))).toMatchObject({ success: true, credits_used: 3 });
    expect(json(await reserveU('taken'))).toMatchObject({ allowed: false, reason: 'insufficient_credits' });
    expect(await balanceOf(u.deploymentId)).toEqual({ monthly_used: 3, purchased_balance: 0, reserved: 0 });
    await expectLedgerConsistent(u);
  });

  it('recording a reserved id with another tool → 422, and the hold stays for the right record', async () => {
    const t = await tenantWith(5);
    await serviceCheck({ deployment_id: t.deploymentId, tool_name: advanced, reserve: true, invocation_id: 'mismatch' });
    const wrong = await serviceUsage({ deployment_id: t.deploymentId, tool_name: 'other-tool', invocation_id: 'mismatch' });
    expect(wrong.statusCode).toBe(422);
    expect(json(wrong)).toMatchObject({ error: 'idempotency_key_reused', code: 'IDEMPOTENCY_KEY_REUSED' });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 0, reserved: 3 });
    expect(json(await serviceUsage({ deployment_id: t.deploymentId, tool_name: advanced, invocation_id: 'mismatch' }))).toMatchObject({
      success: true,
      credits_used: 3,
    });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 3, purchased_balance: 0, reserved: 0 });
    await expectLedgerConsistent(t);
  });

  it('a reservation the balance cannot cover is refused and holds nothing', async () => {
    const t = await tenantWith(2);
    const res = json(await serviceCheck({ deployment_id: t.deploymentId, tool_name: advanced, reserve: true, invocation_id: 'short' }));
    expect(res).toMatchObject({ allowed: false, credit_cost: 0, credits_available: null, reason: 'insufficient_credits' });
    expect(await balanceOf(t.deploymentId)).toMatchObject({ reserved: 0 });
    // No hold, so the invocation is not reported as reserved.
    const status = await invocationWithService(t.deploymentId, 'short');
    if (status.statusCode === 200) expect(json(status).status).not.toBe('reserved');
    else expect(status.statusCode).toBe(404);
  });

  it('a reservation not recorded within 5 minutes is released: the credits come back, the invocation is expired', async () => {
    const t = await tenantWith(3);
    expect(json(await serviceCheck({ deployment_id: t.deploymentId, tool_name: advanced, reserve: true, invocation_id: 'late' }))).toMatchObject({
      allowed: true,
    });
    expect(json(await serviceUsage({ deployment_id: t.deploymentId, tool_name: 'x' }))).toMatchObject({ success: false });
    h.clock.advance(4 * MINUTE + 59 * SECOND);
    expect(json(await invocationWithService(t.deploymentId, 'late'))).toMatchObject({ status: 'reserved', reserved_credits: 3 });
    expect(await available(t)).toBe(0);
    h.clock.advance(2 * SECOND);
    const status = json(await invocationWithService(t.deploymentId, 'late'));
    expect(status).toMatchObject({ invocation_id: 'late', status: 'expired', reserved_credits: 0, usage_id: null, credits_used: 0 });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 0, reserved: 0 });
    expect(await available(t)).toBe(3);
    // The credits are spendable by anyone again.
    expect(json(await serviceUsage({ deployment_id: t.deploymentId, tool_name: advanced }))).toMatchObject({ success: true, credits_used: 3 });
    await expectLedgerConsistent(t);
  });

  it('a plain check right after the hold lapsed already sees the credits (no sweeper pass needed)', async () => {
    const t = await tenantWith(3);
    expect(json(await serviceCheck({ deployment_id: t.deploymentId, tool_name: advanced, reserve: true, invocation_id: 'lapsed' })).allowed).toBe(
      true,
    );
    h.clock.advance(5 * MINUTE + SECOND);
    // docs/metering.md, Reservations: the hold lasts 5 minutes; after that the credits are spendable, and a check must say so.
    expect(json(await serviceCheck({ deployment_id: t.deploymentId, tool_name: advanced }))).toMatchObject({
      allowed: true,
      credit_cost: 3,
      credits_available: 3,
    });
    expect(json(await stdioCheck(t.apiKey, { tool_name: advanced }))).toMatchObject({ allowed: true, credit_cost: 3 });
  });

  it('an overdue reservation does not block a plain record even before anyone looks at it', async () => {
    const t = await tenantWith(1);
    expect(json(await serviceCheck({ deployment_id: t.deploymentId, tool_name: 'x', reserve: true, invocation_id: 'stale' })).allowed).toBe(true);
    h.clock.advance(5 * MINUTE + SECOND);
    expect(json(await serviceUsage({ deployment_id: t.deploymentId, tool_name: 'x' }))).toMatchObject({ success: true, credits_used: 1 });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 1, purchased_balance: 0, reserved: 0 });
    expect(json(await invocationWithService(t.deploymentId, 'stale')).status).toBe('expired');
    await expectLedgerConsistent(t);
  });

  it('recording an overdue hold the balance no longer covers frees the other lapsed holds, never its own twice', async () => {
    const t = await tenantWith(2);
    expect(json(await serviceCheck({ deployment_id: t.deploymentId, tool_name: 'x', reserve: true, invocation_id: 'squeezed' })).allowed).toBe(true);
    expect(json(await serviceCheck({ deployment_id: t.deploymentId, tool_name: 'x', reserve: true, invocation_id: 'other-hold' })).allowed).toBe(true);
    h.clock.advance(5 * MINUTE + SECOND);
    // The operator lowers the allocation to 1 while both lapsed holds still count in `reserved`: the
    // record (which spends its own hold) is short until the lapsed holds are swept. The sweep must
    // free the other hold only: its own is freed by the deduction, and freeing it twice broke the
    // balance (reserved below zero).
    await setMonthly(t.deploymentId, 1);
    const res = await serviceUsage({ deployment_id: t.deploymentId, tool_name: 'x', invocation_id: 'squeezed' });
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res)).toMatchObject({ success: true, credits_used: 1 });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 1, purchased_balance: 0, reserved: 0 });
    expect(json(await invocationWithService(t.deploymentId, 'squeezed')).status).toBe('recorded');
    expect(json(await invocationWithService(t.deploymentId, 'other-hold')).status).toBe('expired');
    await expectLedgerConsistent(t);
  });
});

describe('release', () => {
  it('with the API key: returns the credits; a second release is harmless', async () => {
    const t = await tenantWith(5);
    await serviceCheck({ deployment_id: t.deploymentId, tool_name: advanced, reserve: true, invocation_id: 'rel-1' });
    expect(await available(t)).toBe(2);
    const res = await releaseWithKey(t.apiKey, 'rel-1');
    expect(res.statusCode).toBe(200);
    expect(json(res)).toEqual({ invocation_id: 'rel-1', status: 'released', released_credits: 3 });
    expect(await available(t)).toBe(5);
    const again = await releaseWithKey(t.apiKey, 'rel-1');
    expect(again.statusCode).toBe(200);
    expect(json(again)).toEqual({ invocation_id: 'rel-1', status: 'released', released_credits: 0 });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 0, reserved: 0 });
    expect(json(await invocationWithKey(t.apiKey, 'rel-1'))).toMatchObject({ status: 'released', reserved_credits: 0 });
    await expectLedgerConsistent(t);
  });

  it('with the API key and no body at all', async () => {
    const t = await tenantWith(5);
    await stdioCheck(t.apiKey, { tool_name: 'x', reserve: true, invocation_id: 'rel-nobody' });
    const res = await h.request({ method: 'POST', url: '/api/v1/mcp/reservations/rel-nobody/release', headers: bearer(t.apiKey) });
    expect(res.statusCode).toBe(200);
    expect(json(res)).toEqual({ invocation_id: 'rel-nobody', status: 'released', released_credits: 1 });
  });

  it('with the service key and the deployment_id in the body', async () => {
    const t = await tenantWith(5);
    await serviceCheck({ deployment_id: t.deploymentId, tool_name: 'x', reserve: true, invocation_id: 'rel-svc' });
    const res = await releaseWithService(t.deploymentId, 'rel-svc');
    expect(res.statusCode).toBe(200);
    expect(json(res)).toEqual({ invocation_id: 'rel-svc', status: 'released', released_credits: 1 });
    expect(json(await releaseWithService(t.deploymentId, 'rel-svc'))).toMatchObject({ status: 'released', released_credits: 0 });
    expect(await balanceOf(t.deploymentId)).toMatchObject({ reserved: 0 });
    // The service key must say which deployment.
    const missing = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/reservations/rel-svc/release',
      headers: serviceHeaders(h),
      payload: {},
    });
    expect(missing.statusCode).toBe(400);
    expect(json(missing)).toMatchObject({ code: 'INVALID_REQUEST' });
  });

  it('after the record → 409 CONFLICT, and the record stands', async () => {
    const t = await tenantWith(5);
    await serviceCheck({ deployment_id: t.deploymentId, tool_name: 'x', reserve: true, invocation_id: 'rel-late' });
    await serviceUsage({ deployment_id: t.deploymentId, tool_name: 'x', invocation_id: 'rel-late' });
    for (const res of [await releaseWithKey(t.apiKey, 'rel-late'), await releaseWithService(t.deploymentId, 'rel-late')]) {
      expect(res.statusCode).toBe(409);
      expect(json(res)).toMatchObject({ error: 'conflict', code: 'CONFLICT' });
    }
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 1, purchased_balance: 0, reserved: 0 });
    expect(json(await invocationWithKey(t.apiKey, 'rel-late')).status).toBe('recorded');
    await expectLedgerConsistent(t);
  });

  it('of an expired reservation gives nothing back twice; of an unknown id → 404', async () => {
    const t = await tenantWith(5);
    await serviceCheck({ deployment_id: t.deploymentId, tool_name: advanced, reserve: true, invocation_id: 'rel-exp' });
    h.clock.advance(5 * MINUTE + SECOND);
    // Whether the lapsed hold is reported as expired (0 given back) or released now (3), it comes back once.
    const res = await releaseWithKey(t.apiKey, 'rel-exp');
    expect(res.statusCode).toBe(200);
    expect(json(res).invocation_id).toBe('rel-exp');
    expect([0, 3]).toContain(json(res).released_credits);
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 0, reserved: 0 });
    expect(await available(t)).toBe(5);
    const again = await releaseWithKey(t.apiKey, 'rel-exp');
    expect(again.statusCode).toBe(200);
    expect(json(again).released_credits).toBe(0);
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 0, reserved: 0 });
    const unknown = await releaseWithKey(t.apiKey, 'never-reserved');
    expect(unknown.statusCode).toBe(404);
    expect(json(unknown)).toMatchObject({ error: 'not_found', code: 'NOT_FOUND' });
    await expectLedgerConsistent(t);
  });

  it('a released invocation id may be used again for a new reservation', async () => {
    const t = await tenantWith(5);
    await serviceCheck({ deployment_id: t.deploymentId, tool_name: 'x', reserve: true, invocation_id: 'again' });
    await releaseWithService(t.deploymentId, 'again');
    expect(json(await serviceCheck({ deployment_id: t.deploymentId, tool_name: 'x', reserve: true, invocation_id: 'again' }))).toMatchObject({
      allowed: true,
      credits_available: 4,
    });
    expect(json(await invocationWithService(t.deploymentId, 'again'))).toMatchObject({ status: 'reserved', reserved_credits: 1 });
  });
});

describe('invocation status', () => {
  it('reserving a recorded invocation again is 422 naming it recorded; a refunded one, naming it refunded; nothing is held', async () => {
    const t = await tenantWith(20);
    json(await serviceUsage({ deployment_id: t.deploymentId, tool_name: advanced, invocation_id: 'again-recorded' }));
    const refunded = json(await serviceUsage({ deployment_id: t.deploymentId, tool_name: advanced, invocation_id: 'again-refunded' }));
    json(await refund(refunded.usage_id as string, { reason: 'tool crashed' }));
    for (const [id, status] of [
      ['again-recorded', 'recorded'],
      ['again-refunded', 'refunded'],
    ] as const) {
      const res = await serviceCheck({ deployment_id: t.deploymentId, tool_name: advanced, reserve: true, invocation_id: id });
      expect(res.statusCode, res.body).toBe(422);
      expect(json(res)).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED', invocation_status: status });
    }
    expect(await balanceOf(t.deploymentId)).toMatchObject({ reserved: 0 });
  });

  it('reports reserved, recorded, released, expired and refunded, to the API key and to the service key', async () => {
    const t = await tenantWith(20);
    const expiresAt = new Date(h.clock.now().getTime() + 5 * MINUTE).toISOString();
    await serviceCheck({ deployment_id: t.deploymentId, tool_name: advanced, reserve: true, invocation_id: 'st-reserved' });
    await serviceCheck({ deployment_id: t.deploymentId, tool_name: advanced, reserve: true, invocation_id: 'st-released' });
    await releaseWithKey(t.apiKey, 'st-released');
    const recorded = json(await serviceUsage({ deployment_id: t.deploymentId, tool_name: advanced, invocation_id: 'st-recorded' }));
    const refunded = json(await serviceUsage({ deployment_id: t.deploymentId, tool_name: advanced, invocation_id: 'st-refunded' }));
    expect(json(await refund(refunded.usage_id as string, { reason: 'tool crashed' }))).toMatchObject({ credits_refunded: 3 });

    const reservedView = json(await invocationWithKey(t.apiKey, 'st-reserved'));
    expect(reservedView).toMatchObject({
      invocation_id: 'st-reserved',
      deployment_id: t.deploymentId,
      status: 'reserved',
      tool_name: advanced,
      reserved_credits: 3,
      reservation_expires_at: expiresAt,
      usage_id: null,
      credits_used: 0,
      credits_refunded: 0,
    });
    expect(json(await invocationWithKey(t.apiKey, 'st-released'))).toMatchObject({ status: 'released', reserved_credits: 0, usage_id: null });
    expect(json(await invocationWithKey(t.apiKey, 'st-recorded'))).toMatchObject({
      status: 'recorded',
      usage_id: recorded.usage_id,
      credits_used: 3,
      credits_refunded: 0,
    });
    expect(json(await invocationWithKey(t.apiKey, 'st-refunded'))).toMatchObject({
      status: 'refunded',
      usage_id: refunded.usage_id,
      credits_used: 3,
      credits_refunded: 3,
    });
    // The service key sees the same, for the deployment it names.
    for (const id of ['st-reserved', 'st-released', 'st-recorded', 'st-refunded']) {
      const viaService = await invocationWithService(t.deploymentId, id);
      expect(viaService.statusCode).toBe(200);
      expect(json(viaService)).toEqual(json(await invocationWithKey(t.apiKey, id)));
    }
    h.clock.advance(5 * MINUTE + SECOND);
    expect(json(await invocationWithKey(t.apiKey, 'st-reserved'))).toMatchObject({ status: 'expired', reserved_credits: 0 });
    await expectLedgerConsistent(t);
  });

  it('an unknown id is 404; the service key without deployment_id is 400', async () => {
    const t = await tenantWith(5);
    const unknown = await invocationWithKey(t.apiKey, 'who-knows');
    expect(unknown.statusCode).toBe(404);
    expect(json(unknown)).toMatchObject({ error: 'not_found', code: 'NOT_FOUND' });
    expect((await invocationWithService(t.deploymentId, 'who-knows')).statusCode).toBe(404);
    const noDeployment = await h.request({ method: 'GET', url: '/api/v1/mcp/invocations/who-knows', headers: serviceHeaders(h) });
    expect(noDeployment.statusCode).toBe(400);
  });

  it('a denied record is reported as denied', async () => {
    const t = await tenantWith(0);
    expect(json(await serviceUsage({ deployment_id: t.deploymentId, tool_name: 'x', invocation_id: 'st-denied' }))).toMatchObject({
      success: false,
      error: 'insufficient_credits',
    });
    expect(json(await invocationWithKey(t.apiKey, 'st-denied'))).toMatchObject({ status: 'denied', usage_id: null, credits_used: 0 });
  });
});

describe('idempotency of record (docs/metering.md, Idempotency)', () => {
  it('the same invocation_id within 24 h replays; after 24 h it is a new call that deducts again', async () => {
    const t = await tenantWith(10);
    const first = await serviceUsage({ deployment_id: t.deploymentId, tool_name: 'x', invocation_id: 'daily' });
    expect(json(first)).toMatchObject({ success: true, credits_used: 1, credits_remaining: 9 });
    expect(first.headers['idempotent-replayed']).toBeUndefined();

    h.clock.advance(23 * HOUR + 59 * MINUTE);
    const replay = await serviceUsage({ deployment_id: t.deploymentId, tool_name: 'x', invocation_id: 'daily' });
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(json(replay)).toEqual(json(first));
    expect(await balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 1 });

    h.clock.advance(MINUTE + SECOND); // 24 h + 1 s after the first
    const fresh = await serviceUsage({ deployment_id: t.deploymentId, tool_name: 'x', invocation_id: 'daily' });
    expect(fresh.statusCode).toBe(200);
    expect(fresh.headers['idempotent-replayed']).toBeUndefined();
    expect(json(fresh)).toMatchObject({ success: true, credits_used: 1, credits_remaining: 8 });
    expect(json(fresh).usage_id).not.toBe(json(first).usage_id);
    expect(await balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 2 });
    expect(await ledgerKinds(t.deploymentId, 'deduct')).toHaveLength(2);

    // The new call starts a new window: a repeat now replays the second answer.
    const replay2 = await serviceUsage({ deployment_id: t.deploymentId, tool_name: 'x', invocation_id: 'daily' });
    expect(replay2.headers['idempotent-replayed']).toBe('true');
    expect(json(replay2)).toEqual(json(fresh));
    await expectLedgerConsistent(t);
  });

  it('a denied invocation (insufficient credits) may be recorded later with the same id once credits are granted', async () => {
    const t = await tenantWith(0);
    const denied = await serviceUsage({ deployment_id: t.deploymentId, tool_name: advanced, invocation_id: 'after-topup' });
    expect(json(denied)).toMatchObject({ success: false, credits_used: 0, error: 'insufficient_credits' });
    await grant(h, t.deploymentId, 5);
    const ok = await serviceUsage({ deployment_id: t.deploymentId, tool_name: advanced, invocation_id: 'after-topup' });
    expect(ok.statusCode).toBe(200);
    expect(ok.headers['idempotent-replayed']).toBeUndefined();
    expect(json(ok)).toMatchObject({ success: true, credits_used: 3, credits_remaining: 2, error: null });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 2, reserved: 0 });
    // Now it is recorded: a repeat replays and deducts nothing.
    const replay = await serviceUsage({ deployment_id: t.deploymentId, tool_name: advanced, invocation_id: 'after-topup' });
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(json(replay)).toEqual(json(ok));
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 2, reserved: 0 });
    expect(json(await invocationWithKey(t.apiKey, 'after-topup'))).toMatchObject({ status: 'recorded', credits_used: 3 });
    await expectLedgerConsistent(t);
  });

  it('a reserved call, once recorded, replays its first answer and refuses another body (the hash is kept)', async () => {
    const t = await tenantWith(10);
    const held = json(await serviceCheck({ deployment_id: t.deploymentId, tool_name: advanced, reserve: true, invocation_id: 'held-then-done' }));
    expect(held).toMatchObject({ allowed: true, credit_cost: 3, credits_available: 7 });
    const body = { deployment_id: t.deploymentId, tool_name: advanced, invocation_id: 'held-then-done', metadata: { n: 1 } };
    const first = await serviceUsage(body);
    expect(json(first)).toMatchObject({ success: true, credits_used: 3, credits_remaining: 7, error: null, invocation_id: 'held-then-done' });
    const replay = await serviceUsage(body);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(json(replay)).toEqual(json(first));
    const other = await serviceUsage({ ...body, metadata: { n: 2 } });
    expect(other.statusCode).toBe(422);
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 3, purchased_balance: 0, reserved: 0 });
    expect(json(await invocationWithKey(t.apiKey, 'held-then-done'))).toMatchObject({ status: 'recorded', credits_used: 3, reserved_credits: 0 });
    await expectLedgerConsistent(t);
  });

  it('the same id after a full day is a new call in stdio mode too', async () => {
    const t = await tenantWith(10);
    await stdioRecord(t.apiKey, { tool_name: 'x' }, { 'idempotency-key': 'stdio-daily' });
    h.clock.advance(DAY + SECOND);
    const again = await stdioRecord(t.apiKey, { tool_name: 'x' }, { 'idempotency-key': 'stdio-daily' });
    expect(again.headers['idempotent-replayed']).toBeUndefined();
    expect(json(again)).toMatchObject({ success: true, credits_remaining: 8 });
    expect(await ledgerKinds(t.deploymentId, 'deduct')).toHaveLength(2);
    await expectLedgerConsistent(t);
  });
});

describe('overdue holds never block a record', () => {
  for (const withId of [false, true]) {
    it(`a record ${withId ? 'with' : 'without'} an invocation id releases overdue holds first, and a refusal is recorded once`, async () => {
      const t = await createTenant(h, { tier: 'trial' });
      await setMonthly(t.deploymentId, 3);
      const hold = await serviceCheck({ deployment_id: t.deploymentId, tool_name: advanced, reserve: true, invocation_id: 'hog' });
      expect(json(hold).allowed).toBe(true);
      const blocked = await serviceUsage({ deployment_id: t.deploymentId, tool_name: 'x', ...(withId ? { invocation_id: 'early' } : {}) });
      expect(json(blocked)).toMatchObject({ success: false, error: 'insufficient_credits' });
      h.clock.advance(5 * MINUTE + SECOND);
      const later = await serviceUsage({ deployment_id: t.deploymentId, tool_name: 'x', ...(withId ? { invocation_id: 'late' } : {}) });
      expect(json(later)).toMatchObject({ success: true, credits_used: 1, credits_remaining: 2 });
      const failed = await h.deps.db.query<{ n: number }>('SELECT count(*)::int AS n FROM usage_records WHERE deployment_id = $1 AND NOT success', [
        t.deploymentId,
      ]);
      expect(failed[0]!.n).toBe(1);
      expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
    });
  }
});
