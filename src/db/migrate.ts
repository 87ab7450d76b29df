import { fileURLToPath } from 'node:url';
import type { PGlite } from '@electric-sql/pglite';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { migrate as migratePg } from 'drizzle-orm/node-postgres/migrator';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { migrate as migratePglite } from 'drizzle-orm/pglite/migrator';
import type pg from 'pg';
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

/** The migrations of `folder` not applied yet, one instance at a time (the upgrade test applies an older set). */
export async function applyMigrations(db: Database, folder: string): Promise<void> {
  if (db.kind === 'pglite') {
    await migratePglite(drizzlePglite(db.driver as PGlite), { migrationsFolder: folder });
    return;
  }
  const client = await (db.driver as pg.Pool).connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK]);
    await migratePg(drizzlePg(client), { migrationsFolder: folder });
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]).catch(() => {});
    client.release();
  }
}
