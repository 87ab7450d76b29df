import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import OpenAI from 'openai';
import { expect } from 'vitest';
import { buildApp } from '../../src/app.js';
import { type Config, loadConfig, testConfig } from '../../src/config.js';
import { adminHeaders, createHarness, createTenant, type Harness, type Tenant } from '../harness.js';
import type { StandIn } from './index.js';

/**
 * The AI proxy on loopback in front of a stand-in, with the AI settings a deployment gets when it sets
 * none (loadConfig's defaults) and its warnings and errors kept in `logs()`; fixtures through the
 * harness on the same database (src/modules/ai/bounds.test.ts, allowance.test.ts).
 */
export interface ProxyApp {
  h: Harness;
  app: FastifyInstance;
  base: string;
  logs(): string;
  client(t: Tenant): OpenAI;
  /** A trial tenant with this AI token limit (an operator override) and purchased credits. */
  tenant(aiTokensLimit: number, purchased?: number): Promise<Tenant>;
  records(t: Tenant): Promise<Array<{ quantity: number; metadata: { input_tokens: number; output_tokens: number; model_class: string; estimated: boolean } }>>;
  holds(t: Tenant): Promise<Array<{ id: string; prompt_tokens: number; output_allowance: number; status: string }>>;
  /** The hold `call` made (the fake clock stamps every hold alike, so it is told apart by its id). */
  holdOf(t: Tenant, call: () => Promise<unknown>): Promise<{ id: string; prompt_tokens: number; output_allowance: number; status: string }>;
  close(): Promise<void>;
}

/** The AI part of the configuration loadConfig gives when no AI variable is set. */
export function defaultAiConfig(): Partial<Config> {
  const dir = mkdtempSync(join(tmpdir(), 'creditgate-ai-'));
  try {
    const secrets = { JWT_SECRET: 'j'.repeat(40), MCP_SERVICE_KEY: 'm'.repeat(30), ADMIN_API_KEY: 'a'.repeat(30), ENCRYPTION_KEY: 'e'.repeat(40) };
    const { config: c } = loadConfig({ DATA_DIR: dir, ...secrets });
    return {
      aiModelClasses: c.aiModelClasses,
      aiDefaultModelClass: c.aiDefaultModelClass,
      aiReasoningModels: c.aiReasoningModels,
      aiImageMaxTokens: c.aiImageMaxTokens,
      aiExtraFields: c.aiExtraFields,
      aiBytesPerTokenBound: c.aiBytesPerTokenBound,
      aiMaxOutputTokens: c.aiMaxOutputTokens,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function startProxyApp(standIn: StandIn, apiKey: string): Promise<ProxyApp> {
  const ai = { aiBaseUrl: standIn.url, aiApiKey: apiKey, ...defaultAiConfig() };
  const h = await createHarness(ai);
  let output = '';
  const logStream = new Writable({
    write(chunk, _encoding, done) {
      output += chunk.toString();
      done();
    },
  });
  const app = await buildApp({ config: testConfig({ ...ai, logLevel: 'warn' }), db: h.deps.db, clock: h.clock, logStream });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const base = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
  const holds: ProxyApp['holds'] = (t) =>
    h.deps.db.query('SELECT id, prompt_tokens, output_allowance, status FROM ai_reservations WHERE deployment_id = $1', [t.deploymentId]);
  return {
    h,
    app,
    base,
    logs: () => output,
    client: (t) => new OpenAI({ baseURL: `${base}/api/v1/ai`, apiKey: t.apiKey, maxRetries: 0 }),
    async tenant(aiTokensLimit, purchased = 0) {
      const t = await createTenant(h, { tier: 'trial', purchased });
      const res = await app.inject({ method: 'PUT', url: `/api/v1/admin/deployments/${t.deploymentId}/overrides`, headers: adminHeaders(h), payload: { ai_tokens_limit: aiTokensLimit } });
      expect(res.statusCode, res.body).toBe(200);
      return t;
    },
    records: (t) =>
      h.deps.db.query(`SELECT quantity, metadata FROM usage_records WHERE deployment_id = $1 AND metric = 'ai_tokens' ORDER BY "timestamp", id`, [t.deploymentId]),
    holds,
    async holdOf(t, call) {
      const seen = new Set((await holds(t)).map((row) => row.id));
      await call();
      const made = (await holds(t)).filter((row) => !seen.has(row.id));
      expect(made).toHaveLength(1);
      return made[0]!;
    },
    async close() {
      await app.close();
      await h.close();
    },
  };
}
