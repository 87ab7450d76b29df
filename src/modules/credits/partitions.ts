import type { Database, Queryable } from '../../db/client.js';

/**
 * Monthly partitions of usage_records (docs/usage-analytics.md, "Partitions"; ADR 0008).
 *
 * `usage_records` is partitioned by range of `timestamp`: `usage_records_before` holds everything
 * before the first monthly partition (on an existing installation, the table as it was, attached
 * without copying a row), one partition per UTC month after it (`usage_records_2027_01`), and
 * `usage_records_default` catches a record whose month has no partition yet (a month is created ahead
 * by the `usage-partitions` worker; the default is a safety net, never the rule). Each partition has
 * its own primary key on `id` (ids are random UUIDs; a key over all partitions would have to include
 * the month). The rollup triggers sit on the parent: moving rows between partitions, as this module
 * does, addresses the partitions directly and so changes no rollup.
 */

const PARENT = 'usage_records';
const BEFORE = 'usage_records_before';
const DEFAULT_PARTITION = 'usage_records_default';
/** Any constant: the partition changes of several instances run one at a time. */
const PARTITION_LOCK = 727_274_002;

/** The start of the UTC month of `at`, `months` later. */
export function monthStart(at: Date, months = 0): Date {
  return new Date(Date.UTC(at.getUTCFullYear(), at.getUTCMonth() + months, 1));
}

/** A monthly partition's name: usage_records_2027_01. */
export function monthPartition(start: Date): string {
  return `${PARENT}_${start.getUTCFullYear()}_${String(start.getUTCMonth() + 1).padStart(2, '0')}`;
}

/** A timestamp as an SQL literal (DDL takes no parameters); an ISO string has no quote in it. */
const literal = (at: Date) => `'${at.toISOString()}'::timestamptz`;

export interface UsagePartition {
  name: string;
  /** NULL for the partition before the first month (from MINVALUE) and for the default partition. */
  from: Date | null;
  /** NULL for the default partition. */
  to: Date | null;
  isDefault: boolean;
}

/** The partitions of usage_records with their bounds (empty while the table is not partitioned). */
export async function usagePartitions(db: Queryable): Promise<UsagePartition[]> {
  const rows = await db.query<{ name: string; from_ts: Date | null; to_ts: Date | null; is_default: boolean }>(
    `SELECT c.relname AS name,
            (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \\(''([^'']*)''\\)'))[1]::timestamptz AS from_ts,
            (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''([^'']*)''\\)'))[1]::timestamptz AS to_ts,
            pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT' AS is_default
     FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = to_regclass('${PARENT}')
     ORDER BY to_ts NULLS LAST`,
  );
  return rows.map((r) => ({ name: r.name, from: r.from_ts, to: r.to_ts, isDefault: r.is_default }));
}

async function isPartitioned(db: Queryable): Promise<boolean> {
  const rows = await db.query<{ relkind: string }>(`SELECT relkind FROM pg_class WHERE oid = to_regclass('${PARENT}')`);
  return rows[0]?.relkind === 'p';
}

const CHECK_VIOLATION = '23514';

/**
 * Turn an unpartitioned usage_records into the partitioned one, without a long lock and without
 * copying: a CHECK constraint bounding its timestamps is added NOT VALID and validated (a scan that
 * lets writes go on), then one short transaction renames the table to `usage_records_before`, creates
 * the partitioned parent with the same columns, constraints, indexes and triggers, and attaches the
 * old table as the partition up to the bound (the validated constraint spares the scan) and an empty
 * default partition. The bound is the start of the month after the clock's (or after the newest
 * record, if one is later), so writers of this month never meet it.
 * Returns how long the exclusive lock was held, in milliseconds (bench/growth.ts reports it).
 */
