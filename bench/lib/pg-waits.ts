import pg from 'pg';
import { ADMIN_URL } from './postgres.js';
import { round } from './stats.js';

/**
 * What the service's PostgreSQL backends are doing during a measurement: pg_stat_activity sampled
 * every `intervalMs` from one connection of its own (to the admin database, not counted). Each key
 * is "state: wait" (e.g. `active: Lock/transactionid`, `active: running` for no wait event,
 * `idle in transaction: Client/ClientRead` = waiting for the service's next statement inside a
 * transaction); the value is the mean number of backends in it per sample. Idle backends are left out.
 */
export interface PgWaits {
  samples: number;
  backends: Record<string, number>;
}

export async function startPgWaits(database: string, intervalMs = 20): Promise<() => Promise<PgWaits>> {
  const client = new pg.Client({ connectionString: ADMIN_URL });
  await client.connect();
  const sums: Record<string, number> = {};
  let samples = 0;
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const started = performance.now();
      const { rows } = await client.query<{ key: string; n: number }>(
        `SELECT state || ': ' || COALESCE(wait_event_type || '/' || wait_event, 'running') AS key, count(*)::int AS n
         FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend' AND state <> 'idle' GROUP BY 1`,
        [database],
      );
      samples++;
      for (const r of rows) sums[r.key] = (sums[r.key] ?? 0) + r.n;
      const rest = intervalMs - (performance.now() - started);
      if (rest > 0) await new Promise((resolve) => setTimeout(resolve, rest));
    }
  })();
  return async () => {
    stopped = true;
    await loop;
    await client.end();
    const backends: Record<string, number> = {};
    for (const [k, v] of Object.entries(sums).sort((a, b) => b[1] - a[1])) if (samples > 0 && v / samples >= 0.01) backends[k] = round(v / samples);
    return { samples, backends };
  };
}
