import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { bearer, createHarness, dbKind, type Harness, json, unique } from '../../../test/harness.js';

/**
 * Group commit (docs/adr/0004-group-commit.md): a process killed with SIGKILL while batches are in flight (PostgreSQL, a real child
 * process). Every deduction it answered is in the ledger; a client retrying every call it made (with
 * the same invocation ids) is charged once per call, never twice.
 */
let h: Harness;
beforeAll(async () => {
  // Far past the other files' clocks: their retention passes (global, at their own now) must not find
  // this file's invocation rows 7 days old and delete them between the kill and the retries.
  h = await createHarness({}, '2031-01-15T12:00:00.000Z');
});
afterAll(async () => {
  await h.close();
});
const f = creditFixtures(() => h);

describe.runIf(dbKind === 'postgres')('group commit under SIGKILL (PostgreSQL)', () => {
  const childScript = fileURLToPath(new URL('../../../test/deduct-batcher-child.ts', import.meta.url));
  const root = fileURLToPath(new URL('../../../', import.meta.url));

  it('every answered deduction is durable; retrying every call charges each exactly once', async () => {
    const t = await f.tenantWith(100_000);
    const tool = unique('crash-tool');
    const prefix = unique('inv');
    const total = 3000;
    // The child's sessions are named, so the test can wait until PostgreSQL has ended every one of them.
    const applicationName = unique('crash-child').slice(0, 60);
    const childUrl = new URL(inject('postgresUrl'));
    childUrl.searchParams.set('application_name', applicationName);
    const child: ChildProcess = spawn(
      process.execPath,
      ['--import', 'tsx', childScript, childUrl.toString(), h.clock.now().toISOString(), t.deploymentId, t.organizationId, tool, prefix, String(total)],
      { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const acked = new Set<string>();
    let stderr = '';
    child.stdout!.on('data', (d: Buffer) => {
      for (const line of d.toString().split('\n')) if (line.startsWith('ack ')) acked.add(line.slice(4));
    });
    child.stderr!.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    try {
      for (let waited = 0; acked.size < 200; waited += 20) {
        if (waited > 60_000) throw new Error(`the child did not answer in time: ${stderr}`);
        if (child.exitCode !== null) throw new Error(`the child exited (${child.exitCode}) before it was killed: ${stderr}`);
        await new Promise((r) => setTimeout(r, 20));
      }
      const exited = new Promise<NodeJS.Signals | null>((resolve) => child.once('exit', (_code, signal) => resolve(signal)));
      expect(child.kill('SIGKILL')).toBe(true);
      expect(await exited).toBe('SIGKILL');
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
    // PostgreSQL rolls back what the dead process had not committed once its connections drop; a
    // backend that had already received COMMIT finishes it. Either way the outcome is settled only when
    // the backend is idle or gone, which on a loaded machine can be a moment after the process died.
    // (Idle, not gone: through a pooler the server connection outlives the client, its transaction over.)
    for (let waited = 0; ; waited += 20) {
      const [alive] = await h.deps.db.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND state IS DISTINCT FROM 'idle'",
        [applicationName],
      );
      if (alive?.n === 0) break;
      if (waited > 30_000) throw new Error(`${alive?.n} sessions of the killed child are still open after 30 s`);
      await new Promise((r) => setTimeout(r, 20));
    }
    const recorded = async () =>
      h.deps.db.query<{ invocation_id: string; n: number }>(
        `SELECT invocation_id, count(*)::int AS n FROM usage_records WHERE deployment_id = $1 AND success GROUP BY invocation_id`,
        [t.deploymentId],
      );
    const before = new Map((await recorded()).map((r) => [r.invocation_id, r.n]));
    for (const id of acked) expect(before.get(id), `answered ${id} is not in the ledger`).toBe(1);
    expect(before.size).toBeLessThan(total);

    // The client retries every call it made, answered or not (the same invocation ids, the HTTP path).
    const attempted = new Set([...acked, ...before.keys()]);
    let replays = 0;
    const statusBefore = new Map(
      (
        await h.deps.db.query<{ invocation_id: string; status: string }>(
          'SELECT invocation_id, status FROM invocations WHERE deployment_id = $1',
          [t.deploymentId],
        )
      ).map((r) => [r.invocation_id, r.status]),
    );
    const odd: string[] = [];
    for (const id of attempted) {
      const res = await h.request({
        method: 'POST',
        url: '/api/v1/mcp/stdio/record-usage',
        headers: bearer(t.apiKey),
        payload: { tool_name: tool, invocation_id: id },
      });
      expect(res.statusCode, res.body).toBe(200);
      expect(json(res)).toMatchObject({ success: true });
      if (res.headers['idempotent-replayed'] === 'true') replays++;
      else if (before.has(id) && odd.length < 5) odd.push(`${id} ${statusBefore.get(id)} ${res.body}`);
    }
    expect(odd).toEqual([]);
    expect(replays).toBe(before.size);
    const after = await recorded();
    expect(after.every((r) => r.n === 1)).toBe(true);
    expect(after.length).toBe(attempted.size);
    expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: attempted.size });
    await f.expectLedgerConsistent(t);
  }, 120_000);
});
