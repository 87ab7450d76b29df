import { pathToFileURL } from 'node:url';
import { testConfig } from '../src/config.js';
import { openDatabase } from '../src/db/client.js';
import { testPgOptions } from './pg-options.js';
import { requestHash } from '../src/lib/canonical-json.js';
import { DeductionBatcher } from '../src/modules/credits/engine/queue.js';

/**
 * Deductions through the real group commit in a process of its own, for the SIGKILL test
 * (src/modules/credits/batcher-crash.test.ts, PostgreSQL only). It records `count` calls of `tool`
 * with invocation ids `<prefix>-<n>`, 16 in flight at a time, and prints `ack <id>` for each answered
 * deduction, as a server would answer its client. The test kills it mid-stream.
 *
 *   node --import tsx test/deduct-batcher-child.ts <databaseUrl> <nowIso> <deploymentId> <organizationId> <tool> <prefix> <count>
 */
async function main(): Promise<void> {
  const [databaseUrl, nowIso, deploymentId, organizationId, tool, prefix, count] = process.argv.slice(2);
  if (!databaseUrl || !nowIso || !deploymentId || !organizationId || !tool || !prefix || !count) {
    process.stderr.write('usage: deduct-batcher-child.ts <databaseUrl> <nowIso> <deploymentId> <organizationId> <tool> <prefix> <count>\n');
    process.exit(64);
  }
  // Never outlive a test that forgot to kill us.
  setTimeout(() => process.exit(3), 120_000);
  const db = await openDatabase({ databaseUrl, dataDir: '', poolSize: 8, ...testPgOptions });
  const batcher = new DeductionBatcher({ db, config: testConfig({ databaseUrl }) }, { windowMs: 0, maxBatch: 256, maxInFlight: 4 });
  const now = new Date(nowIso);
  const target = { deploymentId, organizationId, toolName: tool };
  const hash = requestHash({ tool_name: tool, mcp_user_id: null, metadata: null });
  let next = 0;
  const total = Number(count);
  async function lane(): Promise<void> {
    while (next < total) {
      const id = `${prefix}-${next++}`;
      const outcome = await batcher.submit({
        ...target,
        cost: 1,
        now,
        action: 'platform_basic',
        mcpUserId: null,
        metadata: null,
        actor: 'crash-test',
        invocationId: id,
        releaseReserved: 0,
        claimInvocation: { requestHash: hash },
      });
      if (outcome.claimed && outcome.result.deducted) process.stdout.write(`ack ${id}\n`);
    }
  }
  process.stdout.write('started\n');
  await Promise.all(Array.from({ length: 16 }, lane));
  process.stdout.write('finished\n');
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
