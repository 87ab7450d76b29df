import { Writable } from 'node:stream';
import fc from 'fast-check';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { usesFlatShape } from '../src/http/route-prefixes.js';
import { createApiKey } from '../src/modules/api-keys/service.js';
import { createOrganization } from '../src/modules/organizations/service.js';
import { adminHeaders, bearer, createHarness, grant, type Harness, serviceHeaders, signUp, unique } from './harness.js';
import { fuzzRequest, type Poison, type SchemaNode } from './fuzz-requests.js';

/**
 * Property-based fuzzing of every operation in /openapi.json (docs/input.md: no input reaches a 5xx).
 * Each request carries valid credentials for its route and at least one defect that makes it invalid
 * by construction (NUL or a lone surrogate somewhere, JSON nested too deep, a non-UUID id, a wrong
 * type, a missing or unknown field, a value out of range), on top of random noise: wrong types, huge
 * and negative numbers, empty, over-long and random-unicode strings. Because every request is invalid,
 * none may spend or grant: the fuzz tenant's balances must be byte-identical afterwards. That is also
 * why fully valid bodies are never generated (a random valid usage or grant would change them).
 * Replay a failure with FUZZ_SEED=<the printed seed>; FUZZ_RUNS sets the runs per operation.
 */
const SEED = Number(process.env.FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 31));
const RUNS = Number(process.env.FUZZ_RUNS ?? 12);

type Operation = {
  method: string;
  path: string;
  auth: string;
  parameters?: Array<{ in: string; name: string; required?: boolean; schema?: SchemaNode }>;
  requestBody?: { content?: Record<string, { schema?: SchemaNode }> };
};

let h: Harness;
/** The app under fuzz: the harness's database and clock, its warnings and errors kept in `logs`. */
let app: FastifyInstance;
let logs = '';
const operations: Operation[] = [];
let credentials: Record<string, Array<Record<string, string>>> = {};
let knownIds: Record<string, string> = {};
let deploymentId = '';

/** The fuzz tenant: an enterprise deployment (no minute limit) of an enterprise-plan organization (100,000 an hour), so few answers are 429s. */
beforeAll(async () => {
  h = await createHarness();
  const logStream = new Writable({
    write(chunk, _encoding, done) {
      logs += chunk.toString();
      done();
    },
  });
  app = await buildApp({ config: { ...h.config, logLevel: 'warn' }, db: h.deps.db, clock: h.clock, logStream });
  await app.ready();
  const owner = await signUp(h, 'Fuzz Owner');
  const slug = unique('fuzz').toLowerCase().replace(/[^a-z0-9-]/g, '-');
  const { organization, deployment, deploymentSecret } = await createOrganization(h.ctx, {
    name: 'Fuzz',
    slug,
    plan: 'enterprise',
    ownerUserId: owner.userId,
    tier: 'enterprise',
  });
  deploymentId = deployment.id;
  await grant(h, deploymentId, 100);
  const { key, apiKey } = await createApiKey(h.ctx, { organizationId: organization.id, name: 'fuzz', scopes: ['read', 'write', 'admin'] });
  const deploymentCreds = { 'x-deployment-id': deployment.id, 'x-deployment-secret': deploymentSecret };
  credentials = {
    public: [{}],
    apiKey: [bearer(key)],
    service: [serviceHeaders(h)],
    apiKeyOrService: [bearer(key), serviceHeaders(h)],
    admin: [adminHeaders(h)],
    metrics: [adminHeaders(h)],
    deployment: [deploymentCreds],
    deploymentOrApiKey: [bearer(key), deploymentCreds],
    user: [bearer(owner.accessToken)],
    account: [bearer(owner.accessToken), bearer(key), { 'x-api-key': key }],
  };
  // Path ids name the tenant's own rows, so a request gets as far as it can before its defect stops it.
  knownIds = { id: organization.id, org_id: organization.id, userId: owner.userId, depId: deployment.id, keyId: apiKey.id };
  const doc = (await app.inject({ method: 'GET', url: '/openapi.json' })).json() as { paths: Record<string, Record<string, Operation>> };
  for (const [path, byMethod] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(byMethod)) {
      const url = path.replace(/\{([^}]+)\}/g, ':$1');
      const route = app.routeList.find((r) => r.url === url && r.method === method.toUpperCase());
      operations.push({ ...op, method: method.toUpperCase(), path, auth: route?.auth ?? 'public' });
    }
  }
  console.log(`fuzz: seed ${SEED} (replay with FUZZ_SEED=${SEED}), ${RUNS} runs on each of ${operations.length} operations`);
});

afterAll(async () => {
  await app?.close();
  await h?.close();
});

/** The fuzz tenant's balances and everything spending writes, as one string to compare byte for byte. */
async function snapshot(): Promise<string> {
  const balances = await h.deps.db.query(
    `SELECT deployment_id, period_start, period_end, monthly_allocation, monthly_used, purchased_balance, reserved, ai_tokens_used, purchased_consumed
     FROM credit_balances WHERE deployment_id = $1`,
    [deploymentId],
  );
  const written = await h.deps.db.query(
    `SELECT (SELECT count(*)::int FROM credit_ledger WHERE deployment_id = $1) AS ledger,
       (SELECT count(*)::int FROM usage_records WHERE deployment_id = $1) AS usage,
       (SELECT count(*)::int FROM invocations WHERE deployment_id = $1) AS invocations,
       (SELECT count(*)::int FROM webhook_deliveries WHERE deployment_id = $1) AS deliveries,
       (SELECT count(*)::int FROM credit_grants WHERE deployment_id = $1) AS grants`,
    [deploymentId],
  );
  return JSON.stringify({ balances, written });
}

