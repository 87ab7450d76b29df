/**
 * A throwaway PostgreSQL cluster managed by Patroni, on loopback, for `npm run test:ha`
 * (docs/benchmarks.md, "Failover with Patroni"): one etcd, two Patroni nodes (synchronous_mode, so a
 * commit the service was told about is on the standby too) and HAProxy in front, sending connections
 * to whichever node Patroni's REST API calls the primary. Everything runs from one temporary
 * directory and is stopped by `stop()`; `killAll()` is the synchronous last resort for an exit.
 *
 * Debian's packages: `apt-get install patroni etcd-server haproxy`, PostgreSQL 15's binaries in
 * /usr/lib/postgresql/15/bin. PostgreSQL refuses to run as root: as root, Patroni (and with it
 * PostgreSQL) runs as the `postgres` user, which owns the directory.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { chownSync, closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

export const PG_BIN = process.env.HA_PG_BIN ?? '/usr/lib/postgresql/15/bin';
const PATRONI = process.env.HA_PATRONI_BIN ?? '/usr/bin/patroni';
const ETCD = process.env.HA_ETCD_BIN ?? '/usr/bin/etcd';
const HAPROXY = process.env.HA_HAPROXY_BIN ?? '/usr/sbin/haproxy';

/** What is missing to run the cluster, as an install hint; empty when everything is there. */
export function missingBinaries(): string[] {
  return [PATRONI, ETCD, HAPROXY, join(PG_BIN, 'postgres')].filter((bin) => !existsSync(bin));
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** `n` distinct free loopback ports: each listener stays open until all are picked, so none is picked twice. */
export async function freePorts(n: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<ReturnType<typeof createServer>>((resolve, reject) => {
          const server = createServer();
          server.once('error', reject);
          server.listen(0, '127.0.0.1', () => resolve(server));
        }),
    ),
  );
  const ports = servers.map((s) => (s.address() as { port: number }).port);
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  return ports;
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Thrown by a probe of `waitFor` to stop waiting at once (the process it waits for has exited). */
export class GiveUp extends Error {}

