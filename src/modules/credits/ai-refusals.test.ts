import { createOpenAI } from '@ai-sdk/openai';
import { APICallError, generateText } from 'ai';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type StandIn, startOpenAiStandIn } from '../../../test/ai-stand-in/index.js';
import { adminHeaders, createHarness, createTenant, type Harness, json, type Tenant } from '../../../test/harness.js';

/**
 * docs/ai-proxy.md, "Refusals that waiting cannot cure", replayed with the official `openai` SDK at its
 * default of two retries. Before, an exhausted quota answered `Retry-After: 2591953` (30 days): the SDK
 * slept that long in a Node timer, which overflows (TimeoutOverflowWarning, fires after 1 ms), so it
 * asked twice more at once. Now the refusal says `x-should-retry: false`, names `resets_at`, and sends
 * Retry-After only within the hour before it; rate-limit 429s keep their short Retry-After.
 * (trial tier; an operator override sets the AI token limit.)
 */
const START = '2026-01-15T12:00:00.000Z';
let standIn: StandIn;
let h: Harness;
let base: string;
/** Requests that reached the service's HTTP server, by path prefix. */
let aiRequests = 0;
let warnings: Error[] = [];
const onWarning = (w: Error) => warnings.push(w);

beforeAll(async () => {
  standIn = await startOpenAiStandIn({ apiKey: 'sk-upstream' });
  h = await createHarness({ aiBaseUrl: standIn.url, aiApiKey: 'sk-upstream', aiModels: ['gpt-4o-mini', 'text-embedding-3-small'] }, START);
  await h.app.listen({ port: 0, host: '127.0.0.1' });
  base = `http://127.0.0.1:${(h.app.server.address() as { port: number }).port}`;
  // Fastify answers through its own 'request' listener; this one only counts what arrives.
  h.app.server.on('request', (req: { url?: string }) => {
    if (req.url?.startsWith('/api/v1/ai/') || req.url?.startsWith('/api/ai/')) aiRequests++;
  });
});
afterAll(async () => {
  await h?.close();
  await standIn?.close();
});
beforeEach(() => {
  warnings = [];
  process.on('warning', onWarning);
});
afterEach(() => {
  process.off('warning', onWarning);
  h.clock.set(START);
});

/** The SDK as users make it: its default retries (2), not the tests' usual maxRetries: 0. */
const sdk = (t: Tenant) => new OpenAI({ baseURL: `${base}/api/v1/ai`, apiKey: t.apiKey });
const hi = [{ role: 'user' as const, content: 'hi' }];

async function overrides(t: Tenant, payload: Record<string, unknown>): Promise<void> {
  const res = await h.request({ method: 'PUT', url: `/api/v1/admin/deployments/${t.deploymentId}/overrides`, headers: adminHeaders(h), payload });
  expect(res.statusCode, res.body).toBe(200);
}

async function exhausted(): Promise<Tenant> {
  const t = await createTenant(h, { tier: 'trial' });
  await overrides(t, { ai_tokens_limit: 0 });
  return t;
}

async function resetsAt(t: Tenant): Promise<string> {
  const res = await h.request({ method: 'GET', url: '/api/v1/ai/quota', headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret } });
  expect(res.statusCode, res.body).toBe(200);
  return json(res).resets_at as string;
}

