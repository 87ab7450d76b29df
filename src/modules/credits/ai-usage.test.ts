import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { createPassesHarness, createTenant, type Harness, type Tenant } from '../../../test/harness.js';
import type { Ctx } from '../../context.js';
import { AppError } from '../../errors.js';
import { type AiHoldInput, expireAiHolds, holdAiTokens, releaseAiHold, settleAiTokens } from './ai-usage.js';
import { findLedgerMismatches } from './ledger.js';
import { reserveInvocation } from './invocations.js';

/**
 * The AI proxy (docs/ai-proxy.md), the money side without the HTTP: holds of prompt + allowance against the period's
 * tokens then purchased credits, the allowance shrunk to what can be paid, settles and releases, the
 * worker that gives back holds of dead calls, and the other spenders kept off held credits.
 * (trial: 1,000 AI tokens a period; standard class: 1 credit per 1,000 tokens, premium: 10.)
 */
let h: Harness;

beforeAll(async () => {
  // expireAiHolds below sweeps every tenant's holds: a database of its own (createPassesHarness).
  h = await createPassesHarness();
});
afterAll(async () => {
  await h.close();
});
const fixtures = creditFixtures(() => h);

const ctxFor = (t: Tenant): Ctx => ({ ...h.ctx, actor: { type: 'deployment', deploymentId: t.deploymentId, organizationId: t.organizationId } });
const dep = (t: Tenant) => ({ id: t.deploymentId, organization_id: t.organizationId });
/** A reservation of 1 credit, as check-entitlement with reserve:true makes it. */
const mcpHold = (t: Tenant) =>
  reserveInvocation(ctxFor(t), { deployment_id: t.deploymentId, organization_id: t.organizationId }, { cost: 1, toolName: 'search', invocationId: randomUUID() });
const HOUR = 60 * 60 * 1000;

function hold(t: Tenant, input: Partial<AiHoldInput> & { promptTokens: number; outputPerChoice: number }) {
  return holdAiTokens(ctxFor(t), dep(t), {
    model: 'gpt-4o-mini',
    modelClass: 'standard',
    choices: 1,
    expiresAt: new Date(h.clock.now().getTime() + HOUR),
    ...input,
  });
}

function settle(t: Tenant, holdId: string, inputTokens: number, outputTokens: number, estimated = false) {
  return settleAiTokens(ctxFor(t), dep(t), { model: 'gpt-4o-mini', modelClass: 'standard', holdId, inputTokens, outputTokens, estimated });
}

async function balance(t: Tenant) {
  const rows = await h.deps.db.query<{
    ai_tokens_used: number;
    ai_tokens_over_limit: number;
    ai_tokens_reserved: number;
    ai_credits_reserved: number;
    reserved: number;
    purchased_balance: number;
  }>(
    `SELECT ai_tokens_used, ai_tokens_over_limit, ai_tokens_reserved, ai_credits_reserved, reserved, purchased_balance
     FROM credit_balances WHERE deployment_id = $1`,
    [t.deploymentId],
  );
  return rows[0]!;
}

async function expectLedgerConsistent(t: Tenant): Promise<void> {
  expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
}

async function refused(promise: Promise<unknown>): Promise<AppError> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(AppError);
  return err as AppError;
}