/** Poll `probe` until it returns a value (not undefined); bounded, so nothing waits for ever. */
export async function waitFor<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>, everyMs = 200): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (err) {
      if (err instanceof GiveUp) throw err;
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs / 1000} s${last ? ` (${(last as Error).message})` : ''}`);
    await sleep(everyMs);
  }
}

/** The HTTP status of a GET (Patroni's REST API answers 200/503 by role), or 0 when nothing answers. */
export async function httpStatus(url: string, timeoutMs = 1_000): Promise<number> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    await res.arrayBuffer();
    return res.status;
  } catch {
    return 0;
  }
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as { code?: string }).code === 'EPERM';
  }
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // Gone already.
  }
}

/** Processes this run started, by name, each with its log file: stopped by pid, never by name. */
export class Processes {
  private readonly children: Array<{ name: string; child: ChildProcess; log: string }> = [];

  constructor(private readonly logDir: string) {}

  start(name: string, command: string, args: string[], options: { env?: NodeJS.ProcessEnv; cwd?: string } = {}): ChildProcess {
    const log = join(this.logDir, `${name}.log`);
    const fd = openSync(log, 'a');
    try {
      const child = spawn(command, args, { cwd: options.cwd, env: options.env ?? process.env, stdio: ['ignore', fd, fd] });
      child.on('error', () => {});
      this.children.push({ name, child, log });
      return child;
    } finally {
      closeSync(fd);
    }
  }

  /** A process's whole log so far. */
  read(name: string): string {
    const entry = this.children.find((c) => c.name === name);
    return entry && existsSync(entry.log) ? readFileSync(entry.log, 'utf8') : '';
  }

  /** The last lines of a process's log, for a failure's message. */
  tail(name: string, lines = 30): string {
    const entry = this.children.find((c) => c.name === name);
    if (!entry || !existsSync(entry.log)) return `(${name}: no log)`;
    return `--- ${name} (${entry.log}) ---\n${this.read(name).split('\n').slice(-lines).join('\n')}`;
  }

  names(): string[] {
    return this.children.map((c) => c.name);
  }

  /** SIGTERM to the named processes, SIGKILL to those still running after `graceMs`. */
  async stop(names: string[], graceMs: number): Promise<void> {
    const targets = this.children.filter((c) => names.includes(c.name) && c.child.exitCode === null && c.child.signalCode === null);
    const exited = targets.map((c) => new Promise<void>((resolve) => (c.child.exitCode !== null ? resolve() : c.child.once('exit', () => resolve()))));
    for (const c of targets) if (c.child.pid) signal(c.child.pid, 'SIGTERM');
    await Promise.race([Promise.all(exited), sleep(graceMs)]);
    for (const c of targets) if (c.child.pid && c.child.exitCode === null && c.child.signalCode === null) signal(c.child.pid, 'SIGKILL');
    await Promise.race([Promise.all(exited), sleep(2_000)]);
  }

  /** Synchronous: SIGKILL to every child still running (the process is exiting). */
  killAll(): void {
    for (const c of this.children) if (c.child.pid && c.child.exitCode === null && c.child.signalCode === null) signal(c.child.pid, 'SIGKILL');
  }
}

export interface PatroniNode {
  name: string;
  pgPort: number;
  restPort: number;
  dataDir: string;
}

export interface Cluster {
  dir: string;
  nodes: PatroniNode[];
  haproxyPort: number;
  processes: Processes;
  /** A connection URL through HAProxy (always the primary) to `database`. */
  url(database: string): string;
  /** The node whose Patroni REST API answers 200 to /primary, if one does. */
  primary(): Promise<PatroniNode | undefined>;
  /** The postmaster's pid from its postmaster.pid, if it runs. */
  postmasterPid(node: PatroniNode): number | undefined;
  /** Everything it started, stopped (bounded), and its directory removed. */
  stop(): Promise<void>;
  /** Synchronous last resort on exit: SIGKILL to every process, the directory removed. */
  killAll(): void;
  /** The tails of every log, for a failure's message. */
  logs(): string;
}

interface Owner {
  uid: number;
  gid: number;
}

function postgresOwner(): Owner | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const uid = spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' });
  const gid = spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' });
  if (uid.status !== 0 || gid.status !== 0) throw new Error('running as root needs the postgres user (PostgreSQL refuses root)');
  return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
}

/**
 * The Patroni configuration of one node, as JSON (YAML's subset, which Patroni reads). Short timings
 * (loop_wait + 2 × retry_timeout ≤ ttl, as Patroni's dynamic configuration requires) and
 * primary_start_timeout 0: a crashed primary is failed over at once instead of restarted in place.
 */
function patroniConfig(scope: string, node: PatroniNode, nodeDir: string, etcdPort: number): Record<string, unknown> {
  return {
    scope,
    namespace: '/creditgate-ha/',
    name: node.name,
    log: { level: 'INFO' },
    restapi: { listen: `127.0.0.1:${node.restPort}`, connect_address: `127.0.0.1:${node.restPort}` },
    etcd3: { hosts: [`127.0.0.1:${etcdPort}`], protocol: 'http' },
    bootstrap: {
      dcs: {
        ttl: 10,
        loop_wait: 2,
        retry_timeout: 4,
        primary_start_timeout: 0,
        synchronous_mode: true,
        maximum_lag_on_failover: 16 * 1024 * 1024,
        postgresql: {
          use_pg_rewind: true,
          use_slots: true,
          parameters: {
            max_connections: 100,
            wal_level: 'replica',
            hot_standby: 'on',
            wal_log_hints: 'on',
            max_wal_senders: 5,
            max_replication_slots: 5,
            wal_keep_size: '128MB',
          },
        },
      },
      initdb: [{ encoding: 'UTF8' }, { locale: 'C' }],
    },
    postgresql: {
      listen: `127.0.0.1:${node.pgPort}`,
      connect_address: `127.0.0.1:${node.pgPort}`,
      data_dir: node.dataDir,
      bin_dir: PG_BIN,
      pgpass: join(nodeDir, 'pgpass'),
      authentication: {
        superuser: { username: 'postgres', password: 'postgres' },
        replication: { username: 'replicator', password: 'replicator' },
      },
      // Loopback only, and trusted: a throwaway cluster of this machine.
      pg_hba: ['local all all trust', 'host all all 127.0.0.1/32 trust', 'host replication replicator 127.0.0.1/32 trust'],
      parameters: { unix_socket_directories: nodeDir, shared_buffers: '32MB', max_wal_size: '256MB' },
    },
    watchdog: { mode: 'off' },
    tags: { nofailover: false, noloadbalance: false, clonefrom: false, nosync: false },
  };
}

/**
 * HAProxy on Patroni's REST checks: `OPTIONS /primary` is 200 only on the running primary; a node
 * marked down has its sessions shut, so no connection stays on a demoted or dead primary.
 */
function haproxyConfig(port: number, nodes: PatroniNode[]): string {
  return [
    'global',
    '  maxconn 1000',
    'defaults',
    '  mode tcp',
    '  timeout connect 2s',
    '  timeout client 30m',
    '  timeout server 30m',
    '  timeout check 1s',
    'listen primary',
    `  bind 127.0.0.1:${port}`,
    '  option httpchk OPTIONS /primary',
    '  http-check expect status 200',
    '  default-server inter 1s fall 2 rise 2 on-marked-down shutdown-sessions',
    ...nodes.map((n) => `  server ${n.name} 127.0.0.1:${n.pgPort} maxconn 200 check port ${n.restPort}`),
    '',
  ].join('\n');
}

/** The PostgreSQL server a connection to `url` reaches: its port, and whether it is a standby. */
export async function serverBehind(url: string): Promise<{ port: number; standby: boolean }> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  // A connection that dies is reported by the query in flight; unheard, its 'error' event would end the process.
  client.on('error', () => {});
  try {
    await client.connect();
    const [row] = (await client.query<{ port: number; standby: boolean }>('SELECT inet_server_port() AS port, pg_is_in_recovery() AS standby')).rows;
    return row!;
  } finally {
    await client.end().catch(() => {});
  }
}

/** Start etcd, the two Patroni nodes (the second a synchronous standby) and HAProxy; bounded waits. */
export async function startCluster(log: (line: string) => void): Promise<Cluster> {
  const owner = postgresOwner();
  const dir = mkdtempSync(join(tmpdir(), 'creditgate-ha-'));
  const processes = new Processes(dir);
  const [etcdClient, etcdPeer, haproxyPort, ...nodePorts] = (await freePorts(7)) as [number, number, number, ...number[]];
  const nodes: PatroniNode[] = [0, 1].map((i) => ({
    name: `node${i + 1}`,
    pgPort: nodePorts[i * 2]!,
    restPort: nodePorts[i * 2 + 1]!,
    dataDir: join(dir, `node${i + 1}`, 'data'),
  }));
  const postmasterPid = (node: PatroniNode): number | undefined => {
    const file = join(node.dataDir, 'postmaster.pid');
    if (!existsSync(file)) return undefined;
    const pid = Number(readFileSync(file, 'utf8').split('\n')[0]);
    return Number.isInteger(pid) && pid > 0 && isAlive(pid) ? pid : undefined;
  };
  let removed = false;
  const removeDir = () => {
    if (removed) return;
    removed = true;
    rmSync(dir, { recursive: true, force: true });
  };
  const killAll = () => {
    processes.killAll();
    for (const node of nodes) {
      const pid = postmasterPid(node);
      if (pid) signal(pid, 'SIGKILL');
    }
    removeDir();
  };
  const cluster: Cluster = {
    dir,
    nodes,
    haproxyPort,
    processes,
    url: (database) => `postgres://postgres:postgres@127.0.0.1:${haproxyPort}/${database}`,
    primary: async () => {
      for (const node of nodes) if ((await httpStatus(`http://127.0.0.1:${node.restPort}/primary`)) === 200) return node;
      return undefined;
    },
    postmasterPid,
    stop: async () => {
      // Patroni first (it stops its PostgreSQL on SIGTERM), then whatever PostgreSQL is left:
      // SIGQUIT is PostgreSQL's immediate shutdown, which also ends its children.
      await processes.stop(
        processes.names().filter((n) => n.startsWith('patroni')),
        10_000,
      );
      for (const node of nodes) {
        const pid = postmasterPid(node);
        if (pid) signal(pid, 'SIGQUIT');
      }
      await waitFor('PostgreSQL stopped', 5_000, async () => (nodes.every((n) => postmasterPid(n) === undefined) ? true : undefined), 100).catch(() => {
        for (const node of nodes) {
          const pid = postmasterPid(node);
          if (pid) signal(pid, 'SIGKILL');
        }
      });
      await processes.stop(processes.names(), 3_000);
      removeDir();
    },
    killAll,
    logs: () => processes.names().map((n) => processes.tail(n)).join('\n'),
  };
  try {
    for (const node of nodes) mkdirSync(join(dir, node.name), { recursive: true, mode: 0o700 });
    const etcdDir = join(dir, 'etcd');
    processes.start('etcd', ETCD, [
      '--name',
      'ha',
      '--data-dir',
      etcdDir,
      '--listen-client-urls',
      `http://127.0.0.1:${etcdClient}`,
      '--advertise-client-urls',
      `http://127.0.0.1:${etcdClient}`,
      '--listen-peer-urls',
      `http://127.0.0.1:${etcdPeer}`,
      '--initial-advertise-peer-urls',
      `http://127.0.0.1:${etcdPeer}`,
      '--initial-cluster',
      `ha=http://127.0.0.1:${etcdPeer}`,
      '--initial-cluster-state',
      'new',
      '--log-level',
      'warn',
    ]);
    await waitFor('etcd healthy', 20_000, async () => ((await httpStatus(`http://127.0.0.1:${etcdClient}/health`)) === 200 ? true : undefined));

    const scope = `cg-ha-${process.pid}`;
    for (const node of nodes) {
      writeFileSync(join(dir, node.name, 'patroni.yml'), JSON.stringify(patroniConfig(scope, node, join(dir, node.name), etcdClient), null, 2));
    }
    if (owner) {
      for (const path of [dir, ...nodes.flatMap((n) => [join(dir, n.name), join(dir, n.name, 'patroni.yml')])]) chownSync(path, owner.uid, owner.gid);
    }
    const patroni = (node: PatroniNode) => {
      const args = [join(dir, node.name, 'patroni.yml')];
      const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: join(dir, node.name), LANG: 'C.UTF-8' };
      // setpriv execs Patroni in place (no intermediate process), so its pid is Patroni's.
      return owner
        ? processes.start(`patroni-${node.name}`, 'setpriv', [`--reuid=${owner.uid}`, `--regid=${owner.gid}`, '--init-groups', '--', PATRONI, ...args], { env })
        : processes.start(`patroni-${node.name}`, PATRONI, args, { env });
    };
    const [first, second] = nodes as [PatroniNode, PatroniNode];
    patroni(first);
    await waitFor(`${first.name} bootstrapped as primary`, 60_000, async () =>
      (await httpStatus(`http://127.0.0.1:${first.restPort}/primary`)) === 200 ? true : undefined,
    );
    log(`ha: ${first.name} is the primary (PostgreSQL on 127.0.0.1:${first.pgPort})`);
    patroni(second);
    // The standby is cloned, then chosen as the synchronous standby: from then on a COMMIT returns
    // only once the standby has it, so a failover to it loses no acknowledged commit.
    await waitFor(`${second.name} streaming as the synchronous standby`, 90_000, async () =>
      (await httpStatus(`http://127.0.0.1:${second.restPort}/sync`)) === 200 ? true : undefined,
    );
    log(`ha: ${second.name} is the synchronous standby (PostgreSQL on 127.0.0.1:${second.pgPort})`);

    const cfg = join(dir, 'haproxy.cfg');
    writeFileSync(cfg, haproxyConfig(haproxyPort, nodes));
    processes.start('haproxy', HAPROXY, ['-db', '-f', cfg]);
    // HAProxy starts with every server up until its checks say otherwise: wait until connections
    // land only on the primary (round robin would alternate while the standby still counted).
    let inARow = 0;
    await waitFor('HAProxy routes only to the primary', 20_000, async () => {
      const server = await serverBehind(cluster.url('postgres'));
      inARow = server.port === first.pgPort && !server.standby ? inARow + 1 : 0;
      return inARow >= 6 ? true : undefined;
    }, 100);
    log(`ha: HAProxy on 127.0.0.1:${haproxyPort} routes to ${first.name}`);
    return cluster;
  } catch (err) {
    const logs = cluster.logs();
    await cluster.stop().catch(() => cluster.killAll());
    throw new Error(`${(err as Error).message}\n${logs}`);
  }
}
