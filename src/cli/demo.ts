import { randomInt } from 'node:crypto';
import { type AdminApi, path, readSecret, request } from './admin-api.js';
import { ApiError } from './exit-codes.js';

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/**
 * 20 random base62 characters (119 bits): passes the password rule (zxcvbn score 3 or more,
 * docs/accounts.md) whatever the draw, since no dictionary or pattern covers a random string that long.
 */
export function demoPassword(): string {
  return Array.from({ length: 20 }, () => BASE62[randomInt(BASE62.length)]).join('');
}

/**
 * `creditgate demo` (docs/cli.md): a demo organization on a running service, a console sign-in for
 * its owner, and the curl lines that use it. The owner signs up like anyone (POST /auth/signup, with
 * a random strong password) and, where the local mailbox exists (no SMTP_URL), follows the
 * verification link mailed there; then the operator makes the organization for that address. The
 * operator makes a verified account its owner (an unverified one only with EMAIL_VERIFICATION=off).
 */
export async function demo(api: AdminApi): Promise<void> {
  const { url } = api;
  const suffix = Array.from({ length: 6 }, () => BASE62[randomInt(36)]!.toLowerCase()).join('');
  const email = `demo-${suffix}@example.com`;
  const password = demoPassword();
  await request(url, 'POST', '/auth/signup', {}, { email, password, full_name: 'Demo User' });
  // The operator makes an account owner only once it has proven its address (docs/accounts.md).
  const verified = await verifyFromMailbox(api, email);
  const org = (await api.send('POST', '/api/v1/admin/organizations', {
    name: 'Demo Company',
    slug: `demo-${suffix}`,
    tier: 'launch',
    owner_email: email,
  })) as { organization: { id: string }; owner_user_id: string; deployment: { id: string; secret: string } };
  const key = (await api.send('POST', path`/api/v1/admin/organizations/${org.organization.id}/api-keys`, {
    name: 'demo key',
    scopes: ['read', 'write'],
  })) as { key: string };
  const serviceKey = readSecret('MCP_SERVICE_KEY', url) ?? '<MCP_SERVICE_KEY>';
  process.stdout.write(`Demo organization ready.
  user id:            ${org.owner_user_id}
  organization id:    ${org.organization.id}
  deployment id:      ${org.deployment.id}   (tier launch, 2,000 credits this period)
  deployment secret:  ${org.deployment.secret}
  API key:            ${key.key}   (scopes read, write)

Console: ${url}/console/
  email:              ${email}
  password:           ${password}
  ${verified ? 'The address is verified (its link was read from the local mailbox).' : 'The address is unverified (mail goes out by SMTP here, and EMAIL_VERIFICATION is off): everything works.'}
  Operator view:      ${url}/console/operator   (the key is ADMIN_API_KEY)

Check, then record a tool call (stdio mode, API key):
  curl -s ${url}/api/v1/mcp/stdio/check-entitlement -H 'Authorization: Bearer ${key.key}' -H 'Content-Type: application/json' -d '{"tool_name":"rag_query"}'
  curl -s ${url}/api/v1/mcp/stdio/record-usage -H 'Authorization: Bearer ${key.key}' -H 'Content-Type: application/json' -d '{"tool_name":"rag_query","invocation_id":"demo-1"}'

Service mode (hosted MCP servers):
  curl -s '${url}/api/v1/mcp/resolve-deployment?user_id=${org.owner_user_id}' -H 'X-MCP-Service-Key: ${serviceKey}'
  curl -s ${url}/api/v1/mcp/usage -H 'X-MCP-Service-Key: ${serviceKey}' -H 'Content-Type: application/json' -d '{"deployment_id":"${org.deployment.id}","tool_name":"task_basic"}'

Entitlements:
  curl -s ${url}/api/v1/entitlements/check -H 'Content-Type: application/json' -d '{"deployment_id":"${org.deployment.id}","deployment_secret":"${org.deployment.secret}"}'
${await billingLines(url, org.deployment.id, org.deployment.secret)}`);
}

/**
 * Follow the verification link mailed to `email`, read from the operator's mailbox. False when there
 * is no mailbox (SMTP_URL set, or NODE_ENV=production: the mail went out) or no link in it.
 */
async function verifyFromMailbox(api: AdminApi, email: string): Promise<boolean> {
  let reply: { messages: Array<{ template: string; links: string[] }> };
  try {
    reply = (await api.send('GET', `/api/v1/admin/mailbox?to=${encodeURIComponent(email)}`)) as typeof reply;
  } catch (err) {
    if (err instanceof ApiError && /NOT_FOUND/.test(err.message)) return false;
    throw err;
  }
  const link = reply.messages.find((m) => m.template === 'verify_email')?.links[0];
  const token = link ? new URLSearchParams(new URL(link).hash.slice(1)).get('token') : null;
  if (!token) return false;
  await request(api.url, 'POST', '/auth/verify-email', {}, { token });
  return true;
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
