import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';

/**
 * The operator CLI as a person runs it (src/cli.ts through tsx, no build): help, version, usage
 * errors caught before any request, and what it sends to and prints from a stand-in service that
 * records every request. Independent runs go in parallel: each spawn costs a few hundred ms.
 */
const CLI = join(process.cwd(), 'src', 'cli.ts');
const ADMIN_KEY = 'cli-test-admin-key-0123456789';
const DEPLOYMENT = '6f1c2d9e-1b2a-4c3d-8e4f-5a6b7c8d9e0f';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

interface Recorded {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

let server: Server;
let url: string;
/** No development secrets in it: the key comes from ADMIN_API_KEY. */
let dataDir: string;
let recorded: Recorded[] = [];
/** What the stand-in answers next: status and JSON body. */
let answer: { status: number; body: unknown } = { status: 200, body: {} };

function cli(...args: string[]): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CLI, '--url', url, ...args], {
      env: {
        ...process.env,
        ADMIN_API_KEY: ADMIN_KEY,
        CREDITGATE_URL: '',
        DATA_DIR: dataDir,
        NO_COLOR: '1',
      },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`timed out: ${args.join(' ')}\n${stdout}\n${stderr}`));
    }, 20_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'cg-cli-commands-'));
  server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      recorded.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
      res.writeHead(answer.status, { 'content-type': 'application/json' }).end(JSON.stringify(answer.body));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
  rmSync(dataDir, { recursive: true, force: true });
});
beforeEach(() => {
  recorded = [];
  answer = { status: 200, body: {} };
});

describe('help and version', () => {
  it('--version and -V print the package version; --help, COMMAND --help and help COMMAND describe the commands', async () => {
    const { version } = JSON.parse(readFileSync(join(process.cwd(), 'package.json'), 'utf8')) as { version: string };
    const [long, short, help, tierHelp, helpGrant] = await Promise.all([
      cli('--version'),
      cli('-V'),
      cli('--help'),
      cli('tier', '--help'),
      cli('help', 'grant'),
    ]);
    expect(long).toMatchObject({ code: 0, stdout: `${version}\n` });
    expect(short).toMatchObject({ code: 0, stdout: `${version}\n` });
    expect(help.code).toBe(0);
    for (const command of ['serve', 'migrate', 'demo', 'deployments', 'tier', 'grant', 'override', 'reset-usage', 'map-tool']) {
      expect(help.stdout).toContain(`  ${command}`);
    }
    expect(help.stdout).toMatch(/Exit codes: 0 ok; 1 .*; 2 /s);
    expect(tierHelp).toMatchObject({ code: 0, stderr: '' });
    expect(tierHelp.stdout).toContain('Usage: creditgate tier [options] <id> <tier>');
    expect(tierHelp.stdout).toContain('sandbox|trial|launch|growth|enterprise');
    expect(helpGrant.code).toBe(0);
    expect(helpGrant.stdout).toContain('Usage: creditgate grant [options] <id> <amount> <reason...>');
    expect(helpGrant.stdout).toContain('--expires-at');
    expect(recorded).toEqual([]);
  });
});

describe('usage errors: one line, exit 2, nothing sent', () => {
  it('names an unknown command (with a suggestion), a missing argument and each invalid value', async () => {
    const runs = await Promise.all([
      cli('frobnicate'),
      cli('deploymnts'),
      cli('help', 'frobnicate'),
      cli('deployment'),
      cli('tier', DEPLOYMENT),
      cli('tier', DEPLOYMENT, 'gold'),
      cli('tier', 'not-a-uuid', 'growth'),
      cli('grant', DEPLOYMENT, '1.5', 'goodwill'),
      cli('grant', DEPLOYMENT, '10', ' '),
      cli('override', DEPLOYMENT, '--expires-at', '2027-02-30T00:00:00Z'),
      cli('override', DEPLOYMENT, '--monthly-credits', 'lots'),
      cli('cost', 'rag_query', '-1'),
      cli('cost', '..', '3'),
      cli('map-tool', '.', 'rag_query'),
    ]);
    const stderr = runs.map((r) => r.stderr);
    expect(stderr).toEqual([
      "creditgate: unknown command 'frobnicate'; see creditgate --help\n",
      "creditgate: unknown command 'deploymnts' (did you mean deployments?); see creditgate --help\n",
      "creditgate: unknown command 'frobnicate'; see creditgate --help\n",
      "creditgate deployment: missing required argument 'id'; see creditgate deployment --help\n",
      "creditgate tier: missing required argument 'tier'; see creditgate tier --help\n",
      "creditgate tier: tier 'gold' must be one of sandbox, trial, launch, growth, enterprise; see creditgate tier --help\n",
      "creditgate tier: id 'not-a-uuid' must be a UUID (creditgate deployments lists them); see creditgate tier --help\n",
      "creditgate grant: amount '1.5' must be a whole number; see creditgate grant --help\n",
      'creditgate: grant: REASON must not be empty; see creditgate grant --help\n',
      "creditgate override: --expires-at '2027-02-30T00:00:00Z' must be an ISO 8601 date-time with a time zone, e.g. 2027-01-01T00:00:00Z; see creditgate override --help\n",
      'creditgate override: --monthly-credits \'lots\' must be a whole number, 0 or more, or "null" to remove the override; see creditgate override --help\n',
      "creditgate cost: credits '-1' must be a whole number, 0 or more; see creditgate cost --help\n",
      // A dot segment would be resolved away by URL parsing: PUT /api/v1/admin/ with the operator key.
      `creditgate cost: action '..' must not be "." or ".."; see creditgate cost --help\n`,
      `creditgate map-tool: tool '.' must not be "." or ".."; see creditgate map-tool --help\n`,
    ]);
    for (const run of runs) expect(run).toMatchObject({ code: 2, stdout: '' });
    expect(recorded).toEqual([]);
  });
});

