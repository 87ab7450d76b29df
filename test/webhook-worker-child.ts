import { pathToFileURL } from 'node:url';
import pg from 'pg';

/**
 * A webhook-delivery worker that dies in the middle of its pass (src/modules/webhooks/organization-exactly-once.test.ts,
 * PostgreSQL only). It claims the due deliveries with the statement deliverDue uses, prints the claimed ids
 * as one JSON line on stdout, and then blocks until it is killed (SIGKILL) — it never sends anything.
 *
 *   node --import tsx test/webhook-worker-child.ts <databaseUrl> <nowIso> <batch> <lease|lock> [organizationId]
 *
 * `lease`: the claim commits, so the rows are leased for 60 s and due again after that.
 * `lock`: the claim runs in a transaction left open, so other workers skip the locked rows until the
 * server notices the dead connection and rolls it back.
 */
export { CLAIM_DUE_SQL as CLAIM_SQL, LEASE_MS } from '../src/modules/webhooks/organization.js';
import { CLAIM_DUE_SQL as CLAIM_SQL, LEASE_MS } from '../src/modules/webhooks/organization.js';

async function main(): Promise<void> {
  const [url, nowIso, batch, mode, organizationId] = process.argv.slice(2);
  if (!url || !nowIso || !batch || (mode !== 'lease' && mode !== 'lock')) {
    process.stderr.write('usage: webhook-worker-child.ts <databaseUrl> <nowIso> <batch> <lease|lock>\n');
    process.exit(64);
  }
  // Never outlive a test that forgot to kill us.
  setTimeout(() => process.exit(3), 120_000);
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const now = new Date(nowIso);
  if (mode === 'lock') await client.query('BEGIN');
  const { rows } = await client.query<{ id: string }>(CLAIM_SQL, [now, Number(batch), new Date(now.getTime() + LEASE_MS), null, organizationId ? [organizationId] : null]);
  process.stdout.write(`${JSON.stringify({ claimed: rows.map((r) => r.id) })}\n`);
  // Stuck before sending: the process stays alive (and, in `lock` mode, inside its transaction) until killed.
  setInterval(() => {}, 60_000);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
