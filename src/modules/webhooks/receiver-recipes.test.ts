import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createHarness, createTenant, type Harness, json, signUpWithOrganization } from '../../../test/harness.js';
import { type Received, type Receiver, startReceiver } from '../../../test/receiver.js';

/**
 * The receiver recipes of docs/webhooks.md ("Verifying a delivery"), taken from the document as
 * written and run — Node with this Node, Python with python3 — against real deliveries: a generated
 * `whsec_` secret of an organization webhook, and a plain and a `whsec_` secret given to the proxy.
 */
let h: Harness;
let rx: Receiver;

beforeAll(async () => {
  h = await createHarness({ webhookAllowPrivateNetworks: true, webhookAttemptTimeoutMs: 1000 }, new Date().toISOString());
  rx = await startReceiver();
});
afterAll(async () => {
  await rx.close();
  await h.close();
});

const DOC = readFileSync(new URL('../../../docs/webhooks.md', import.meta.url), 'utf8');

/** The first fenced block of `language` in the document's "Verifying a delivery" section. */
function recipe(language: string): string {
  const section = DOC.slice(DOC.indexOf('## Verifying a delivery'));
  const match = new RegExp(`\`\`\`${language}\\n([\\s\\S]*?)\`\`\``).exec(section);
  if (!match) throw new Error(`docs/webhooks.md has no ${language} recipe under "Verifying a delivery"`);
  return match[1]!;
}

const hasPython = spawnSync('python3', ['--version']).status === 0;

function run(command: string, args: string[], input: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      err += chunk.toString();
    });
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`${command} exited with ${code}: ${err}`))));
    child.stdin.end(input);
  });
}

interface Case {
  secret: string;
  /** Base64 of the raw body. */
  body: string;
  signature: string | null;
}

interface Captured {
  name: string;
  secret: string;
  delivery: Received;
}

/** Each delivery as received, then the same with a changed body, a wrong secret and no signature. */
function casesOf(captured: Captured[]): { cases: Case[]; expected: boolean[] } {
  const cases: Case[] = [];
  const expected: boolean[] = [];
  for (const { secret, delivery } of captured) {
    const signature = String(delivery.headers['x-service-signature']);
    const body = delivery.body.toString('base64');
    cases.push({ secret, body, signature }, { secret, body: Buffer.concat([delivery.body, Buffer.from(' ')]).toString('base64'), signature });
    cases.push({ secret: `${secret}x`, body, signature }, { secret, body, signature: null });
    expected.push(true, false, false, false);
  }
  return { cases, expected };
}

let captured: Captured[] = [];

beforeAll(async () => {
  // An organization webhook with a generated whsec_ secret, delivered by its test send.
  const o = await signUpWithOrganization(h, 'recipes');
  const created = await h.request({
    method: 'POST',
    url: `/organizations/${o.organizationId}/webhooks`,
    headers: bearer(o.accessToken),
    payload: { url: `${rx.url}/org`, events: ['api_key.created'] },
  });
  expect(created.statusCode, created.body).toBe(201);
  const hook = json<{ data: { id: string; secret: string } }>(created).data;
  expect(hook.secret).toMatch(/^whsec_/);
  rx.script({ status: 200 });
  const test = await h.request({ method: 'POST', url: `/organizations/${o.organizationId}/webhooks/${hook.id}/test`, headers: bearer(o.accessToken) });
  expect(test.statusCode, test.body).toBe(200);
  captured.push({ name: 'organization webhook, generated whsec_', secret: hook.secret, delivery: rx.received[0]! });

  // The proxy with a plain secret (non-ASCII: the recipes must key with its UTF-8 bytes) and a whsec_ one.
  const t = await createTenant(h, { tier: 'launch' });
  for (const secret of ['plain-proxy-secret-ü-123', `whsec_${Buffer.alloc(32, 9).toString('base64')}`]) {
    rx.script({ status: 200 });
    const res = await h.request({
      method: 'POST',
      url: '/api/v1/proxy/webhooks/send',
      headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret },
      payload: { url: `${rx.url}/proxy`, payload: { order: 7, note: 'ünïcode' }, secret },
    });
    expect(json<{ success: boolean }>(res).success).toBe(true);
    captured.push({ name: `proxy, ${secret.slice(0, 6)}…`, secret, delivery: rx.received[0]! });
  }
  captured = captured.filter((c) => c.delivery !== undefined);
  expect(captured).toHaveLength(3);
});

describe('the receiver recipes of docs/webhooks.md', () => {
  it('are five lines each', () => {
    expect(recipe('js').trimEnd().split('\n')).toHaveLength(5);
    expect(recipe('python').trimEnd().split('\n')).toHaveLength(5);
  });

  it('Node: verifies every real delivery and refuses a changed body, a wrong secret and a missing signature', async () => {
    const { cases, expected } = casesOf(captured);
    const driver = `
import { readFileSync } from 'node:fs';
const cases = JSON.parse(readFileSync(0, 'utf8'));
console.log(JSON.stringify(cases.map((c) => verify(c.secret, Buffer.from(c.body, 'base64'), c.signature ?? undefined))));
`;
    const out = await run(process.execPath, ['--input-type=module', '--eval', recipe('js') + driver], JSON.stringify(cases));
    expect(JSON.parse(out)).toEqual(expected);
  });

  it.skipIf(!hasPython)('Python (python3, standard library): the same', async () => {
    const { cases, expected } = casesOf(captured);
    const driver = `
import base64, json, sys
cases = json.load(sys.stdin)
print(json.dumps([verify(c["secret"], base64.b64decode(c["body"]), c["signature"]) for c in cases]))
`;
    const out = await run('python3', ['-c', recipe('python') + driver], JSON.stringify(cases));
    expect(JSON.parse(out)).toEqual(expected);
  });
});
