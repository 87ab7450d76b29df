import { setTimeout as sleep } from 'node:timers/promises';
import { randomUUID } from 'node:crypto';
import autocannon from 'autocannon';
import { type CpuShare, cpuShare, cpuSnapshot } from './cpu.js';
import { type LatencySummary, round, Samples } from './stats.js';

export interface RequestShape {
  headers: Record<string, string>;
  body: string;
}

export interface LoadTarget {
  /** Origin of the server under test, e.g. http://127.0.0.1:41234 */
  url: string;
  path: string;
  /** One shape: every request is the same. Several: requests go round-robin over them (many deployments). */
  shapes: RequestShape[];
  /** Whether a 2xx answer is what the scenario expects (allowed, deducted); anything else is a failure. */
  isSuccess: (body: string) => boolean;
  /**
   * Give every request its own `invocation_id` (docs/benchmarks.md, Method: the SDK middleware always sends one,
   * so a record claims a fresh invocation). The body must be a JSON object.
   */
  uniqueInvocationIds?: boolean;
}

/** Run-unique invocation ids: a random prefix and a counter (cheap for the load generator, which shares the CPU). */
const INVOCATION_PREFIX = `bench-${randomUUID().slice(0, 8)}-`;
let invocationCounter = 0;
const withInvocationId = (body: string) => `{"invocation_id":"${INVOCATION_PREFIX}${(invocationCounter++).toString(36)}",${body.slice(1)}`;

export interface LoadOptions {
  connections: number;
  seconds: number;
  /** Offered load in requests per second; absent = closed loop, as fast as the server answers. */
  rate?: number | undefined;
  /** The server's pid, for the CPU shares. */
  serverPid?: number | undefined;
}

export interface Measurement {
  seconds: number;
  offered: number | null;
  /** Answers completed inside the window, per second. */
  rps: number;
  /** Latency of the answers completed inside the window (ms). */
  latency: LatencySummary;
  /** Every answer of the run, including those that completed after the window while in-flight requests drained. */
  responses: number;
  ok2xx: number;
  non2xx: number;
  /** 2xx answers whose body passed isSuccess. */
  successes: number;
  /** Connection errors and timeouts: requests the server may have handled without the client seeing an answer. */
  errors: number;
  /** true when every request sent got its answer (the accounting check can be exact). */
  drained: boolean;
  cpu: CpuShare;
  /** Set by the runner: vitest processes seen at the start or end of the window (other work on the machine). */
  vitest?: number;
}

/** autocannon 9 keeps these as plain fields on its Client; the drain below relies on them. */
interface ClientInternals {
  reqsMade: number;
  responseMax?: number;
  /** Out of its per-second quota: nothing in flight, waiting for the next second. */
  paused?: boolean;
  destroy(): void;
}

/**
 * autocannon's rate limiter gives each connection its per-second quota at the top of every second,
 * and the connections of one instance tick together: one instance with overallRate sends a burst at
 * full concurrency each second and measures saturation latency. A fixed load is therefore spread
 * over PHASES instances started 1000/PHASES ms apart, each with its share of rate and connections.
 */
const PHASES = 25;
const DRAIN_TIMEOUT_MS = 45_000;
/** Per request, seconds. autocannon's default (10) abandons requests that PGlite's tail can exceed. */
const REQUEST_TIMEOUT_S = 30;

function share(total: number, parts: number, index: number): number {
  return Math.floor(total / parts) + (index < total % parts ? 1 : 0);
}

function startInstance(options: autocannon.Options): { instance: autocannon.Instance; done: Promise<autocannon.Result> } {
  let instance: autocannon.Instance | undefined;
  let failed: unknown;
  const done = new Promise<autocannon.Result>((resolve, reject) => {
    try {
      instance = autocannon(options, (err: unknown, result: autocannon.Result) => (err ? reject(err) : resolve(result)));
    } catch (err) {
      failed = err;
      reject(err);
    }
  });
  // Awaited by the caller; this only keeps an early failure from crashing the process unhandled.
  done.catch(() => {});
  if (!instance) throw failed;
  return { instance, done };
}

