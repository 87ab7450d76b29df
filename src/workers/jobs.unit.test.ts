import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { MAIL_POLICY, MAIL_QUEUE } from '../lib/mailer.js';
import { METER_POLICY, METER_QUEUE } from '../modules/billing/meter-events.js';
import { STRIPE_EVENTS_POLICY, STRIPE_EVENTS_QUEUE } from '../modules/billing/stripe-events.js';
import { EVENTS_QUEUE } from '../modules/events/outbox.js';
import { PROVISION_POLICY, PROVISION_QUEUE } from '../modules/templates/provision.js';
import { CLAIM_DUE_SQL, DELIVERY_POLICY, DELIVERY_QUEUE, RETRY_SCHEDULE_MS } from '../modules/webhooks/organization.js';
import { type Backoff, backoffMs } from './backoff.js';
import { WORKERS } from './catalog.js';
import { type ClaimSpec, claimStatement } from './claim.js';
import { exhausted, retryAt } from './jobs.js';

/** The job runner's pure parts (docs/jobs.md): the backoff, each queue's policy, the claim statement's text. */
const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;

describe('backoff', () => {
  it('a schedule without jitter waits exactly its steps, the last one repeating (mail: 1 min, 5 min, 30 min, 2 h)', () => {
    const waits = [1, 2, 3, 4, 5, 9].map((n) => backoffMs(MAIL_POLICY.backoff!, n, { random: () => 0.99 }));
    expect(waits).toEqual([MINUTE, 5 * MINUTE, 30 * MINUTE, 2 * HOUR, 2 * HOUR, 2 * HOUR]);
  });

  it('a schedule with jitter stays within ±20 % and matches what the webhook queue computed before the runner', () => {
    // The formula the webhook deliveries and template provisioning used (docs/webhooks.md: 30 s, 2 min, 10 min, 1 h, ±20 %).
    const formerWait = (failed: number, retryAfterMs: number | null, r: number) => {
      const base = RETRY_SCHEDULE_MS[Math.min(failed, RETRY_SCHEDULE_MS.length) - 1]!;
      const [low, high] = [base * 0.8, base * 1.2];
      if (retryAfterMs !== null) return Math.round(Math.min(high, Math.max(low, retryAfterMs)));
      return Math.round(low + r * (high - low));
    };
    for (const policy of [DELIVERY_POLICY, PROVISION_POLICY]) {
      for (let failed = 1; failed <= 6; failed++) {
        for (const r of [0, 0.25, 0.5, 0.999]) {
          expect(backoffMs(policy.backoff!, failed, { random: () => r })).toBe(formerWait(failed, null, r));
        }
        for (const asked of [0, 1_000, 31_000, 10 * HOUR]) {
          expect(backoffMs(policy.backoff!, failed, { retryAfterMs: asked })).toBe(formerWait(failed, asked, 0));
        }
      }
    }
    expect(backoffMs(DELIVERY_POLICY.backoff!, 1, { random: () => 0 })).toBe(24 * SECOND);
    expect(backoffMs(DELIVERY_POLICY.backoff!, 4, { retryAfterMs: 10 * HOUR })).toBe(1.2 * HOUR);
  });

  it('exponential: 30 s doubling, capped at 1 h, whatever the count (meter events and Stripe events)', () => {
    // What both queues computed before: min(1 h, 30 s × 2^min(failures − 1, 10)).
    const formerWait = (failures: number) => Math.min(HOUR, 30 * SECOND * 2 ** Math.min(Math.max(0, failures - 1), 10));
    for (const policy of [METER_POLICY, STRIPE_EVENTS_POLICY]) {
      for (const n of [1, 2, 3, 5, 7, 8, 11, 50, 1_000_000]) expect(backoffMs(policy.backoff!, n)).toBe(formerWait(n));
    }
    expect([1, 2, 3, 4].map((n) => backoffMs(METER_POLICY.backoff!, n))).toEqual([30 * SECOND, MINUTE, 2 * MINUTE, 4 * MINUTE]);
  });

  it('a count below 1 is the first failure; a wait asked for is clamped to the band', () => {
    const exponential: Backoff = { kind: 'exponential', baseMs: 1000, factor: 3, capMs: 20_000, jitter: 0.5 };
    expect(backoffMs(exponential, 0, { random: () => 0.5 })).toBe(1000);
    expect(backoffMs(exponential, 3, { random: () => 0.5 })).toBe(9000);
    expect(backoffMs(exponential, 4, { random: () => 0.5 })).toBe(20_000);
    expect(backoffMs(exponential, 3, { retryAfterMs: 1 })).toBe(4500);
    expect(backoffMs(exponential, 3, { retryAfterMs: 60_000 })).toBe(13_500);
  });

  it('retryAt adds the wait to now; exhausted says when the attempts are used up', () => {
    const now = new Date('2026-01-15T12:00:00.000Z');
    expect(retryAt(MAIL_POLICY, 2, now).getTime() - now.getTime()).toBe(5 * MINUTE);
    expect(retryAt({ ...MAIL_POLICY, backoff: null }, 2, now)).toEqual(now);
    expect([4, 5, 6].map((n) => exhausted(MAIL_POLICY, n))).toEqual([false, true, true]);
    expect(exhausted(METER_POLICY, 1_000)).toBe(false);
  });
});