describe('requests', () => {
  it('sends the method, the encoded path, the operator key and the body; prints the answer', async () => {
    answer = { status: 200, body: { id: DEPLOYMENT, balance: { purchased: -5 } } };
    const [grant, mapTool] = await Promise.all([
      cli('grant', DEPLOYMENT, '-5', 'took', 'back', '--expires-at', '2027-01-01T00:00:00Z'),
      cli('map-tool', 'search/web #1', 'rag_query'),
    ]);
    expect(grant).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(grant.stdout)).toEqual(answer.body);
    expect(mapTool.code).toBe(0);
    const byMethod = Object.fromEntries(recorded.map((r) => [r.method, r]));
    expect(byMethod.POST).toMatchObject({
      url: `/api/v1/admin/deployments/${DEPLOYMENT}/credits`,
      headers: { 'x-admin-key': ADMIN_KEY, 'content-type': 'application/json' },
    });
    expect(JSON.parse(byMethod.POST!.body)).toEqual({ amount: -5, reason: 'took back', expires_at: '2027-01-01T00:00:00Z' });
    expect(byMethod.PUT).toMatchObject({ url: '/api/v1/admin/tool-actions/search%2Fweb%20%231', headers: { 'x-admin-key': ADMIN_KEY } });
    expect(JSON.parse(byMethod.PUT!.body)).toEqual({ action: 'rag_query' });
  });

  it('override: "null" removes an override (sent as JSON null, not as an empty string)', async () => {
    answer = { status: 200, body: { id: DEPLOYMENT } };
    const override = await cli('override', DEPLOYMENT, '--monthly-credits', 'null', '--api-rate-limit', '120', '--expires-at', 'null');
    expect(override).toMatchObject({ code: 0, stderr: '' });
    expect(recorded).toHaveLength(1);
    expect(recorded[0]).toMatchObject({ method: 'PUT', url: `/api/v1/admin/deployments/${DEPLOYMENT}/overrides` });
    expect(JSON.parse(recorded[0]!.body)).toEqual({ monthly_credits: null, api_rate_limit: 120, expires_at: null });
  });

  it("prints the service's error in one line (message, field messages, code) and exits 1; an unreachable service too", async () => {
    answer = {
      status: 400,
      body: {
        error: 'invalid_request',
        code: 'INVALID_REQUEST',
        message: 'Invalid request: tier must be one of sandbox, trial, launch, growth, enterprise',
        fields: [
          { field: 'tier', message: 'must be one of sandbox, trial, launch, growth, enterprise' },
          { field: 'status', message: 'must be active or suspended' },
        ],
      },
    };
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const nobody = `http://127.0.0.1:${(closed.address() as AddressInfo).port}`;
    await new Promise((resolve) => closed.close(resolve));
    const [refused, unreachable] = await Promise.all([cli('tier', DEPLOYMENT, 'growth'), cli('deployments', '--url', nobody)]);
    expect(refused).toMatchObject({
      code: 1,
      stdout: '',
      stderr:
        'creditgate: Invalid request: tier must be one of sandbox, trial, launch, growth, enterprise (status must be active or suspended) [INVALID_REQUEST, HTTP 400]\n',
    });
    expect(recorded).toHaveLength(1);
    expect(recorded[0]).toMatchObject({ method: 'PUT', url: `/api/v1/admin/deployments/${DEPLOYMENT}` });
    expect(JSON.parse(recorded[0]!.body)).toEqual({ tier: 'growth' });
    expect(unreachable.code).toBe(1);
    expect(unreachable.stderr).toBe(`creditgate: cannot reach creditgate at ${nobody} (ECONNREFUSED); is it running? (npm start)\n`);
  });
});

