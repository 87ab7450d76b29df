import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync, rmSync, symlinkSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

/**
 * The servers under test run in their own process (the load generator must not share their event
 * loop). Parent and child talk over the IPC channel: the child announces its port, then answers
 * calls (seed, verify) so the parent can reach an in-memory database that only the child holds.
 */
type ToChild = { type: 'call'; id: number; method: string; args: unknown };
type FromChild =
  | { type: 'ready'; port: number }
  | { type: 'reply'; id: number; ok: true; value: unknown }
  | { type: 'reply'; id: number; ok: false; error: string };

export interface ServerProcess {
  pid: number;
  url: string;
  call<T>(method: string, args?: unknown): Promise<T>;
  stop(): Promise<void>;
}

const START_TIMEOUT_MS = 120_000;

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const BUILD_DIR = join(ROOT, '.bench-build');
/** The servers tsconfig.bench.json compiles, as `bench/<file>` (read in the runner only: the servers import this module too). */
const compiledServers = () => (JSON.parse(readFileSync(join(ROOT, 'tsconfig.bench.json'), 'utf8')) as { files: string[] }).files;
let built: Promise<void> | undefined;

/**
 * Compile the servers of `npm run bench` and `bench/ab.ts` (tsconfig.bench.json: bench/server.ts,
 * bench/baseline-server.ts and what they import) with tsc into .bench-build/, once per process, so
 * they run as `npm start` runs creditgate: tsc's JavaScript, not tsx's on-the-fly transform, whose
 * esbuild output names every function it creates with a `__name` call (a few % of a busy server's
 * CPU; docs/benchmarks.md, "Method"). The tree keeps its depth, so the paths src/ resolves against
 * its own location (migrations/, package.json, dist/console/) are linked in beside it.
 */
function buildServers(): Promise<void> {
  built ??= (async () => {
    rmSync(BUILD_DIR, { recursive: true, force: true });
    const tsc = join(dirname(createRequire(import.meta.url).resolve('typescript/package.json')), 'bin', 'tsc');
    await promisify(execFile)(process.execPath, [tsc, '-p', 'tsconfig.bench.json'], { cwd: ROOT });
    for (const name of ['package.json', 'migrations', 'dist']) symlinkSync(join(ROOT, name), join(BUILD_DIR, name));
  })();
  return built;
}

/**
 * Start `bench/<file>` with IPC; resolves once it listens on 127.0.0.1. The servers tsconfig.bench.json
 * names run compiled (see buildServers), unless the server's env says BENCH_RUNTIME=tsx; the others
 * (the webhook, limiter, MCP and AI benchmarks' servers) run under tsx.
 * BENCH_SERVER_NODE_ARGS adds node flags to the servers (e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof").
 * BENCH_SERVER_BUILD=<dir> runs a compiled server from that build instead (docs/benchmarks.md, "Method").
 */
export async function spawnServer(file: string, args: string[], env: NodeJS.ProcessEnv): Promise<ServerProcess> {
  // Only a server that runs compiled waits for (and triggers) the build.
  const compiled = env.BENCH_RUNTIME !== 'tsx' && compiledServers().includes(`bench/${file}`);
  // BENCH_SERVER_BUILD: run this server from another checkout's build (its .bench-build/), e.g. the
  // commit before a change, for bench/ab.ts to compare two versions of the code round by round.
  const buildDir = compiled ? (env.BENCH_SERVER_BUILD ?? BUILD_DIR) : undefined;
  if (buildDir === BUILD_DIR) await buildServers();
  const script = buildDir ? join(buildDir, 'bench', file.replace(/\.ts$/, '.js')) : fileURLToPath(new URL(`../${file}`, import.meta.url));
  const loader = compiled ? [] : ['--import', 'tsx'];
  const nodeArgs = process.env.BENCH_SERVER_NODE_ARGS?.split(' ').filter(Boolean) ?? [];
  const child: ChildProcess = spawn(process.execPath, [...nodeArgs, ...loader, script, ...args], {
    env,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  let nextId = 1;
  const exited = once(child, 'exit');
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${file} did not start in time`)), START_TIMEOUT_MS);
    child.once('exit', (code) => reject(new Error(`${file} exited with code ${code} before listening`)));
    child.on('message', (raw) => {
      const msg = raw as FromChild;
      if (msg.type === 'ready') {
        clearTimeout(timer);
        resolve(msg.port);
      } else {
        const waiter = pending.get(msg.id);
        pending.delete(msg.id);
        if (msg.ok) waiter?.resolve(msg.value);
        else waiter?.reject(new Error(msg.error));
      }
    });
  });
  child.once('exit', (code, signal) => {
    for (const waiter of pending.values()) waiter.reject(new Error(`${file} exited (${code ?? signal})`));
    pending.clear();
  });
  return {
    pid: child.pid!,
    url: `http://127.0.0.1:${port}`,
    call<T>(method: string, args?: unknown): Promise<T> {
      const id = nextId++;
      const message: ToChild = { type: 'call', id, method, args };
      return new Promise<T>((resolve, reject) => {
        pending.set(id, { resolve: (v) => resolve(v as T), reject });
        child.send(message);
      });
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** In the child: announce the port and answer the parent's calls. */
export function serveParent(port: number, handlers: Record<string, (args: unknown) => Promise<unknown>>): void {
  process.on('message', (raw) => {
    const msg = raw as ToChild;
    if (msg.type !== 'call') return;
    const handler = handlers[msg.method];
    const reply = (m: FromChild) => process.send?.(m);
    if (!handler) {
      reply({ type: 'reply', id: msg.id, ok: false, error: `unknown method ${msg.method}` });
      return;
    }
    handler(msg.args).then(
      (value) => reply({ type: 'reply', id: msg.id, ok: true, value }),
      (err: unknown) => reply({ type: 'reply', id: msg.id, ok: false, error: err instanceof Error ? err.stack ?? err.message : String(err) }),
    );
  });
  // The parent going away must not leave a server behind.
  process.on('disconnect', () => process.kill(process.pid, 'SIGTERM'));
  process.send?.({ type: 'ready', port } satisfies FromChild);
}