describe('holding before the call', () => {
  it('holds prompt + allowance from the quota, and a second call sees only what is left', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const first = await hold(t, { promptTokens: 100, outputPerChoice: 500 });
    expect(first).toMatchObject({ outputPerChoice: 500, tokensHeld: 600, creditsHeld: 0 });
    // 400 tokens left: the second call's allowance shrinks to what is free after its prompt.
    const second = await hold(t, { promptTokens: 100, outputPerChoice: 500 });
    expect(second).toMatchObject({ outputPerChoice: 300, tokensHeld: 400, creditsHeld: 0 });
    const err = await refused(hold(t, { promptTokens: 1, outputPerChoice: 10 }));
    expect(err.code).toBe('AI_QUOTA_EXCEEDED');
    // Held by the two calls in progress, not used up: a retry once they finish can succeed, so no
    // `x-should-retry: false` (docs/ai-proxy.md, Errors); the period's reset is still named.
    expect(err.message).toMatch(/1000 tokens are held by AI calls in progress/);
    expect(err.headers).toEqual({});
    expect(err.extra.resets_at).toEqual(expect.any(String));
    expect(await balance(t)).toMatchObject({ ai_tokens_reserved: 1000, ai_tokens_used: 0, reserved: 0 });
  });

  it('past the quota the allowance is paid for with purchased credits at the class rate, held from purchased only', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 3 });
    // 1,000 quota tokens + 3 premium credits = 300 tokens: 1,300 tokens can be paid in all.
    const held = await hold(t, { promptTokens: 200, outputPerChoice: 5000, modelClass: 'premium' });
    expect(held).toMatchObject({ outputPerChoice: 1100, tokensHeld: 1000, creditsHeld: 3 });
    expect(await balance(t)).toMatchObject({ ai_tokens_reserved: 1000, ai_credits_reserved: 3, reserved: 3, purchased_balance: 3 });
    // Held credits are not spendable by anyone else: with the monthly bucket empty, an MCP hold of 1 is refused.
    await fixtures.setMonthly(t.deploymentId, 0);
    expect(await mcpHold(t)).toMatchObject({ held: false });
    await releaseAiHold(h.deps.db, t.deploymentId, held.id, h.clock.now());
    expect(await mcpHold(t)).toMatchObject({ held: true });
  });

  it('each of n choices may use the allowance, so n multiplies what is held', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const held = await hold(t, { promptTokens: 100, outputPerChoice: 1000, choices: 3 });
    expect(held).toMatchObject({ outputPerChoice: 300, tokensHeld: 1000 });
  });

  it('an embedding holds its input alone and is refused only when the input cannot be paid', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    expect(await hold(t, { promptTokens: 1000, outputPerChoice: 0 })).toMatchObject({ outputPerChoice: 0, tokensHeld: 1000 });
    expect((await refused(hold(t, { promptTokens: 1, outputPerChoice: 0 }))).code).toBe('AI_QUOTA_EXCEEDED');
  });

  it('an unlimited tier holds nothing and keeps the allowance asked for', async () => {
    const t = await createTenant(h, { tier: 'enterprise' });
    expect(await hold(t, { promptTokens: 10, outputPerChoice: 100_000 })).toMatchObject({ outputPerChoice: 100_000, tokensHeld: 0, creditsHeld: 0 });
  });
});