describe('template commands', () => {
  const TEMPLATE = '0b5e8c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5b';

  it('list, create, update and delete send the operator key, the encoded path and only the given fields', async () => {
    answer = { status: 200, body: { templates: [] } };
    const runs = await Promise.all([
      cli('templates'),
      cli('template-create', 'Blog starter', 'blog-starter', '--category', 'content', '--config', '{"image":"blog:1"}', '--inactive'),
      cli('template-update', TEMPLATE, '--description', 'null', '--icon-url', 'https://cdn.example.com/i.png', '--active'),
      cli('template-delete', TEMPLATE),
    ]);
    for (const run of runs) expect(run).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(runs[0]!.stdout)).toEqual({ templates: [] });
    const byMethod = Object.fromEntries(recorded.map((r) => [r.method, r]));
    expect(byMethod.GET).toMatchObject({ url: '/api/v1/admin/templates', headers: { 'x-admin-key': ADMIN_KEY } });
    expect(byMethod.POST).toMatchObject({ url: '/api/v1/admin/templates', headers: { 'x-admin-key': ADMIN_KEY } });
    expect(JSON.parse(byMethod.POST!.body)).toEqual({ name: 'Blog starter', slug: 'blog-starter', category: 'content', config: { image: 'blog:1' }, is_active: false });
    expect(byMethod.PUT).toMatchObject({ url: `/api/v1/admin/templates/${TEMPLATE}` });
    expect(JSON.parse(byMethod.PUT!.body)).toEqual({ description: null, icon_url: 'https://cdn.example.com/i.png', is_active: true });
    expect(byMethod.DELETE).toMatchObject({ url: `/api/v1/admin/templates/${TEMPLATE}`, body: '' });
  });

  it('bad arguments are one-line usage errors (exit 2) and nothing is sent; a 409 from the service is exit 1', async () => {
    const runs = await Promise.all([
      cli('template-create', 'Blog', 'Not_A_Slug'),
      cli('template-create', 'Blog', 'blog', '--config', '[1,2]'),
      cli('template-create', 'Blog', 'blog', '--icon-url', 'javascript:alert(1)'),
      cli('template-update', 'nope', '--name', 'x'),
      cli('template-update', TEMPLATE),
      cli('template-update', TEMPLATE, '--active', '--inactive'),
      cli('template-delete'),
    ]);
    expect(runs.map((r) => r.stderr)).toEqual([
      "creditgate template-create: slug 'Not_A_Slug' must be 1 to 63 of a-z, 0-9 and hyphens, starting and ending with a letter or digit; see creditgate template-create --help\n",
      'creditgate template-create: --config \'[1,2]\' must be a JSON object, e.g. \'{"image":"blog:1"}\'; see creditgate template-create --help\n',
      'creditgate template-create: --icon-url \'javascript:alert(1)\' must be an http(s) URL, or "null" to clear it; see creditgate template-create --help\n',
      "creditgate template-update: id 'nope' must be a UUID (creditgate templates lists them); see creditgate template-update --help\n",
      'creditgate: template-update: name at least one change; see creditgate template-update --help\n',
      "creditgate template-update: option '--active' cannot be used with option '--inactive'; see creditgate template-update --help\n",
      "creditgate template-delete: missing required argument 'id'; see creditgate template-delete --help\n",
    ]);
    for (const run of runs) expect(run).toMatchObject({ code: 2, stdout: '' });
    expect(recorded).toEqual([]);

    answer = { status: 409, body: { error: 'conflict', code: 'CONFLICT', message: 'The template has 2 deployments; deactivate it (is_active: false) instead, or delete them first' } };
    const refused = await cli('template-delete', TEMPLATE);
    expect(refused).toMatchObject({
      code: 1,
      stderr: 'creditgate: The template has 2 deployments; deactivate it (is_active: false) instead, or delete them first [CONFLICT, HTTP 409]\n',
    });
  });
});

