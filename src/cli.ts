#!/usr/bin/env node
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { loadConfig } from './config.js';
import { openDatabase } from './db/client.js';
import { runMigrations } from './db/migrate.js';
import { serve } from './main.js';

const HELP = `creditgate — credit-metered platform API

  creditgate serve                       start the service (same as npm start)
  creditgate migrate                     apply database migrations and exit
  creditgate demo                        provision a demo organization on a running service and print curl lines

Operator commands (talk to a running service with ADMIN_API_KEY; --url or CREDITGATE_URL, default http://HOST:PORT):
  creditgate deployments [--org ID]      list deployments
  creditgate deployment ID               show one deployment with its balance
  creditgate tier ID TIER                set a deployment's tier (sandbox|trial|launch|growth|enterprise)
  creditgate suspend ID | activate ID    change a deployment's status
  creditgate grant ID AMOUNT REASON      grant (or, negative, take back) purchased credits
  creditgate override ID [--monthly-credits N] [--api-rate-limit N] [--ai-tokens-limit N] [--expires-at ISO]
                                         merge overrides ("null" removes one)
  creditgate clear-overrides ID          remove every override
  creditgate reset-usage ID [--ai-tokens] [--credits]
  creditgate cost ACTION CREDITS         set an action's credit cost
  creditgate map-tool TOOL ACTION        meter TOOL as ACTION
`;

function adminKey(): string {
  if (process.env.ADMIN_API_KEY) return process.env.ADMIN_API_KEY;
  const file = join(resolve(process.env.DATA_DIR ?? './.creditgate'), 'secrets.json');
  if (existsSync(file)) {
    const secrets = JSON.parse(readFileSync(file, 'utf8')) as { ADMIN_API_KEY?: string };
    if (secrets.ADMIN_API_KEY) return secrets.ADMIN_API_KEY;
  }
  throw new Error('ADMIN_API_KEY is not set and no development secrets were found in DATA_DIR');
}

function baseUrl(flag: string | undefined): string {
  return (flag ?? process.env.CREDITGATE_URL ?? `http://${process.env.HOST ?? '127.0.0.1'}:${process.env.PORT ?? '8080'}`).replace(/\/$/, '');
}

