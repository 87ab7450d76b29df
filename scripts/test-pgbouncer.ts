/**
 * The PostgreSQL suite through PgBouncer in transaction mode (docs/operations.md, "PgBouncer"): starts
 * Debian's pgbouncer on a free loopback port in front of the PostgreSQL server on 127.0.0.1:5432, then
 * runs the `postgres` vitest project with every connection going through it — the run's database is
 * created, migrated, used and dropped through the pooler — and named prepared statements off
 * (DATABASE_PREPARED_STATEMENTS=false: pgbouncer before 1.21 cannot keep them). The pooler gets fewer
 * server connections than the tests' pools hold clients, so transactions of different clients share
 * server connections, as in production. Three tests are left out (CG_TEST_POOLER): one kills backends
 * by application_name, which through the pooler would hit other files' transactions on shared server
 * connections; the AI settle faults' relay finds the statement to cut by its prepared statement's name,
 * which the pooler's run does not send; the statement timeouts are set with the `options` startup
 * parameter, which PgBouncer refuses.
 *
 *   npm run test:pgbouncer [-- vitest arguments, e.g. a file]
 *
 * Exits with vitest's code; pgbouncer is stopped either way.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

const root = fileURLToPath(new URL('..', import.meta.url));
const BIN = process.env.PGBOUNCER_BIN ?? '/usr/sbin/pgbouncer';
const UPSTREAM = { host: process.env.PGBOUNCER_UPSTREAM_HOST ?? '127.0.0.1', port: Number(process.env.PGBOUNCER_UPSTREAM_PORT ?? 5432) };

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

function version(): string {
  const out = spawnSync(BIN, ['--version'], { encoding: 'utf8' });
  return (out.stdout || out.stderr).split('\n')[0] ?? 'unknown';
}

async function waitForPooler(url: string, log: string): Promise<void> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1_000 });
    try {
      await client.connect();
      await client.query('SELECT 1');
      await client.end();
      return;
    } catch (err) {
      await client.end().catch(() => {});
      if (Date.now() > deadline) {
        const tail = existsSync(log) ? readFileSync(log, 'utf8').split('\n').slice(-20).join('\n') : '(no log)';
        throw new Error(`pgbouncer did not answer within 15 s: ${(err as Error).message}\n${tail}`);
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

async function main(): Promise<number> {
  if (!existsSync(BIN)) {
    process.stderr.write(`test:pgbouncer: ${BIN} not found (apt-get install pgbouncer, or set PGBOUNCER_BIN)\n`);
    return 2;
  }
  const dir = mkdtempSync(join(tmpdir(), 'creditgate-pgbouncer-'));
  const port = await freePort();
  const log = join(dir, 'pgbouncer.log');
  // pgbouncer refuses to run as root: as root, it runs as the postgres user, which owns its directory.
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const ids = spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' });
    const gid = spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' });
    chownSync(dir, Number(ids.stdout.trim()), Number(gid.stdout.trim()));
  }
  chmodSync(dir, 0o700);
  writeFileSync(
    join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      // Every database name, created by the suite as it goes, to the one server as postgres.
      `* = host=${UPSTREAM.host} port=${UPSTREAM.port} user=postgres`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = any',
      'pool_mode = transaction',
      'max_client_conn = 2000',
      // Fewer server connections than clients: transactions of different clients take turns on them.
      'default_pool_size = 20',
      'max_db_connections = 40',
      'server_reset_query =',
      'ignore_startup_parameters = extra_float_digits',
      `logfile = ${log}`,
      `pidfile = ${join(dir, 'pgbouncer.pid')}`,
      'log_connections = 0',
      'log_disconnections = 0',
      '',
    ].join('\n'),
  );
  const args = [join(dir, 'pgbouncer.ini')];
  const bouncer: ChildProcess = asRoot ? spawn('runuser', ['-u', 'postgres', '--', BIN, ...args], { stdio: 'inherit' }) : spawn(BIN, args, { stdio: 'inherit' });
  const adminUrl = `postgres://postgres@127.0.0.1:${port}/postgres`;
  try {
    await waitForPooler(adminUrl, log);
    process.stderr.write(`test:pgbouncer: ${version()} on 127.0.0.1:${port}, transaction mode, in front of ${UPSTREAM.host}:${UPSTREAM.port}\n`);
    const vitest = spawn(
      process.execPath,
      [join(root, 'node_modules', 'vitest', 'vitest.mjs'), 'run', '--project', 'postgres', ...process.argv.slice(2)],
      {
        cwd: root,
        stdio: 'inherit',
        env: {
          ...process.env,
          TEST_DATABASE_URL: adminUrl,
          CG_TEST_PREPARED_STATEMENTS: process.env.CG_TEST_PREPARED_STATEMENTS ?? 'false',
          // The few tests that cannot run through a pooler ask for this (test/faults.test.ts).
          CG_TEST_POOLER: 'pgbouncer',
        },
      },
    );
    const code = await new Promise<number>((resolve) => vitest.on('exit', (c, signal) => resolve(c ?? (signal ? 1 : 0))));
    return code;
  } finally {
    bouncer.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 300));
    bouncer.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
}

process.exit(await main());
