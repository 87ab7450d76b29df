import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';

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

/**
 * Start `bench/<file>` under tsx with IPC; resolves once it listens on 127.0.0.1.
 * BENCH_SERVER_NODE_ARGS adds node flags to the servers (e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof").
 */
export async function spawnServer(file: string, args: string[], env: NodeJS.ProcessEnv): Promise<ServerProcess> {
  const script = fileURLToPath(new URL(`../${file}`, import.meta.url));
  const nodeArgs = process.env.BENCH_SERVER_NODE_ARGS?.split(' ').filter(Boolean) ?? [];
  const child: ChildProcess = spawn(process.execPath, [...nodeArgs, '--import', 'tsx', script, ...args], {
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