/** What no answer may carry: stack frames, paths of the code, SQL or the database's words. */
const LEAK = /\n\s+at |\bat [\w$.<>]+ \(|node_modules|\.ts:\d+|syntax error|relation "|violates|invalid input syntax|duplicate key|SQLSTATE|invalid byte sequence|unsupported Unicode|stack depth/i;

const OPENAI_SHAPED = /^\/api\/v1\/ai\/(chat\/completions|embeddings|responses|models(\/[^?]*)?)(\?|$)/;
/** A model the proxy does not offer is 404 `model_not_found` in the OpenAI shape too (docs/ai-proxy.md, Routes). */
const OPENAI_NOT_FOUND = /^\/api\/v1\/ai\/models\/[^?]+/;

function judge(poison: Poison, url: string, res: { statusCode: number; body: string }): void {
  const what = `${poison.kind} in ${poison.part}.${poison.name}: ${res.statusCode} ${res.body.slice(0, 400)}`;
  expect(res.statusCode, what).toBeLessThan(500);
  expect(res.body, what).not.toMatch(LEAK);
  if (poison.kind === 'none' && res.statusCode < 400) return;
  // A request with a defect is invalid, so it may not succeed; a 429 is a fair answer but the fuzz tier avoids most.
  expect(res.statusCode, what).toBeGreaterThanOrEqual(400);
  const body = JSON.parse(res.body) as Record<string, unknown>;
  // The AI proxy's routes answer a bad request in the OpenAI error shape (docs/ai-proxy.md), for the OpenAI SDKs.
  // A path that cannot be decoded reaches no route, so no route's shape: the flat one.
  const routed = poison.kind !== 'bad-encoding';
  const openAi = routed && ((res.statusCode === 400 && OPENAI_SHAPED.test(url)) || (res.statusCode === 404 && OPENAI_NOT_FOUND.test(url)));
  if (openAi) {
    expect(body, what).toMatchObject({ error: { message: expect.any(String), type: 'invalid_request_error', code: expect.any(String) } });
  } else if (usesFlatShape(url)) {
    expect(body, what).toMatchObject({ error: expect.any(String), code: expect.any(String), message: expect.any(String) });
    expect(body, what).not.toHaveProperty('success');
  } else {
    expect(body, what).toMatchObject({ success: false, error: { code: expect.any(String), message: expect.any(String) } });
    expect((body.details as { timestamp?: unknown } | undefined)?.timestamp, what).toEqual(expect.any(String));
  }
  if (res.statusCode === 429 || poison.status === undefined) return;
  expect(res.statusCode, what).toBe(poison.status);
  if (poison.field) {
    const where = openAi ? (body.error as { fields?: unknown }) : usesFlatShape(url) ? body : (body.details as { fields?: unknown });
    const fields = (where.fields ?? []) as Array<{ field: string }>;
    expect(fields.map((f) => f.field), what).toContain(poison.field);
  }
}

/**
 * Without a defect a request may be valid, so only operations where a valid request cannot spend,
 * grant or lock the fuzz tenant out get noise alone: reads, and writes of names and profiles. These
 * reach the handlers and the database with random values, where the defect-carrying requests stop early.
 */
const SAFE_WRITES = new Set(['PUT /auth/me', 'POST /organizations', 'POST /api/organizations', 'PUT /organizations/{id}', 'POST /organizations/{id}/api-keys']);
const isSafe = (op: Operation) => op.method === 'GET' || SAFE_WRITES.has(`${op.method} ${op.path}`);

/** Answers by status, printed after each run so a reader sees how many were judged (and how few were 429s). */
async function fuzz(ops: Operation[], defect: boolean, offset: number): Promise<void> {
  const tally: Record<number, number> = {};
  for (const [index, op] of ops.entries()) {
    const arbitrary = fuzzRequest(op, { credentials: credentials[op.auth] ?? [{}], knownIds, deploymentId }, defect);
    await fc.assert(
      fc.asyncProperty(arbitrary, async (req) => {
        const logged = logs.length;
        const res = await app.inject({ method: req.method as 'GET', url: req.url, headers: req.headers, payload: req.payload });
        tally[res.statusCode] = (tally[res.statusCode] ?? 0) + 1;
        judge(req.poison, req.url, res);
        // The error handler's safety net (a RangeError or a database refusal turned into a 400) must not be what answered.
        expect(logs.slice(logged), req.url).not.toMatch(/should have refused|unhandled error/);
      }),
      { numRuns: RUNS, seed: SEED + offset + index, endOnFailure: true },
    );
  }
  console.log(`fuzz (${defect ? 'with a defect' : 'noise alone'}): answers by status ${JSON.stringify(tally)}`);
}

describe('fuzzing every operation in /openapi.json (the seed is printed; FUZZ_SEED replays)', () => {
  it('a request with a defect: never 5xx, nothing leaked, the documented 4xx shape, status and field, and no balance moves', async () => {
    expect(operations.length).toBeGreaterThan(40);
    const before = await snapshot();
    await fuzz(operations, true, 0);
    expect(await snapshot()).toBe(before);
  }, 120_000);

  it('noise alone on the reads and the harmless writes: never 5xx, nothing leaked, errors in the documented shape, no balance moves', async () => {
    const safe = operations.filter(isSafe);
    expect(safe.length).toBeGreaterThan(20);
    const before = await snapshot();
    await fuzz(safe, false, 10_000);
    expect(await snapshot()).toBe(before);
  }, 120_000);
});