async function convert(db: Database, now: Date): Promise<{ lockedMs: number }> {
  let bound = monthStart(now, 1);
  const constraint = `${BEFORE}_bound`;
  for (let attempt = 0; ; attempt++) {
    await db.query(`ALTER TABLE ${PARENT} DROP CONSTRAINT IF EXISTS ${constraint}`);
    await db.query(`ALTER TABLE ${PARENT} ADD CONSTRAINT ${constraint} CHECK ("timestamp" < ${literal(bound)}) NOT VALID`);
    try {
      await db.query(`ALTER TABLE ${PARENT} VALIDATE CONSTRAINT ${constraint}`);
      break;
    } catch (err) {
      // A record after the bound (a clock ahead of this one): bound after the newest record instead.
      if ((err as { code?: string }).code !== CHECK_VIOLATION || attempt > 0) throw err;
      const latest = await db.query<{ latest: Date }>(`SELECT max("timestamp") AS latest FROM ${PARENT}`);
      bound = monthStart(latest[0]!.latest, 1);
    }
  }
  const started = performance.now();
  await db.transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock($1)', [PARTITION_LOCK]);
    if (await isPartitioned(tx)) return; // another instance was first
    await tx.query(`LOCK TABLE ${PARENT} IN ACCESS EXCLUSIVE MODE`);
    const indexes = await tx.query<{ name: string; def: string }>(
      `SELECT i.relname AS name, pg_get_indexdef(i.oid) AS def
       FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
       WHERE x.indrelid = to_regclass('${PARENT}') AND NOT x.indisprimary AND NOT x.indisunique`,
    );
    const triggers = await tx.query<{ name: string; def: string }>(
      `SELECT tgname AS name, pg_get_triggerdef(oid) AS def FROM pg_trigger WHERE tgrelid = to_regclass('${PARENT}') AND NOT tgisinternal`,
    );
    await tx.query(`ALTER TABLE ${PARENT} RENAME TO ${BEFORE}`);
    await tx.query(`ALTER INDEX IF EXISTS ${PARENT}_pkey RENAME TO ${BEFORE}_pkey`);
    for (const t of triggers) await tx.query(`DROP TRIGGER ${t.name} ON ${BEFORE}`);
    for (const i of indexes) await tx.query(`ALTER INDEX ${i.name} RENAME TO ${BEFORE}_${i.name.replace(`${PARENT}_`, '')}`);
    await tx.query(`CREATE TABLE ${PARENT} (LIKE ${BEFORE} INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE ("timestamp")`);
    await tx.query(`ALTER TABLE ${PARENT} DROP CONSTRAINT ${constraint}`);
    // The parent's indexes, created while it has no partition (nothing to build): attaching the old
    // table adopts its matching indexes, and every later partition gets its own.
    for (const i of indexes) await tx.query(i.def.replace(/ ON (\S+\.)?usage_records USING /, ` ON ${PARENT} USING `));
    await tx.query(`ALTER TABLE ${PARENT} ATTACH PARTITION ${BEFORE} FOR VALUES FROM (MINVALUE) TO (${literal(bound)})`);
    await tx.query(`CREATE TABLE ${DEFAULT_PARTITION} (LIKE ${PARENT} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`);
    await tx.query(`ALTER TABLE ${DEFAULT_PARTITION} ADD PRIMARY KEY (id)`);
    await tx.query(`ALTER TABLE ${PARENT} ATTACH PARTITION ${DEFAULT_PARTITION} DEFAULT`);
    for (const t of triggers) await tx.query(t.def);
  });
  return { lockedMs: performance.now() - started };
}

/**
 * Create the partition of the month starting at `start`, moving into it the rows the default
 * partition caught for that month. Written to the partitions directly: the rollups already count them.
 */