describe('settling and releasing', () => {
  it('settles to the reported usage and gives the rest back; the same hold never counts twice', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const held = await hold(t, { promptTokens: 100, outputPerChoice: 500 });
    const r = await settle(t, held.id, 110, 40);
    expect(r).toMatchObject({ tokens: 150, tokensOverLimit: 0, creditsCharged: 0, used: 150, remaining: 850, replayed: false });
    expect(await balance(t)).toMatchObject({ ai_tokens_used: 150, ai_tokens_reserved: 0 });
    expect((await settle(t, held.id, 110, 40)).replayed).toBe(true);
    expect(await balance(t)).toMatchObject({ ai_tokens_used: 150, ai_tokens_reserved: 0 });
    const usage = await h.deps.db.query<{ tool_name: string; metadata: Record<string, unknown> }>(
      `SELECT tool_name, metadata FROM usage_records WHERE deployment_id = $1 AND metric = 'ai_tokens'`,
      [t.deploymentId],
    );
    expect(usage).toEqual([{ tool_name: 'gpt-4o-mini', metadata: expect.objectContaining({ input_tokens: 110, output_tokens: 40, estimated: false }) }]);
  });

  it('tokens past the quota are charged at the rate, with a ledger row, and held credits come back', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 10 });
    const held = await hold(t, { promptTokens: 500, outputPerChoice: 2000 });
    expect(held).toMatchObject({ tokensHeld: 1000, creditsHeld: 2 });
    const r = await settle(t, held.id, 500, 1200);
    expect(r).toMatchObject({ tokens: 1700, tokensOverLimit: 700, creditsDue: 1, creditsCharged: 1 });
    expect(await balance(t)).toMatchObject({ ai_tokens_used: 1700, ai_tokens_over_limit: 700, reserved: 0, ai_credits_reserved: 0, purchased_balance: 9 });
    await expectLedgerConsistent(t);
  });

  it('a call that settles while another holds the last quota tokens pays with credits, not the other call\'s tokens', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 5 });
    const a = await hold(t, { promptTokens: 100, outputPerChoice: 900 }); // all 1,000 quota tokens
    const b = await hold(t, { promptTokens: 100, outputPerChoice: 900 }); // paid with 1 credit
    expect(a).toMatchObject({ tokensHeld: 1000, creditsHeld: 0 });
    expect(b).toMatchObject({ tokensHeld: 0, creditsHeld: 1 });
    expect((await settle(t, b.id, 100, 900)).creditsCharged).toBe(1);
    expect((await settle(t, a.id, 100, 900)).creditsCharged).toBe(0);
    expect(await balance(t)).toMatchObject({ ai_tokens_used: 2000, ai_tokens_over_limit: 1000, purchased_balance: 4, reserved: 0, ai_tokens_reserved: 0 });
    await expectLedgerConsistent(t);
  });

  it('a release gives everything back and charges nothing; a released hold settles without giving back twice', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 2 });
    const held = await hold(t, { promptTokens: 100, outputPerChoice: 1500 });
    expect(await releaseAiHold(h.deps.db, t.deploymentId, held.id, h.clock.now())).toBe(true);
    expect(await releaseAiHold(h.deps.db, t.deploymentId, held.id, h.clock.now())).toBe(false);
    expect(await balance(t)).toMatchObject({ ai_tokens_used: 0, ai_tokens_reserved: 0, ai_credits_reserved: 0, reserved: 0, purchased_balance: 2 });
    const usage = await h.deps.db.query('SELECT 1 FROM usage_records WHERE deployment_id = $1', [t.deploymentId]);
    expect(usage).toHaveLength(0);
  });

  it('the worker gives back holds of calls that died, only once they expire', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 2 });
    const held = await hold(t, { promptTokens: 100, outputPerChoice: 1500 });
    expect(await expireAiHolds(h.deps.db, h.clock.now())).toBe(0);
    expect(await balance(t)).toMatchObject({ ai_tokens_reserved: 1000, ai_credits_reserved: 1 });
    h.clock.advance(HOUR + 1000);
    expect(await expireAiHolds(h.deps.db, h.clock.now())).toBeGreaterThanOrEqual(1);
    expect(await balance(t)).toMatchObject({ ai_tokens_reserved: 0, ai_credits_reserved: 0, reserved: 0 });
    // A late settle of that call still counts its tokens, and gives back nothing a second time.
    const r = await settle(t, held.id, 100, 50);
    expect(r.tokens).toBe(150);
    expect(await balance(t)).toMatchObject({ ai_tokens_used: 150, ai_tokens_reserved: 0, reserved: 0 });
  });

  it('an estimated settle is marked so on the usage record', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const held = await hold(t, { promptTokens: 20, outputPerChoice: 100 });
    expect((await settle(t, held.id, 20, 7, true)).estimated).toBe(true);
    const rows = await h.deps.db.query<{ metadata: { estimated: boolean } }>('SELECT metadata FROM usage_records WHERE invocation_id = $1', [held.id]);
    expect(rows[0]!.metadata.estimated).toBe(true);
  });
});

describe('under concurrency', () => {
  it('50 concurrent calls against a quota that covers 10: never more tokens than the limit plus what credits paid', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 2 });
    // Each call: prompt 50 + 50 output = 100 tokens. Quota 1,000 → 10 calls; past it each call costs
    // 1 credit (rounded up per call), so 2 credits → 2 more calls, and the other 38 are refused.
    const outcomes = await Promise.allSettled(
      Array.from({ length: 50 }, async () => {
        const held = await hold(t, { promptTokens: 50, outputPerChoice: 50 });
        return settle(t, held.id, 50, held.outputPerChoice);
      }),
    );
    const settled = outcomes.filter((o) => o.status === 'fulfilled').map((o) => (o as PromiseFulfilledResult<{ tokens: number; creditsCharged: number }>).value);
    const refusedCalls = outcomes.filter((o) => o.status === 'rejected');
    for (const r of refusedCalls) expect(((r as PromiseRejectedResult).reason as AppError).code).toBe('AI_QUOTA_EXCEEDED');
    const tokens = settled.reduce((n, r) => n + r.tokens, 0);
    const paid = settled.reduce((n, r) => n + r.creditsCharged, 0);
    expect(tokens).toBeLessThanOrEqual(1000 + paid * 1000);
    expect(paid).toBeLessThanOrEqual(2);
    expect(tokens).toBe(1200);
    expect(refusedCalls).toHaveLength(38);
    const b = await balance(t);
    expect(b).toMatchObject({ ai_tokens_used: tokens, ai_tokens_reserved: 0, reserved: 0, purchased_balance: 2 - paid });
    await expectLedgerConsistent(t);
  });
});
