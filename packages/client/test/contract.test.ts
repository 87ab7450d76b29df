/**
 * The clients' shared contract (test/contract/client-contract.json), run by the TypeScript client;
 * packages/python/tests/test_contract.py runs the same table with the Python client.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { type CreditgateClient, CreditgateError, createClient } from '@creditgate/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { invocationIdFor } from '../src/mcp/identity.js';
import { adminHeaders, createTenant, type Tenant, unique } from '../../../test/harness.js';
import { type LiveService, startLiveService } from './support.js';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
interface Step {
  as: 'api_key' | 'service' | 'deployment' | 'unknown_api_key' | 'wrong_deployment_secret';
  op: string;
  args: Record<string, Json>;
  expect?: Json;
  error?: Record<string, Json>;
  save?: Record<string, string>;
}
interface Case {
  name: string;
  tenant: { tier: 'sandbox' | 'trial' | 'launch' | 'growth' | 'enterprise'; purchased?: number; monthly_credits?: number; scopes?: Array<'read' | 'write' | 'admin'> };
  tools?: Record<string, string>;
  steps: Step[];
}
interface Vector {
  tool_name: string;
  args: Json;
  idempotency_key: string;
  user_id: string | null;
  expected: string;
}
const contract = JSON.parse(readFileSync(new URL('../../../test/contract/client-contract.json', import.meta.url), 'utf8')) as {
  cases: Case[];
  invocation_ids: Vector[];
};

let live: LiveService;
beforeAll(async () => {
  live = await startLiveService({ webhookAllowPrivateNetworks: true });
});
afterAll(async () => {
  await live.close();
});

async function admin(method: 'PUT' | 'POST', url: string, payload: Record<string, unknown>): Promise<void> {
  const res = await live.h.request({ method, url, headers: adminHeaders(live.h), payload });
  expect(res.statusCode, res.body).toBe(200);
}

type Op = (c: CreditgateClient, a: Record<string, Json>) => Promise<unknown>;
const str = (v: Json | undefined) => v as string;
const opt = (v: Json | undefined) => (v === undefined ? undefined : (v as string));
/** The contract's operation names, mapped to the client's methods (args by their wire names). */
const OPS: Record<string, Op> = {
  'stdio.checkEntitlement': (c, a) => c.stdio.checkEntitlement(a as never),
  'stdio.recordUsage': (c, a) => c.stdio.recordUsage(a as never),
  'service.resolveDeployment': (c, a) => c.service.resolveDeployment(str(a.user_id)),
  'service.checkEntitlement': (c, a) => c.service.checkEntitlement(a as never),
  'service.recordUsage': (c, a) => c.service.recordUsage(a as never),
  'service.creditCosts': (c) => c.service.creditCosts(),
  releaseReservation: (c, a) => c.releaseReservation(str(a.invocation_id), { deploymentId: opt(a.deployment_id) }),
  getInvocation: (c, a) => c.getInvocation(str(a.invocation_id), { deploymentId: opt(a.deployment_id) }),
  refundUsage: (c, a) => {
    const { usage_id, ...input } = a;
    return c.refundUsage(str(usage_id), input as never);
  },
  'entitlements.check': (c, a) => c.entitlements.check({ forceRefresh: a.force_refresh === true }),
  'ai.quota': (c) => c.ai.quota(),
  'webhooks.quota': (c) => c.webhooks.quota(),
  'webhooks.send': (c, a) => c.webhooks.send(a as never),
  'budgets.list': (c, a) => c.budgets.list(str(a.organization_id)),
  'budgets.create': (c, a) => {
    const { organization_id, ...input } = a;
    return c.budgets.create(str(organization_id), input as never);
  },
  'budgets.get': (c, a) => c.budgets.get(str(a.organization_id), str(a.budget_id)),
  'budgets.update': (c, a) => {
    const { organization_id, budget_id, ...input } = a;
    return c.budgets.update(str(organization_id), str(budget_id), input as never);
  },
  'budgets.delete': (c, a) => c.budgets.delete(str(a.organization_id), str(a.budget_id)),
};

function substitute(value: Json, vars: Map<string, Json>): Json {
  if (typeof value === 'string' && value.startsWith('$') && vars.has(value.slice(1))) return vars.get(value.slice(1))!;
  if (Array.isArray(value)) return value.map((v) => substitute(v, vars));
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, substitute(v, vars)]));
  return value;
}

