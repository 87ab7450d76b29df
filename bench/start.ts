import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, utimesSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { productionServerEnv } from './lib/env.js';
import { createBenchDatabase } from './lib/postgres.js';

/**
 * How long a start takes (docs/benchmarks.md, "Start"), printed as Markdown:
 *   1. `creditgate serve` on PostgreSQL killed with SIGKILL and started again: time from the spawn to
 *      "listening" and to the first 200 of /readyz;
 *   2. `npm start` with the build up to date, and with it stale (so prestart builds first);
 *   3. the phases of a start (bench/lib/start-phases.mjs).
 * Needs a build (npm run build) and PostgreSQL at 127.0.0.1:5432. `npx tsx bench/start.ts [runs]`.
 */
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const RUNS = Number(process.argv[2] ?? 5);
const PORT = 18_000 + Math.floor(Math.random() * 1000);

interface Started {
  child: ChildProcess;
  listeningMs: number;
  readyMs: number;
}

/** Spawn in its own process group (npm start is npm → sh → node) and poll /readyz every 10 ms. */
async function start(command: string, args: string[], env: NodeJS.ProcessEnv): Promise<Started> {
  const spawnedAt = Date.now();
  const child = spawn(command, args, { cwd: ROOT, env, detached: true, stdio: ['ignore', 'pipe', 'inherit'] });
  let listeningAt: number | undefined;
  let out = '';
  child.stdout!.on('data', (d: Buffer) => {
    out += d.toString();
    const line = out.split('\n').slice(0, -1).find((l) => l.includes('creditgate listening'));
    if (line && listeningAt === undefined) listeningAt = (JSON.parse(line) as { time: number }).time;
  });
  for (;;) {
    if (child.exitCode !== null) throw new Error(`exited with ${child.exitCode}:\n${out}`);
    const res = await fetch(`http://127.0.0.1:${PORT}/readyz`).catch(() => null);
    if (res?.status === 200) {
      const readyAt = Date.now();
      await sleep(20);
      return { child, listeningMs: (listeningAt ?? readyAt) - spawnedAt, readyMs: readyAt - spawnedAt };
    }
    await sleep(10);
  }
}

async function kill(child: ChildProcess, signal: NodeJS.Signals): Promise<void> {
  const exited = new Promise((resolve) => child.once('exit', resolve));
  process.kill(-child.pid!, signal);
  await exited;
}

const row = (name: string, runs: Started[]) => {
  const ms = (xs: number[]) => `${Math.min(...xs)} / ${Math.round(xs.reduce((a, b) => a + b, 0) / xs.length)} / ${Math.max(...xs)}`;
  return `| ${name} | ${runs.length} | ${ms(runs.map((r) => r.listeningMs))} | ${ms(runs.map((r) => r.readyMs))} |`;
};

const db = await createBenchDatabase();
try {
  const env = productionServerEnv({
    databaseUrl: db.url,
    poolSize: 20,
    dataDir: mkdtempSync(join(tmpdir(), 'cg-start-')),
    extra: { PORT: String(PORT), LOG_LEVEL: 'info', LOG_FORMAT: 'json' },
  });
  const serve = ['dist/cli.js', 'serve'];
  const first = await start(process.execPath, serve, env);
  const restarts: Started[] = [];
  let running = first.child;
  for (let i = 0; i < RUNS; i++) {
    await kill(running, 'SIGKILL');
    const next = await start(process.execPath, serve, env);
    restarts.push(next);
    running = next.child;
  }
  await kill(running, 'SIGTERM');

  const npm = async (stale: boolean): Promise<Started[]> => {
    const runs: Started[] = [];
    for (let i = 0; i < Math.min(RUNS, 3); i++) {
      if (stale) utimesSync(join(ROOT, 'dist/cli.js'), 0, 0);
      const started = await start('npm', ['start', '--silent'], env);
      runs.push(started);
      await kill(started.child, 'SIGTERM');
    }
    return runs;
  };
  // Build now if a source changed since the last build, so the first of these runs measures no build either.
  spawnSync(process.execPath, ['scripts/build-if-stale.mjs'], { cwd: ROOT, stdio: 'inherit' });
  const upToDate = await npm(false);
  const rebuilt = await npm(true);

  const phases = Array.from({ length: RUNS }, () => {
    const run = spawnSync(process.execPath, ['bench/lib/start-phases.mjs'], { cwd: ROOT, env: { ...env, LOG_LEVEL: 'warn' }, encoding: 'utf8' });
    if (run.status !== 0) throw new Error(run.stderr);
    return JSON.parse(run.stdout) as Record<string, number>;
  });
  const phaseRows = Object.keys(phases[0]!)
    .map((name) => `| ${name} | ${Math.round(phases.reduce((sum, p) => sum + p[name]!, 0) / phases.length)} |`)
    .join('\n');

  process.stdout.write(`PostgreSQL ${db.version}, Node ${process.version}; milliseconds from the spawn, min / mean / max

| Start | Runs | Listening | /readyz 200 |
|---|---|---|---|
${row('creditgate serve, empty database (every migration)', [first])}
${row('creditgate serve after SIGKILL', restarts)}
${row('npm start, build up to date', upToDate)}
${row('npm start, build stale (prestart builds)', rebuilt)}

Where the time of a restart goes (mean of ${RUNS}, ms):

| Phase | ms |
|---|---|
${phaseRows}
`);
} finally {
  await db.drop();
}
