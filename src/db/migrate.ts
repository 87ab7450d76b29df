import { fileURLToPath } from 'node:url';
import type { PGlite } from '@electric-sql/pglite';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { migrate as migratePglite } from 'drizzle-orm/pglite/migrator';
import { systemClock } from '../clock.js';
import { ensureUsagePartitions } from '../modules/credits/index.js';
import type { Database } from './client.js';

/** The migrations drizzle-kit generates (`npm run db:generate`), two levels up from src/db and dist/db alike. */
export const MIGRATIONS_FOLDER = fileURLToPath(new URL('../../migrations', import.meta.url));

// Any constant: instances starting together against one PostgreSQL migrate one at a time.
const MIGRATION_LOCK = 727_274_001;

/**
 * Apply the migrations, then partition usage_records by month if it is not yet (once, without a long
 * lock: credits/partitions.ts) and give this month and the next a partition.
 */
export async function runMigrations(db: Database): Promise<void> {
  await applyMigrations(db, MIGRATIONS_FOLDER);
  await ensureUsagePartitions(db, systemClock.now());
}

/**
 * The migrations of `folder` not applied yet, one instance at a time (the upgrade test applies an older
 * set). On PostgreSQL everything happens in one transaction under a transaction-scoped advisory lock:
 * nothing holds session state, so it works through a pooler in transaction mode as well
 * (docs/operations.md, "PgBouncer"). The bookkeeping is drizzle's own table, as drizzle-kit reads it.
 */
export async function applyMigrations(db: Database, folder: string): Promise<void> {
  if (db.kind === 'pglite') {
    await migratePglite(drizzlePglite(db.driver as PGlite), { migrationsFolder: folder });
    return;
  }
  const migrations = readMigrationFiles({ migrationsFolder: folder });
  await db.transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
    await tx.query('CREATE SCHEMA IF NOT EXISTS drizzle');
    await tx.query('CREATE TABLE IF NOT EXISTS drizzle.__drizzle_migrations (id SERIAL PRIMARY KEY, hash text NOT NULL, created_at bigint)');
    const last = await tx.query<{ created_at: string | number | null }>('SELECT created_at FROM drizzle.__drizzle_migrations ORDER BY created_at DESC LIMIT 1');
    const after = last[0]?.created_at == null ? null : Number(last[0].created_at);
    for (const migration of migrations) {
      if (after !== null && migration.folderMillis <= after) continue;
      for (const statement of migration.sql) if (statement.trim() !== '') await tx.query(statement);
      await tx.query('INSERT INTO drizzle.__drizzle_migrations (hash, created_at) VALUES ($1, $2)', [migration.hash, migration.folderMillis]);
    }
  });
}