/** The contract's matcher: objects as subsets, "$string", {"$contains": x}; the same rules as test_contract.py. */
function matches(actual: unknown, expected: Json, path: string): string[] {
  if (expected === '$string') return typeof actual === 'string' && actual !== '' ? [] : [`${path}: expected a string, got ${JSON.stringify(actual)}`];
  if (expected !== null && typeof expected === 'object' && !Array.isArray(expected)) {
    if ('$contains' in expected) {
      const ok = Array.isArray(actual) && actual.some((item) => matches(item, expected.$contains!, path).length === 0);
      return ok ? [] : [`${path}: no element matches ${JSON.stringify(expected.$contains)}`];
    }
    if (actual === null || typeof actual !== 'object') return [`${path}: expected an object, got ${JSON.stringify(actual)}`];
    return Object.entries(expected).flatMap(([k, v]) => matches((actual as Record<string, unknown>)[k], v, `${path}.${k}`));
  }
  return JSON.stringify(actual) === JSON.stringify(expected) ? [] : [`${path}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`];
}

const camel = (key: string) => key.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());

async function setUp(c: Case): Promise<{ tenant: Tenant; vars: Map<string, Json> }> {
  const tenant = await createTenant(live.h, { tier: c.tenant.tier, purchased: c.tenant.purchased, scopes: c.tenant.scopes });
  if (c.tenant.monthly_credits !== undefined) {
    await admin('PUT', `/api/v1/admin/deployments/${tenant.deploymentId}/overrides`, { monthly_credits: c.tenant.monthly_credits });
  }
  const vars = new Map<string, Json>([
    ['id', `contract-${randomUUID()}`],
    ['deployment_id', tenant.deploymentId],
    ['organization_id', tenant.organizationId],
    ['user_id', tenant.userId],
  ]);
  for (const [name, action] of Object.entries(c.tools ?? {})) {
    const tool = unique(`contract-${name}`);
    await admin('PUT', `/api/v1/admin/tool-actions/${tool}`, { action });
    vars.set(`tool.${name}`, tool);
  }
  return { tenant, vars };
}

function clientFor(as: Step['as'], t: Tenant): CreditgateClient {
  const options = { baseUrl: live.baseUrl, retries: 0, cache: false as const };
  switch (as) {
    case 'api_key':
      return createClient({ apiKey: t.apiKey }, options);
    case 'service':
      return createClient({ serviceKey: live.h.config.mcpServiceKey }, options);
    case 'deployment':
      return createClient({ deploymentId: t.deploymentId, deploymentSecret: t.deploymentSecret }, options);
    case 'unknown_api_key':
      return createClient({ apiKey: `cg_${'A'.repeat(36)}` }, options);
    case 'wrong_deployment_secret':
      return createClient({ deploymentId: t.deploymentId, deploymentSecret: `${t.deploymentSecret}x` }, options);
  }
}

describe('client contract (test/contract/client-contract.json)', () => {
  it.each(contract.cases.map((c) => [c.name, c] as const))('%s', async (_name, c) => {
    const { tenant, vars } = await setUp(c);
    for (const [index, step] of c.steps.entries()) {
      const what = `step ${index + 1} ${step.op}`;
      const op = OPS[step.op];
      expect(op, `unknown op ${step.op}`).toBeDefined();
      const args = substitute(step.args, vars) as Record<string, Json>;
      const outcome = await op!(clientFor(step.as, tenant), args).then(
        (value) => ({ value }),
        (error: unknown) => ({ error }),
      );
      if (step.error) {
        expect('error' in outcome, `${what}: expected ${String(step.error.code)}, got an answer`).toBe(true);
        const err = (outcome as { error: unknown }).error;
        expect(err).toBeInstanceOf(CreditgateError);
        const fields = Object.fromEntries(Object.entries(step.error).map(([k, v]) => [camel(k), v]));
        expect(matches(err, substitute(fields, vars), what)).toEqual([]);
        continue;
      }
      if ('error' in outcome) throw outcome.error;
      expect(matches(outcome.value, substitute(step.expect ?? {}, vars), what)).toEqual([]);
      for (const [name, field] of Object.entries(step.save ?? {})) vars.set(name, (outcome.value as Record<string, Json>)[field]!);
    }
  });

  it('derives the idempotent invocation id of every vector', () => {
    for (const v of contract.invocation_ids) {
      const extra = { _meta: { 'io.creditgate/idempotency-key': v.idempotency_key } } as unknown as Parameters<typeof invocationIdFor>[2];
      expect(invocationIdFor(v.tool_name, v.args ?? undefined, extra, v.user_id ?? undefined), v.tool_name).toBe(v.expected);
    }
  });
});
