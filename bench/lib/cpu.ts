import { readdirSync, readFileSync } from 'node:fs';

/**
 * CPU time of the three parties sharing the machine during a measurement: the load generator (this
 * process), the server under test (a child) and PostgreSQL (every process named postgres). Linux
 * /proc only; elsewhere the numbers are zero. 100 = one core busy for the whole window.
 */
export interface CpuShare {
  loadgen: number;
  server: number;
  postgres: number;
  machine: number;
}

interface Snapshot {
  at: number;
  loadgen: number;
  server: number;
  /** CPU ms per postgres pid: a pool closing idle connections ends backends, whose time must not count as negative. */
  postgres: Map<string, number>;
  busy: number;
}

const TICK_MS = 10; // USER_HZ is 100 on every Linux we run on

function procTicks(pid: number | string): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return 0;
  }
}

function postgresTimes(): Map<string, number> {
  const times = new Map<string, number>();
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((name) => /^\d+$/.test(name));
  } catch {
    return times;
  }
  for (const pid of pids) {
    try {
      if (readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'postgres') times.set(pid, procTicks(pid) * TICK_MS);
    } catch {
      // the process ended while we looked
    }
  }
  return times;
}

/** CPU spent between the snapshots by processes alive at the end (a new one counts from zero). */
function postgresDelta(from: Map<string, number>, to: Map<string, number>): number {
  let total = 0;
  for (const [pid, ms] of to) total += ms - (from.get(pid) ?? 0);
  return total;
}

function machineBusyTicks(): number {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
    const [, ...nums] = line.trim().split(/\s+/);
    const v = nums.map(Number);
    const idle = (v[3] ?? 0) + (v[4] ?? 0);
    return v.reduce((a, b) => a + b, 0) - idle;
  } catch {
    return 0;
  }
}

export function cpuSnapshot(serverPid: number | undefined): Snapshot {
  const own = process.cpuUsage();
  return {
    at: performance.now(),
    loadgen: (own.user + own.system) / 1000,
    server: serverPid ? procTicks(serverPid) * TICK_MS : 0,
    postgres: postgresTimes(),
    busy: machineBusyTicks() * TICK_MS,
  };
}

export function cpuShare(from: Snapshot, to: Snapshot): CpuShare {
  const wall = Math.max(1, to.at - from.at);
  const pct = (a: number, b: number) => Math.max(0, Math.round(((b - a) / wall) * 100));
  return {
    loadgen: pct(from.loadgen, to.loadgen),
    server: pct(from.server, to.server),
    postgres: pct(0, postgresDelta(from.postgres, to.postgres)),
    machine: pct(from.busy, to.busy),
  };
}
