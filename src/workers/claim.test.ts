import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dbKind, testDatabase } from '../../test/harness.js';
import type { Database } from '../db/client.js';
import { Metrics } from '../lib/metrics.js';
import { MAIL_QUEUE } from '../lib/mailer.js';
import { type ClaimSpec, claimJobs } from './claim.js';
import { type JobQueue, runJobs } from './jobs.js';

/**
 * The shared claim on the real database (docs/jobs.md, Claim and Lease): concurrent claimers never
 * get the same job, and a job whose lease ran out is claimed again. The rows are this file's own
 * organization's and dated in the year 2999, so no other suite's worker pass (on today's clocks)
 * finds them due, and the claims here, filtered by organization, take nothing of theirs.
 */
const T0 = new Date('2999-01-01T00:00:00.000Z');
const at = (ms: number) => new Date(T0.getTime() + ms);
const MINUTE = 60_000;

let db: Database;
let organization: string;
const metrics = new Metrics();

beforeAll(async () => {
  db = await testDatabase();
  const rows = await db.query<{ id: string }>(`INSERT INTO organizations (name, slug) VALUES ('jobs claim test', $1) RETURNING id`, [
    `jobs-claim-${randomUUID()}`,
  ]);
  organization = rows[0]!.id;
});
afterAll(async () => {
  await db.query('DELETE FROM email_outbox WHERE organization_id = $1', [organization]);
  await db.query('DELETE FROM webhook_deliveries WHERE organization_id = $1', [organization]);
  await db.query('DELETE FROM organizations WHERE id = $1', [organization]);
  metrics.close();
});

/** `n` unsent mails of this file's organization, due a minute after `created` (the mail-retry queue's rule). */
async function mails(n: number, created: Date): Promise<string[]> {
  const rows = await db.query<{ id: string }>(
    `INSERT INTO email_outbox (organization_id, "to", subject, body, template, created_at)
     SELECT $1, 'jobs@example.com', 'claim test', 'body', 'test', $2 FROM generate_series(1, $3::int) RETURNING id`,
    [organization, created, n],
  );
  return rows.map((r) => r.id);
}

/** The mail-retry queue's own claim, with a handler that only notes who got what (and records nothing, so leases hold). */
function noting(handled: string[]): JobQueue<{ id: string }, { db: Database; clock: { now(): Date }; metrics: Metrics }> {
  return {
    name: 'claim-test',
    table: 'email_outbox',
    policy: { ...MAIL_QUEUE.policy, concurrency: 2 },
    claim: MAIL_QUEUE.claim as ClaimSpec,
    keyOf: (row) => row.id,
    async handle({ row }) {
      handled.push(row.id);
      return 'done';
    },
  };
}

const sum = async (counter: Metrics['jobsClaimed'] | Metrics['jobsFinished']) =>
  (await counter.get()).values.filter((v) => v.labels.queue === 'claim-test').reduce((n, v) => n + v.value, 0);

describe('the shared claim', () => {
  it('hands each job to one of many concurrent claimers, and every job to someone', async () => {
    const ids = await mails(40, at(-2 * MINUTE));
    const handled: string[] = [];
    const queue = noting(handled);
    const deps = { db, clock: { now: () => T0 }, metrics };
    // Six passes at once, 4 jobs each, round after round: on PostgreSQL they run on separate connections.
    for (let round = 0; round < 20; round++) {
      const claimed = await Promise.all(Array.from({ length: 6 }, () => runJobs(deps, queue, { batch: 4, params: { organization } })));
      if (claimed.every((n) => n === 0)) break;
    }
    expect(handled).toHaveLength(40);
    expect(new Set(handled)).toEqual(new Set(ids));
    expect(await sum(metrics.jobsClaimed)).toBe(40);
    expect(await sum(metrics.jobsFinished)).toBe(40);
  });

  it.runIf(dbKind === 'postgres')('skips the rows another claimer holds in an open transaction instead of waiting (PostgreSQL)', async () => {
    await mails(6, at(-2 * MINUTE));
    const spec = MAIL_QUEUE.claim as ClaimSpec;
    const claim = (q: Parameters<typeof claimJobs>[0]) =>
      claimJobs<{ id: string }>(q, spec, { now: T0, limit: 4, leaseUntil: at(10 * MINUTE), params: { organization } });
    let second: string[] = [];
    const first = await db.transaction(async (tx) => {
      const mine = (await claim(tx)).map((r) => r.id);
      // Still inside the first claim's transaction: its four rows are locked, not yet leased.
      second = (await claim(db)).map((r) => r.id);
      return mine;
    });
    expect(first).toHaveLength(4);
    expect(second).toHaveLength(2);
    expect(first.filter((id) => second.includes(id))).toEqual([]);
  });

  it('claims a job again once its lease (the moved due time) has run out, not before', async () => {
    await db.query('UPDATE email_outbox SET sent_at = $2 WHERE organization_id = $1', [organization, T0]);
    const ids = await mails(3, at(-2 * MINUTE));
    const spec = MAIL_QUEUE.claim as ClaimSpec;
    const lease = MAIL_QUEUE.policy.leaseMs!;
    const claim = (now: Date) =>
      claimJobs<{ id: string }>(db, spec, { now, limit: 10, leaseUntil: new Date(now.getTime() + lease), params: { organization } });
    expect((await claim(T0)).map((r) => r.id).sort()).toEqual([...ids].sort());
    expect(await claim(at(lease - 1))).toEqual([]);
    expect((await claim(at(lease))).map((r) => r.id).sort()).toEqual([...ids].sort());
  });

  it('claims a job again once its lease column has run out, counting each claim as an attempt', async () => {
    const rows = await db.query<{ id: string }>(
      `INSERT INTO webhook_deliveries (organization_id, url, method, payload, status, next_retry_at, created_at, updated_at)
       SELECT $1, 'https://example.com/hook', 'POST', '{}'::jsonb, 'pending', $2, $2, $2 FROM generate_series(1, 3) RETURNING id`,
      [organization, T0],
    );
    const ids = rows.map((r) => r.id).sort();
    const spec: ClaimSpec = {
      name: 'claim-test-lease-column',
      table: 'webhook_deliveries',
      key: 'id',
      pending: "q.status = 'pending'",
      dueAt: 'q.next_retry_at',
      lease: { kind: 'column', column: 'leased_until' },
      countAttempt: 'attempt_count',
      set: ['updated_at = :now'],
      where: ['q.organization_id = :organization'],
      orderBy: 'q.next_retry_at',
      returning: 'j.id, j.leased_until, j.attempt_count',
    };
    const claim = (now: Date) =>
      claimJobs<{ id: string; leased_until: Date; attempt_count: number }>(db, spec, { now, limit: 10, leaseUntil: new Date(now.getTime() + MINUTE), params: { organization } });
    const first = await claim(T0);
    expect(first.map((r) => r.id).sort()).toEqual(ids);
    expect(first.every((r) => r.leased_until.getTime() === at(MINUTE).getTime() && r.attempt_count === 1)).toBe(true);
    expect(await claim(at(MINUTE - 1))).toEqual([]);
    const again = await claim(at(MINUTE));
    expect(again.map((r) => r.id).sort()).toEqual(ids);
    expect(again.every((r) => r.attempt_count === 2)).toBe(true);
  });
});
