import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import autocannon from 'autocannon';
import { type CpuShare, cpuShare, cpuSnapshot } from './cpu.js';
import { type LatencySummary, round, Samples } from './stats.js';

/**
 * A closed-loop autocannon measurement for bench/webhooks.ts. The same method as runLoad in
 * ./load.ts (the window is closed by capping every client at the requests it has already sent, so
 * requests in flight finish and are counted: the receiver's count can then be compared exactly),
 * but for any HTTP method (runLoad only POSTs) and with the CPU of a second process (the receiver).
 */
export interface ClosedLoadTarget {
  url: string;
  method: 'GET' | 'POST';
  path: string;
  headers: Record<string, string>;
  /** When given, each request adds the next of these header sets (round-robin): one deployment per set. */
  headerSets?: Array<Record<string, string>> | undefined;
  body?: string | undefined;
  /** Whether a 2xx answer's body is the expected outcome (e.g. "success":true); anything else counts as a failure. */
  isSuccess: (body: string) => boolean;
}

export interface ClosedLoadOptions {
  connections: number;
  seconds: number;
  /** The service's pid (cpu.server) and the receiver's pid (receiverCpu). */
  serverPid?: number | undefined;
  receiverPid?: number | undefined;
}

export interface ClosedMeasurement {
  seconds: number;
  /** Answers completed inside the window, per second. */
  rps: number;
  latency: LatencySummary;
  /** Every answer of the run, including those that completed after the window while in-flight requests drained. */
  responses: number;
  ok2xx: number;
  non2xx: number;
  /** 2xx answers whose body passed isSuccess. */
  successes: number;
  /** Connection errors and timeouts. */
  errors: number;
  drained: boolean;
  /** Status codes of the answers that were not successes, with counts. */
  failures: Record<string, number>;
  cpu: CpuShare;
  /** CPU % of the receiver process over the window (100 = one core). */
  receiverCpu: number;
  /** Other work seen at the start or end of the window: vitest / bench:limiter processes. */
  otherWork?: number;
}

interface ClientInternals {
  reqsMade: number;
  responseMax?: number;
  destroy(): void;
}

const DRAIN_TIMEOUT_MS = 45_000;
const REQUEST_TIMEOUT_S = 30;
const TICK_MS = 10;

function procMs(pid: number | undefined): number {
  if (!pid) return 0;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) * TICK_MS;
  } catch {
    return 0;
  }
}

export async function runClosedLoad(target: ClosedLoadTarget, options: ClosedLoadOptions): Promise<ClosedMeasurement> {
  const clients: ClientInternals[] = [];
  const samples = new Samples();
  const failures: Record<string, number> = {};
  let windowStart = Number.POSITIVE_INFINITY;
  let windowEnd = Number.POSITIVE_INFINITY;
  let responses = 0;
  let ok2xx = 0;
  let successes = 0;
  let errors = 0;

  const request: autocannon.Request = {
    method: target.method,
    path: target.path,
    headers: { ...(target.body !== undefined ? { 'content-type': 'application/json' } : {}), ...target.headers },
    ...(target.body !== undefined ? { body: target.body } : {}),
    onResponse: (status, body) => {
      if (status >= 200 && status < 300 && target.isSuccess(body)) successes++;
      else failures[String(status)] = (failures[String(status)] ?? 0) + 1;
    },
  };
  const sets = target.headerSets;
  if (sets && sets.length > 0) {
    let next = 0;
    request.setupRequest = (req) => ({ ...req, headers: { ...req.headers, ...sets[next++ % sets.length] } });
  }
  let instance: autocannon.Instance | undefined;
  const done = new Promise<autocannon.Result>((resolve, reject) => {
    instance = autocannon(
      {
        url: target.url,
        connections: options.connections,
        duration: options.seconds + 120,
        requests: [request],
        timeout: REQUEST_TIMEOUT_S,
        sampleInt: 100,
        setupClient: (client) => clients.push(client as unknown as ClientInternals),
      },
      (err: unknown, result: autocannon.Result) => (err ? reject(err) : resolve(result)),
    );
  });
  done.catch(() => {});
  instance!.on('response', (_client: autocannon.Client, statusCode: number, _bytes: number, ms: number) => {
    responses++;
    if (statusCode >= 200 && statusCode < 300) ok2xx++;
    const now = performance.now();
    if (now >= windowStart && now <= windowEnd) samples.push(ms);
  });
  instance!.on('reqError', () => errors++);

  windowStart = performance.now();
  const cpuFrom = cpuSnapshot(options.serverPid);
  const receiverFrom = procMs(options.receiverPid);
  windowEnd = windowStart + options.seconds * 1000;
  await sleep(options.seconds * 1000);
  const cpu = cpuShare(cpuFrom, cpuSnapshot(options.serverPid));
  const receiverCpu = Math.max(0, Math.round(((procMs(options.receiverPid) - receiverFrom) / Math.max(1, performance.now() - windowStart)) * 100));

  for (const client of clients) client.responseMax = Math.max(1, client.reqsMade);
  const drained = await Promise.race([done.then(() => true), sleep(DRAIN_TIMEOUT_MS).then(() => false)]);
  if (!drained) {
    instance!.stop();
    await done;
  }
  return {
    seconds: options.seconds,
    rps: round(samples.count / options.seconds, 0),
    latency: samples.summary(),
    responses,
    ok2xx,
    non2xx: responses - ok2xx,
    successes,
    errors,
    drained,
    failures,
    cpu,
    receiverCpu,
  };
}