async function call(url: string, method: string, path: string, body?: unknown): Promise<unknown> {
  const res = await fetch(url + path, {
    method,
    headers: { 'x-admin-key': adminKey(), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  }).catch((err: Error) => {
    throw new Error(`cannot reach creditgate at ${url} (${err.message}); is it running? (npm start)`);
  });
  const text = await res.text();
  const parsed = text ? (JSON.parse(text) as unknown) : null;
  if (!res.ok) throw new Error(`${method} ${path} answered ${res.status}: ${text}`);
  return parsed;
}

const num = (value: string | undefined, name: string): number | null | undefined => {
  if (value === undefined) return undefined;
  if (value === 'null') return null;
  if (!/^-?\d+$/.test(value)) throw new Error(`${name} must be a whole number or "null"`);
  return Number(value);
};

async function demo(url: string): Promise<void> {
  const suffix = Math.random().toString(36).slice(2, 8);
  const org = (await call(url, 'POST', '/api/v1/admin/organizations', {
    name: 'Demo Company',
    slug: `demo-${suffix}`,
    tier: 'launch',
    owner_email: `demo-${suffix}@example.com`,
  })) as { organization: { id: string }; owner_user_id: string; deployment: { id: string; secret: string } };
  const key = (await call(url, 'POST', `/api/v1/admin/organizations/${org.organization.id}/api-keys`, {
    name: 'demo key',
    scopes: ['read', 'write'],
  })) as { key: string };
  const serviceKey = process.env.MCP_SERVICE_KEY ?? readSecret('MCP_SERVICE_KEY');
  process.stdout.write(`Demo organization ready.
  user id:            ${org.owner_user_id}
  organization id:    ${org.organization.id}
  deployment id:      ${org.deployment.id}   (tier launch, 2,000 credits this period)
  deployment secret:  ${org.deployment.secret}
  API key:            ${key.key}   (scopes read, write)

Check, then record a tool call (stdio mode, API key):
  curl -s ${url}/api/v1/mcp/stdio/check-entitlement -H 'Authorization: Bearer ${key.key}' -H 'Content-Type: application/json' -d '{"tool_name":"rag_query"}'
  curl -s ${url}/api/v1/mcp/stdio/record-usage -H 'Authorization: Bearer ${key.key}' -H 'Content-Type: application/json' -d '{"tool_name":"rag_query","invocation_id":"demo-1"}'

Service mode (hosted MCP servers):
  curl -s '${url}/api/v1/mcp/resolve-deployment?user_id=${org.owner_user_id}' -H 'X-MCP-Service-Key: ${serviceKey ?? '<MCP_SERVICE_KEY>'}'
  curl -s ${url}/api/v1/mcp/usage -H 'X-MCP-Service-Key: ${serviceKey ?? '<MCP_SERVICE_KEY>'}' -H 'Content-Type: application/json' -d '{"deployment_id":"${org.deployment.id}","tool_name":"task_basic"}'

Entitlements:
  curl -s ${url}/api/v1/entitlements/check -H 'Content-Type: application/json' -d '{"deployment_id":"${org.deployment.id}","deployment_secret":"${org.deployment.secret}"}'
${await billingLines(url, org.deployment.id, org.deployment.secret)}`);
}

/** When the service sells through Stripe (docs/billing.md): the purchase and portal calls for the demo deployment. */
async function billingLines(url: string, deploymentId: string, secret: string): Promise<string> {
  const res = await fetch(`${url}/api/v1/credits/packs`, { headers: { 'x-deployment-id': deploymentId, 'x-deployment-secret': secret } }).catch(() => null);
  if (!res?.ok) return '';
  const catalog = (await res.json()) as { configured: boolean; packs: Array<{ pack: string; credits: number }> };
  if (!catalog.configured) return '\nBilling: Stripe is not configured (set STRIPE_SECRET_KEY, STRIPE_WEBHOOK_SECRET, CREDIT_PACKS; see the README).\n';
  const auth = `-H 'X-Deployment-ID: ${deploymentId}' -H 'X-Deployment-Secret: ${secret}' -H 'Content-Type: application/json'`;
  const pack = catalog.packs[0];
  const packs = catalog.packs.map((p) => `${p.pack} (${p.credits} credits)`).join(', ') || 'none configured';
  return `
Billing (Stripe): packs ${packs}
  curl -s ${url}/api/v1/credits/purchase ${auth} -d '{"pack":"${pack?.pack ?? 'small'}"}'     # → a Checkout URL; paid, the credits arrive
  curl -s ${url}/api/v1/proxy/billing/portal ${auth} -d '{}'     # → the Billing Portal URL
`;
}

function readSecret(name: string): string | undefined {
  const file = join(resolve(process.env.DATA_DIR ?? './.creditgate'), 'secrets.json');
  if (!existsSync(file)) return undefined;
  return (JSON.parse(readFileSync(file, 'utf8')) as Record<string, string>)[name];
}

async function main(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      url: { type: 'string' },
      org: { type: 'string' },
      'monthly-credits': { type: 'string' },
      'api-rate-limit': { type: 'string' },
      'ai-tokens-limit': { type: 'string' },
      'expires-at': { type: 'string' },
      'ai-tokens': { type: 'boolean' },
      credits: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const [command, ...args] = positionals;
  const url = baseUrl(values.url);
  const print = (value: unknown): void => {
    process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
  };
  switch (command) {
    case undefined:
    case 'serve':
      if (values.help) return void process.stdout.write(HELP);
      await serve();
      return;
    case 'migrate': {
      const { config } = loadConfig();
      const db = await openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir });
      await runMigrations(db);
      await db.close();
      process.stdout.write('migrations applied\n');
      return;
    }
    case 'demo':
      return demo(url);
    case 'deployments':
      return print(await call(url, 'GET', `/api/v1/admin/deployments${values.org ? `?organization_id=${values.org}` : ''}`));
    case 'deployment':
      return print(await call(url, 'GET', `/api/v1/admin/deployments/${args[0]}`));
    case 'tier':
      return print(await call(url, 'PUT', `/api/v1/admin/deployments/${args[0]}`, { tier: args[1] }));
    case 'suspend':
    case 'activate':
      return print(
        await call(url, 'PUT', `/api/v1/admin/deployments/${args[0]}`, { status: command === 'suspend' ? 'suspended' : 'active' }),
      );
    case 'grant':
      return print(
        await call(url, 'POST', `/api/v1/admin/deployments/${args[0]}/credits`, { amount: num(args[1], 'AMOUNT'), reason: args.slice(2).join(' ') }),
      );
    case 'override': {
      const body: Record<string, unknown> = {
        monthly_credits: num(values['monthly-credits'], '--monthly-credits'),
        api_rate_limit: num(values['api-rate-limit'], '--api-rate-limit'),
        ai_tokens_limit: num(values['ai-tokens-limit'], '--ai-tokens-limit'),
        expires_at: values['expires-at'] === 'null' ? null : values['expires-at'],
      };
      for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
      return print(await call(url, 'PUT', `/api/v1/admin/deployments/${args[0]}/overrides`, body));
    }
    case 'clear-overrides':
      return print(await call(url, 'DELETE', `/api/v1/admin/deployments/${args[0]}/overrides`));
    case 'reset-usage':
      return print(
        await call(url, 'POST', `/api/v1/admin/deployments/${args[0]}/usage/reset`, {
          ai_tokens: values['ai-tokens'] === true,
          monthly_credits: values.credits === true,
        }),
      );
    case 'cost':
      return print(await call(url, 'PUT', `/api/v1/admin/credit-costs/${args[0]}`, { credits: num(args[1], 'CREDITS') }));
    case 'map-tool':
      return print(await call(url, 'PUT', `/api/v1/admin/tool-actions/${encodeURIComponent(args[0] ?? '')}`, { action: args[1] }));
    default:
      process.stdout.write(HELP);
      if (command !== 'help') process.exitCode = 1;
  }
}

main(process.argv.slice(2)).catch((err: Error) => {
  process.stderr.write(`creditgate: ${err.message}\n`);
  process.exit(1);
});
