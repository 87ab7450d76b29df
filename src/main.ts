import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import { systemClock } from './clock.js';
import { EXIT } from './cli/exit-codes.js';
import { type Config, ConfigError, type LoadedConfig, loadConfig } from './config.js';
import { type Database, DataDirLockedError, openDatabase } from './db/client.js';
import { runMigrations } from './db/migrate.js';
import { v8FlagsSetAtStart } from './node-flags.js';
import { type RunningWorkers, startWorkers } from './workers/catalog.js';

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
      preparedStatements: config.databasePreparedStatements,
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

/** How long a shutdown may take before the process exits anyway (docs/cli.md, "Signals and shutdown"). */
export const SHUTDOWN_GRACE_MS = 20_000;

/** The words for the errors a listen can fail with; others are named by their code alone. */
const LISTEN_CAUSES: Record<string, string> = {
  EADDRINUSE: 'address already in use',
  EACCES: 'permission denied',
  EADDRNOTAVAIL: 'address not available',
  ENOTFOUND: 'host not found',
};

/** `creditgate: cannot listen on HOST:PORT: CAUSE (CODE)`, naming the address that failed (the main port or METRICS_PORT). */
export function listenFailure(err: unknown, host: string, port: number): string {
  const e = err as NodeJS.ErrnoException & { address?: string; port?: number };
  const where = `${e.address ?? host}:${e.port ?? port}`;
  const cause = e.code ? `${LISTEN_CAUSES[e.code] ?? e.code.toLowerCase()} (${e.code})` : (e.message ?? String(err));
  return `creditgate: cannot listen on ${where}: ${cause}\n`;
}

/** The secrets a developer calls the service with; the others (JWT_SECRET, ENCRYPTION_KEY) stay in the file. */
const PRINTED_SECRETS = ['ADMIN_API_KEY', 'MCP_SERVICE_KEY'];

/**
 * What a start that generated development secrets prints (README, "Quick start"): the keys to call the
 * service with and where all of them are kept. The signing and encryption keys are never printed: a
 * terminal's scrollback, a CI log or a screen share is no place for what forges sessions or decrypts.
 */
export function firstStartNotice(generated: Record<string, string | undefined>, dataDir: string): string {
  const names = Object.keys(generated);
  if (names.length === 0) return '';
  const shown = PRINTED_SECRETS.filter((name) => generated[name] !== undefined);
  const kept = names.filter((name) => !PRINTED_SECRETS.includes(name));
  return (
    `creditgate: development secrets generated and stored in ${join(dataDir, 'secrets.json')} (owner-only):\n` +
    shown.map((name) => `  ${name}=${generated[name]}\n`).join('') +
    (kept.length > 0 ? `  ${kept.join(', ')}: in that file, not shown\n` : '') +
    '  (set them in the environment for production; NODE_ENV=production refuses to start without them)\n'
  );
}

/**
 * Start the service: configuration first (fail fast, naming the variable), then the database and its
 * migrations, then the app, its port, and the workers. A port it cannot listen on ends it with exit 4
 * after closing what it opened; SIGINT/SIGTERM drain (docs/cli.md, "Signals and shutdown").
 */
export async function serve(env: NodeJS.ProcessEnv = process.env): Promise<FastifyInstance> {
  const { config, generated } = configOrExit(env);
  process.stdout.write(firstStartNotice(generated, config.dataDir));
  const db = await databaseOrExit(config);
  await runMigrations(db);
  const app = await buildApp({ config, db, clock: systemClock });
  let workers: RunningWorkers | undefined;
  // Answers given while draining close their connection, so a keep-alive client opens a new one,
  // which the closed port refuses before anything is sent (safe for it to retry elsewhere).
  let draining = false;
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (draining) reply.header('connection', 'close');
    done(null, payload);
  });

  /**
   * Close in order: the app first (no new connections; requests in flight answered; the deduction
   * batches it holds committed or refused; then its Redis clients and outbound HTTP), with the workers
   * told to start no new pass at the same moment; the database last, once nothing can use it. Bounded:
   * past SHUTDOWN_GRACE_MS the process exits 1 with a message rather than hang.
   */
  let closing: Promise<void> | undefined;
  const closeAll = (): Promise<void> => {
    closing ??= (async () => {
      const force = setTimeout(() => {
        process.stderr.write(`creditgate: shutdown did not finish within ${SHUTDOWN_GRACE_MS / 1000} s; exiting without waiting further\n`);
        process.exit(EXIT.failed);
      }, SHUTDOWN_GRACE_MS);
      draining = true;
      const stopping = workers?.stop();
      // Node closes the idle keep-alive connections once, when the port closes; a connection whose
      // answer was on its way then would stay open until its keep-alive timeout (72 s) and hold the close.
      const reaper = setInterval(() => app.server.closeIdleConnections(), 100);
      try {
        await app.close();
        await stopping;
      } finally {
        clearInterval(reaper);
        await db.close();
        clearTimeout(force);
      }
    })();
    return closing;
  };

  const onSignal = (signal: NodeJS.Signals) => {
    if (closing) {
      // A supervisor (npm, a terminal's Ctrl-C to the whole process group) may send the signal twice:
      // the drain goes on, bounded by SHUTDOWN_GRACE_MS.
      app.log.warn({ signal }, 'already shutting down; draining continues');
      return;
    }
    app.log.info({ signal }, 'shutting down: no new requests; answering those in flight');
    closeAll().then(
      () => {
        app.log.info({ signal }, 'shut down');
        process.exit(EXIT.ok);
      },
      (err: unknown) => {
        process.stderr.write(`creditgate: shutdown failed: ${(err as Error).message}\n`);
        process.exit(EXIT.failed);
      },
    );
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  let address: string;
  try {
    address = await app.listen({ port: config.port, host: config.host });
  } catch (err) {
    // A signal during the start: its handler closes and exits.
    if (closing) return app;
    process.stderr.write(listenFailure(err, config.host, config.port));
    await closeAll().catch((closeErr: unknown) => {
      process.stderr.write(`creditgate: closing after the failed start: ${(closeErr as Error).message}\n`);
    });
    process.exit(EXIT.listen);
  }
  // Background work only on an instance that serves: a start that cannot listen leaves nothing running.
  if (!closing) workers = startWorkers(app.deps);
  const storage = config.databaseUrl
    ? config.databaseUrl === 'memory://'
      ? 'in-memory PGlite'
      : 'PostgreSQL'
    : `embedded PGlite in ${config.dataDir}`;
  const flags = v8FlagsSetAtStart();
  app.log.info(`creditgate listening on ${address} (${storage}); API docs at /docs${flags.length > 0 ? `; V8 flags set at start: ${flags.join(' ')}` : ''}`);
  return app;
}