/**
 * One measurement. Instead of letting autocannon cut the run at its duration (which abandons the
 * requests in flight, so the server may record usage the client never saw), the window is closed by
 * capping every client at the requests it has already sent: in-flight requests finish and count.
 */
export async function runLoad(target: LoadTarget, options: LoadOptions): Promise<Measurement> {
  const phases = options.rate ? PHASES : 1;
  const perPhase = Math.max(1, Math.round(options.connections / phases));
  const clients: ClientInternals[] = [];
  const samples = new Samples();
  let windowStart = Number.POSITIVE_INFINITY;
  let windowEnd = Number.POSITIVE_INFINITY;
  let responses = 0;
  let ok2xx = 0;
  let successes = 0;
  let errors = 0;
  let next = 0;

  const { shapes } = target;
  const base: autocannon.Request = {
    method: 'POST',
    path: target.path,
    headers: { 'content-type': 'application/json', ...shapes[0]!.headers },
    body: shapes[0]!.body,
    onResponse: (status, body) => {
      if (status >= 200 && status < 300 && target.isSuccess(body)) successes++;
    },
  };
  if (shapes.length > 1 || target.uniqueInvocationIds) {
    const unique = target.uniqueInvocationIds === true;
    base.setupRequest = (req) => {
      const shape = shapes[next++ % shapes.length]!;
      const body = unique ? withInvocationId(shape.body) : shape.body;
      return { ...req, headers: { 'content-type': 'application/json', ...shape.headers }, body };
    };
  }
  const onResponse = (_client: autocannon.Client, statusCode: number, _bytes: number, ms: number) => {
    responses++;
    if (statusCode >= 200 && statusCode < 300) ok2xx++;
    const now = performance.now();
    if (now >= windowStart && now <= windowEnd) samples.push(ms);
  };

  const running: Array<ReturnType<typeof startInstance>> = [];
  for (let i = 0; i < phases; i++) {
    if (i > 0) await sleep(1000 / phases);
    const run = startInstance({
      url: target.url,
      connections: perPhase,
      duration: options.seconds + 120,
      requests: [{ ...base }],
      overallRate: options.rate ? share(options.rate, phases, i) : undefined,
      ignoreCoordinatedOmission: options.rate ? true : undefined,
      timeout: REQUEST_TIMEOUT_S,
      // Only autocannon's own per-second histogram uses it; a short one ends the instance soon after the drain.
      sampleInt: 100,
      setupClient: (client) => clients.push(client as unknown as ClientInternals),
    });
    run.instance.on('response', onResponse);
    run.instance.on('reqError', () => errors++);
    running.push(run);
  }
  if (phases > 1) await sleep(200);
  windowStart = performance.now();
  const cpuFrom = cpuSnapshot(options.serverPid);
  windowEnd = windowStart + options.seconds * 1000;
  await sleep(options.seconds * 1000);
  const cpu = cpuShare(cpuFrom, cpuSnapshot(options.serverPid));

  for (const client of clients) {
    client.responseMax = Math.max(1, client.reqsMade);
    if (client.paused) client.destroy();
  }
  const all = Promise.all(running.map((r) => r.done));
  const drained = await Promise.race([all.then(() => true), sleep(DRAIN_TIMEOUT_MS).then(() => false)]);
  if (!drained) {
    for (const r of running) r.instance.stop();
    await all;
  }
  return {
    seconds: options.seconds,
    offered: options.rate ?? null,
    rps: round(samples.count / options.seconds, 0),
    latency: samples.summary(),
    responses,
    ok2xx,
    non2xx: responses - ok2xx,
    successes,
    errors,
    drained,
    cpu,
  };
}