async function createMonth(db: Database, start: Date): Promise<boolean> {
  const name = monthPartition(start);
  const end = monthStart(start, 1);
  return db.transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock($1)', [PARTITION_LOCK]);
    const exists = await tx.query<{ found: boolean }>(`SELECT to_regclass('${name}') IS NOT NULL AS found`);
    if (exists[0]!.found) return false;
    await tx.query(`CREATE TABLE ${name} (LIKE ${PARENT} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`);
    await tx.query(`ALTER TABLE ${name} ADD PRIMARY KEY (id)`);
    await tx.query(
      `WITH moved AS (DELETE FROM ${DEFAULT_PARTITION} WHERE "timestamp" >= ${literal(start)} AND "timestamp" < ${literal(end)} RETURNING *)
       INSERT INTO ${name} SELECT * FROM moved`,
    );
    await tx.query(`ALTER TABLE ${PARENT} ATTACH PARTITION ${name} FOR VALUES FROM (${literal(start)}) TO (${literal(end)})`);
    return true;
  });
}

export interface EnsuredPartitions {
  /** The table was converted now; how long its exclusive lock was held. */
  converted: { lockedMs: number } | null;
  /** The monthly partitions created. */
  created: string[];
}

/**
 * Make usage_records partitioned (once) and give the clock's month and the next one a partition of
 * their own, unless the partition before the first month covers them. Idempotent and safe to run from
 * several instances: it runs after the migrations and hourly in the `usage-partitions` worker.
 */
export async function ensureUsagePartitions(db: Database, now: Date): Promise<EnsuredPartitions> {
  const converted = (await isPartitioned(db)) ? null : await convert(db, now);
  const partitions = await usagePartitions(db);
  const firstMonth = partitions.find((p) => p.name === BEFORE)?.to ?? null;
  const created: string[] = [];
  for (const start of [monthStart(now), monthStart(now, 1)]) {
    if (firstMonth !== null && start.getTime() < firstMonth.getTime()) continue;
    if (partitions.some((p) => p.from?.getTime() === start.getTime())) continue;
    if (await createMonth(db, start)) created.push(monthPartition(start));
  }
  return { converted, created };
}

/** What the usage retention keeps of an expired month (credits/retention.ts): see KEEP. */
export const KEEP = `(u.credits_short > 0
  -- A meter event still on its way reads the record's refunds (credits/meter-outbox.ts).
  OR EXISTS (SELECT 1 FROM meter_event_outbox m WHERE m.identifier = u.id AND m.status = 'pending'))`;

/**
 * Drop the monthly partitions that end at or before `cutoff` (docs/usage-analytics.md, Retention).
 * The few records retention keeps (KEEP) move to the default partition first. The rollups keep what
 * the partition held (a drop fires no trigger). Returns how many partitions went.
 */
export async function dropExpiredUsagePartitions(db: Database, cutoff: Date): Promise<number> {
  const expired = (await usagePartitions(db)).filter((p) => p.from !== null && p.to !== null && p.to.getTime() <= cutoff.getTime());
  let dropped = 0;
  for (const p of expired) {
    dropped += await db.transaction(async (tx) => {
      await tx.query('SELECT pg_advisory_xact_lock($1)', [PARTITION_LOCK]);
      const still = await tx.query<{ found: boolean }>(`SELECT to_regclass('${p.name}') IS NOT NULL AS found`);
      if (!still[0]!.found) return 0;
      await tx.query(`ALTER TABLE ${PARENT} DETACH PARTITION ${p.name}`);
      // KEEP, as two index-driven reads (the owing index; the pending meter events), not a scan of the month.
      await tx.query(
        `INSERT INTO ${DEFAULT_PARTITION}
         SELECT u.* FROM ${p.name} u WHERE u.credits_short > 0
         UNION ALL
         SELECT u.* FROM meter_event_outbox m JOIN ${p.name} u ON u.id = m.identifier WHERE m.status = 'pending' AND u.credits_short = 0`,
      );
      await tx.query(`DROP TABLE ${p.name}`);
      return 1;
    });
  }
  return dropped;
}

export { BEFORE as USAGE_BEFORE_PARTITION, DEFAULT_PARTITION as USAGE_DEFAULT_PARTITION };