describe('the six queues', () => {
  const queues = [MAIL_QUEUE, EVENTS_QUEUE, DELIVERY_QUEUE, METER_QUEUE, STRIPE_EVENTS_QUEUE, PROVISION_QUEUE];

  it('keep the policies they had before the runner (docs/jobs.md, The queues)', () => {
    const table = Object.fromEntries(
      queues.map((q) => [q.name, { table: q.table, batch: q.policy.batchSize, lease: q.policy.leaseMs, max: q.policy.maxAttempts, lanes: q.policy.concurrency }]),
    );
    expect(table).toEqual({
      'mail-retry': { table: 'email_outbox', batch: 20, lease: 10 * MINUTE, max: 5, lanes: 1 },
      'event-dispatch': { table: 'outbox_events', batch: 100, lease: null, max: null, lanes: 1 },
      'webhook-delivery': { table: 'webhook_deliveries', batch: 20, lease: MINUTE, max: 5, lanes: 20 },
      'meter-events': { table: 'meter_event_outbox', batch: 100, lease: 2 * MINUTE, max: null, lanes: 8 },
      'stripe-events': { table: 'stripe_events', batch: 20, lease: MINUTE, max: null, lanes: 1 },
      'template-provisioning': { table: 'template_deployments', batch: 10, lease: 2 * MINUTE, max: 5, lanes: Infinity },
    });
  });

  it('are the catalog workers of the same name, table and batch', () => {
    for (const q of queues) {
      expect(WORKERS.find((w) => w.name === q.name)).toMatchObject({ table: q.table, batchSize: q.policy.batchSize });
    }
  });
});

describe('the claim statement', () => {
  const spec: ClaimSpec = {
    name: 'unit-claim-shape',
    table: 'things',
    key: 'id',
    pending: "q.status = 'pending'",
    dueAt: 'q.next_attempt_at',
    lease: { kind: 'column', column: 'leased_until' },
    countAttempt: 'attempts',
    set: ['updated_at = :now'],
    where: ['(:owner::uuid IS NULL OR q.owner = :owner::uuid)'],
    orderBy: 'q.next_attempt_at',
    returning: 'j.*',
  };

  it('is one UPDATE … FROM (SELECT … FOR UPDATE OF q SKIP LOCKED) with now, limit and lease as $1, $2, $3', () => {
    const { text, names } = claimStatement(spec);
    expect(names).toEqual(['now', 'limit', 'lease', 'owner']);
    expect(text).toBe(
      "UPDATE things j SET leased_until = $3, attempts = j.attempts + 1, updated_at = $1 FROM (SELECT q.id FROM things q WHERE q.status = 'pending'" +
        ' AND q.next_attempt_at <= $1 AND (q.leased_until IS NULL OR q.leased_until <= $1) AND ($4::uuid IS NULL OR q.owner = $4::uuid)' +
        ' ORDER BY q.next_attempt_at LIMIT $2 FOR UPDATE OF q SKIP LOCKED) due WHERE j.id = due.id RETURNING j.*',
    );
  });

  it('leases a row by moving its due column, or by the transaction (then it only locks, and numbers what it uses)', () => {
    const due = claimStatement({ ...spec, name: 'unit-claim-due', lease: { kind: 'due', column: 'next_attempt_at' }, countAttempt: undefined, set: [], where: [] });
    expect(due.text).toContain('SET next_attempt_at = $3 FROM');
    expect(due.text).not.toContain('leased_until');
    const locked = claimStatement({ ...spec, name: 'unit-claim-tx', dueAt: null, lease: { kind: 'transaction' }, where: [], returning: 'j.id' });
    expect(locked.names).toEqual(['limit']);
    expect(locked.text).toBe(
      "SELECT j.id FROM (SELECT q.id FROM things q WHERE q.status = 'pending' ORDER BY q.next_attempt_at LIMIT $1 FOR UPDATE OF q SKIP LOCKED) due JOIN things j ON j.id = due.id",
    );
  });

  it('the webhook worker keeps its exported claim and parameters ($1 now, $2 batch, $3 lease end, $4 one webhook or null)', () => {
    expect(CLAIM_DUE_SQL).toMatch(/\nUPDATE webhook_deliveries j SET leased_until = \$3, updated_at = \$1\nFROM \(SELECT/);
    expect(CLAIM_DUE_SQL).toContain('LIMIT $2');
    expect(CLAIM_DUE_SQL).toContain('FOR UPDATE OF q SKIP LOCKED');
    expect(CLAIM_DUE_SQL).toContain('$4::uuid IS NULL');
  });
});

describe('layers', () => {
  it('the runner imports no module: the queue modules import it', () => {
    for (const file of ['jobs.ts', 'claim.ts', 'backoff.ts']) {
      const text = readFileSync(new URL(`./${file}`, import.meta.url), 'utf8');
      expect(text, file).not.toMatch(/from '\.\.\/modules\//);
    }
  });
});
