import { type AdminApi, path, readSecret } from './admin-api.js';

/** `creditgate demo`: a demo organization on a running service, and the curl lines that use it. */
export async function demo(api: AdminApi): Promise<void> {
  const { url } = api;
  const suffix = Math.random().toString(36).slice(2, 8);
  const org = (await api.send('POST', '/api/v1/admin/organizations', {
    name: 'Demo Company',
    slug: `demo-${suffix}`,
    tier: 'launch',
    owner_email: `demo-${suffix}@example.com`,
  })) as { organization: { id: string }; owner_user_id: string; deployment: { id: string; secret: string } };
  const key = (await api.send('POST', path`/api/v1/admin/organizations/${org.organization.id}/api-keys`, {
    name: 'demo key',
    scopes: ['read', 'write'],
  })) as { key: string };
  const serviceKey = readSecret('MCP_SERVICE_KEY') ?? '<MCP_SERVICE_KEY>';
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
  curl -s '${url}/api/v1/mcp/resolve-deployment?user_id=${org.owner_user_id}' -H 'X-MCP-Service-Key: ${serviceKey}'
  curl -s ${url}/api/v1/mcp/usage -H 'X-MCP-Service-Key: ${serviceKey}' -H 'Content-Type: application/json' -d '{"deployment_id":"${org.deployment.id}","tool_name":"task_basic"}'

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