describe('budget commands', () => {
  const ORG = '0b5e8c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5b';
  const BUDGET = '7d2e4f6a-8b1c-4d3e-9f5a-6b7c8d9e0f1a';
  const base = `/api/v1/admin/organizations/${ORG}/budgets`;

  it('list, show, create, change and delete send the operator key, the path and only the given fields', async () => {
    answer = { status: 200, body: { budgets: [] } };
    const [help, ...runs] = await Promise.all([
      cli('--help'),
      cli('budgets', ORG),
      cli('budget', ORG, BUDGET),
      cli('budget-create', ORG, 'end_user', 'day', '--end-user', '*', '--deployment', DEPLOYMENT, '--limit-credits', '500', '--mode', 'alert', '--alert-thresholds', '50,80,100'),
      cli('budget-update', ORG, BUDGET, '--limit-credits', 'null', '--limit-ai-tokens', '1000', '--window', 'week'),
      cli('budget-delete', ORG, BUDGET),
    ]);
    for (const command of ['budgets', 'budget', 'budget-create', 'budget-update', 'budget-delete']) expect(help!.stdout).toContain(`  ${command} `);
    for (const run of runs) expect(run).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(runs[0]!.stdout)).toEqual({ budgets: [] });
    const sent = recorded.map((r) => ({ method: r.method, url: r.url, key: r.headers['x-admin-key'], body: r.body === '' ? undefined : JSON.parse(r.body) }));
    expect(sent).toEqual(
      expect.arrayContaining([
        { method: 'GET', url: base, key: ADMIN_KEY, body: undefined },
        { method: 'GET', url: `${base}/${BUDGET}`, key: ADMIN_KEY, body: undefined },
        {
          method: 'POST',
          url: base,
          key: ADMIN_KEY,
          body: { scope: 'end_user', window: 'day', end_user_id: '*', deployment_id: DEPLOYMENT, limit_credits: 500, mode: 'alert', alert_thresholds: [50, 80, 100] },
        },
        { method: 'PUT', url: `${base}/${BUDGET}`, key: ADMIN_KEY, body: { limit_credits: null, limit_ai_tokens: 1000, window: 'week' } },
        { method: 'DELETE', url: `${base}/${BUDGET}`, key: ADMIN_KEY, body: undefined },
      ]),
    );
    expect(sent).toHaveLength(5);
  });

  it('bad arguments are one-line usage errors (exit 2) and nothing is sent', async () => {
    const runs = await Promise.all([
      cli('budgets'),
      cli('budgets', 'acme'),
      cli('budget', ORG, 'nope'),
      cli('budget-create', ORG, 'org', 'day', '--limit-credits', '5'),
      cli('budget-create', ORG, 'organization', 'fortnight', '--limit-credits', '5'),
      cli('budget-create', ORG, 'deployment', 'day', '--limit-credits', '5'),
      cli('budget-create', ORG, 'organization', 'day', '--tool', 'search', '--limit-credits', '5'),
      cli('budget-create', ORG, 'organization', 'day'),
      cli('budget-create', ORG, 'organization', 'day', '--limit-credits', '0'),
      cli('budget-create', ORG, 'api_key', 'day', '--api-key', 'cg_secret', '--limit-credits', '5'),
      cli('budget-create', ORG, 'organization', 'day', '--limit-credits', '5', '--alert-thresholds', '80,80'),
      cli('budget-update', ORG, BUDGET),
      cli('budget-update', ORG, BUDGET, '--mode', 'stop'),
      cli('budget-update', ORG, BUDGET, '--limit-credits', '1.5'),
    ]);
    expect(runs.map((r) => r.stderr)).toEqual([
      "creditgate budgets: missing required argument 'org'; see creditgate budgets --help\n",
      "creditgate budgets: org 'acme' must be a UUID (creditgate deployments lists each deployment's organization_id); see creditgate budgets --help\n",
      "creditgate budget: budget 'nope' must be a UUID (creditgate budgets ORG lists them); see creditgate budget --help\n",
      "creditgate budget-create: scope 'org' must be one of organization, deployment, api_key, end_user, tool; see creditgate budget-create --help\n",
      "creditgate budget-create: window 'fortnight' must be one of hour, day, week, month, period; see creditgate budget-create --help\n",
      'creditgate: budget-create: a deployment budget needs --deployment ID; see creditgate budget-create --help\n',
      'creditgate: budget-create: --tool is only for a tool budget; see creditgate budget-create --help\n',
      'creditgate: budget-create: name a limit, --limit-credits and/or --limit-ai-tokens; see creditgate budget-create --help\n',
      "creditgate budget-create: --limit-credits '0' must be a whole number from 1 to 1000000000000; see creditgate budget-create --help\n",
      "creditgate budget-create: --api-key 'cg_secret' must be a UUID (an API key's id, not the key); see creditgate budget-create --help\n",
      "creditgate budget-create: --alert-thresholds '80,80' must be up to 10 different whole numbers from 1 to 100, comma-separated, e.g. 80,100; see creditgate budget-create --help\n",
      'creditgate: budget-update: name at least one change; see creditgate budget-update --help\n',
      "creditgate budget-update: --mode 'stop' must be one of block, alert; see creditgate budget-update --help\n",
      'creditgate budget-update: --limit-credits \'1.5\' must be a whole number from 1 to 1000000000000, or "null" to remove the limit; see creditgate budget-update --help\n',
    ]);
    for (const run of runs) expect(run).toMatchObject({ code: 2, stdout: '' });
    expect(recorded).toEqual([]);
  });
});