/** Runs one SDK call that must be refused: its error, and how many requests reached the service. */
async function refusedOnce(call: () => Promise<unknown>): Promise<{ err: InstanceType<typeof OpenAI.APIError>; reached: number }> {
  const before = aiRequests;
  const upstreamBefore = standIn.requests.length;
  const err = await call().then(
    () => {
      throw new Error('expected a refusal');
    },
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(OpenAI.APIError);
  expect(standIn.requests.length).toBe(upstreamBefore);
  return { err: err as InstanceType<typeof OpenAI.APIError>, reached: aiRequests - before };
}

const overflowWarnings = () => warnings.filter((w) => w.name === 'TimeoutOverflowWarning');

describe('an exhausted AI quota with nothing purchased', () => {
  it('chat, stream and embeddings: one request each, a 429 APIError, no Retry-After a month out, no TimeoutOverflowWarning', async () => {
    const t = await exhausted();
    const client = sdk(t);
    const calls: Array<[string, () => Promise<unknown>]> = [
      ['chat', () => client.chat.completions.create({ model: 'gpt-4o-mini', messages: hi })],
      ['stream', () => client.chat.completions.create({ model: 'gpt-4o-mini', messages: hi, stream: true })],
      ['embeddings', () => client.embeddings.create({ model: 'text-embedding-3-small', input: 'hi' })],
    ];
    const resets = await resetsAt(t);
    for (const [what, call] of calls) {
      const { err, reached } = await refusedOnce(call);
      expect(reached, what).toBe(1);
      expect(err.status, what).toBe(429);
      expect(err.error, what).toBe('quota_exceeded');
      expect(err.headers?.get('x-should-retry'), what).toBe('false');
      expect(err.headers?.get('retry-after'), what).toBeNull();
    }
    expect(overflowWarnings()).toEqual([]);
    const raw = await fetch(`${base}/api/v1/ai/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: hi }),
    });
    expect(raw.status).toBe(429);
    expect(await raw.json()).toMatchObject({ error: 'quota_exceeded', code: 'AI_QUOTA_EXCEEDED', quota_exceeded: true, resets_at: resets });
  });

  it('within the hour before resets_at, Retry-After is the seconds until it, rounded up; still one request', async () => {
    const t = await exhausted();
    const resets = new Date(await resetsAt(t));
    h.clock.set(resets.getTime() - 1_800_500);
    const { err, reached } = await refusedOnce(() => sdk(t).chat.completions.create({ model: 'gpt-4o-mini', messages: hi }));
    expect(reached).toBe(1);
    expect(err.status).toBe(429);
    expect(err.headers?.get('x-should-retry')).toBe('false');
    expect(err.headers?.get('retry-after')).toBe('1801');
    expect(overflowWarnings()).toEqual([]);
  });

  it('/api/ai/generate answers the envelope with details.resets_at and x-should-retry: false', async () => {
    const t = await exhausted();
    const res = await h.request({ method: 'POST', url: '/api/ai/generate', headers: { authorization: `Bearer ${t.apiKey}` }, payload: { prompt: 'x', max_tokens: 3 } });
    expect(res.statusCode).toBe(429);
    expect(res.headers['x-should-retry']).toBe('false');
    expect(res.headers['retry-after']).toBeUndefined();
    expect(json(res)).toMatchObject({ success: false, error: { code: 'AI_QUOTA_EXCEEDED' }, details: { resets_at: await resetsAt(t), quota_exceeded: true } });
  });
});

describe('the Vercel AI SDK', () => {
  it('retries every 429 whatever the headers: with maxRetries: 0 (what docs/ai-proxy.md tells its users) it asks once', async () => {
    const t = await exhausted();
    const provider = createOpenAI({ baseURL: `${base}/api/v1/ai`, apiKey: t.apiKey });
    const before = aiRequests;
    const err = await generateText({ model: provider.chat('gpt-4o-mini'), prompt: 'hi', maxRetries: 0 }).then(
      () => {
        throw new Error('expected a refusal');
      },
      (e: unknown) => e,
    );
    expect(aiRequests - before).toBe(1);
    expect(APICallError.isInstance(err)).toBe(true);
    const call = err as APICallError;
    expect(call.statusCode).toBe(429);
    expect(call.responseHeaders?.['x-should-retry']).toBe('false');
    expect(JSON.parse(call.responseBody ?? '{}')).toMatchObject({ code: 'AI_QUOTA_EXCEEDED', resets_at: await resetsAt(t) });
    expect(overflowWarnings()).toEqual([]);
  });
});

describe('credits owed', () => {
  it('the refusal that names credits_owed is one request too, with resets_at and x-should-retry: false', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await overrides(t, { ai_tokens_limit: 200 });
    // A provider that reports far more than was held leaves the deployment owing credits.
    standIn.failNext({ kind: 'usage', usage: { prompt_tokens: 50_000, completion_tokens: 1, total_tokens: 50_001 } });
    await sdk(t).chat.completions.create({ model: 'gpt-4o-mini', messages: hi, max_tokens: 3 });
    const { err, reached } = await refusedOnce(() => sdk(t).chat.completions.create({ model: 'gpt-4o-mini', messages: hi, max_tokens: 3 }));
    expect(reached).toBe(1);
    expect(err.status).toBe(429);
    expect(err.headers?.get('x-should-retry')).toBe('false');
    expect(err.headers?.get('retry-after')).toBeNull();
    const raw = await fetch(`${base}/api/v1/ai/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: hi, max_tokens: 3 }),
    });
    expect(await raw.json()).toMatchObject({ code: 'AI_QUOTA_EXCEEDED', credits_owed: expect.any(Number), resets_at: await resetsAt(t) });
    expect(overflowWarnings()).toEqual([]);
  });
});

describe('rate-limit 429s keep their short Retry-After', () => {
  it('the per-minute limit: Retry-After within the minute and no x-should-retry', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 10 });
    await overrides(t, { api_rate_limit: 1 });
    await sdk(t).models.list();
    const res = await fetch(`${base}/api/v1/ai/models`, { headers: { authorization: `Bearer ${t.apiKey}` } });
    expect(res.status).toBe(429);
    const seconds = Number(res.headers.get('retry-after'));
    expect(seconds).toBeGreaterThanOrEqual(1);
    // The sliding-window counter frees a slot at most two windows after it was taken.
    expect(seconds).toBeLessThanOrEqual(120);
    expect(res.headers.get('x-should-retry')).toBeNull();
  });
});
