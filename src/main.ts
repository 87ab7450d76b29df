import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import { systemClock } from './clock.js';
import { EXIT } from './cli/exit-codes.js';
import { type Config, ConfigError, type LoadedConfig, loadConfig } from './config.js';
import { type Database, DataDirLockedError, openDatabase } from './db/client.js';
import { runMigrations } from './db/migrate.js';
import { startWorkers } from './workers/catalog.js';

/** The configuration, or exit 2 with a message naming the variable (docs/cli.md, exit codes). */
function configOrExit(env: NodeJS.ProcessEnv): LoadedConfig {
  try {
    return loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`creditgate: invalid configuration: ${err.message}\n`);
      process.exit(EXIT.usage);
    }
    throw err;
  }
}

/** The database, or exit 3 when another process holds the embedded data directory. */
async function databaseOrExit(config: Config): Promise<Database> {
  try {
    return await openDatabase({
      databaseUrl: config.databaseUrl,
      dataDir: config.dataDir,
      poolSize: config.databasePoolSize,
      sharedBuffersMb: config.pgliteSharedBuffersMb,
    });
  } catch (err) {
    if (err instanceof DataDirLockedError) {
      process.stderr.write(`creditgate: ${err.message}\n`);
      process.exit(EXIT.locked);
    }
    throw err;
  }
}

/** `creditgate migrate`: apply the migrations and close. */
export async function migrate(env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const { config } = configOrExit(env);
  const db = await databaseOrExit(config);
  try {
    await runMigrations(db);
  } finally {
    await db.close();
  }
}

/**
 * Start the service: configuration first (fail fast, naming the variable), then the database and its
 * migrations, then the app and the workers; SIGINT/SIGTERM drain in-flight requests and workers.
 */
export async function serve(env: NodeJS.ProcessEnv = process.env): Promise<FastifyInstance> {
  const { config, generated } = configOrExit(env);
  const names = Object.keys(generated);
  if (names.length > 0) {
    process.stdout.write(
      `creditgate: development secrets generated and stored in ${config.dataDir}/secrets.json:\n` +
        Object.entries(generated)
          .map(([name, value]) => `  ${name}=${value}\n`)
          .join('') +
        '  (set them in the environment for production; NODE_ENV=production refuses to start without them)\n',
    );
  }
  const db = await databaseOrExit(config);
  await runMigrations(db);
  const app = await buildApp({ config, db, clock: systemClock });
  const workers = startWorkers(app.deps);
  let closing = false;
  const shutdown = async (signal: string) => {
    if (closing) return;
    closing = true;
    app.log.info({ signal }, 'shutting down');
    await app.close();
    await workers.stop();
    await db.close();
    process.exit(0);
  };
  process.once('SIGINT', () => void shutdown('SIGINT'));
  process.once('SIGTERM', () => void shutdown('SIGTERM'));
  const address = await app.listen({ port: config.port, host: config.host });
  const storage = config.databaseUrl
    ? config.databaseUrl === 'memory://'
      ? 'in-memory PGlite'
      : 'PostgreSQL'
    : `embedded PGlite in ${config.dataDir}`;
  app.log.info(`creditgate listening on ${address} (${storage}); API docs at /docs`);
  return app;
}
