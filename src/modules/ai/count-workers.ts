import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import { AppError } from '../../errors.js';
import { BoundedGate } from '../../lib/bounded-gate.js';
import type { Output } from './sse.js';
import { countEmbeddingInput, countText, encodingOf, LONG_RUN, RUN_PIECE, SHORT_TEXT } from './tokens.js';

/**
 * Counting a request's large texts off the event loop (docs/ai-proxy.md, Bounds: counting off the
 * event loop). Counting is linear but not cheap: a MiB of prose takes 0.15–0.35 s, a MiB of the
 * worst text measured (CJK, emoji) 2–3 s, and a prompt is counted before its hold is refused, so a
 * caller with an empty balance could otherwise hold every tenant's event loop at its own rate limit.
 * A request's texts of at most SYNC_COUNT_BYTES together are counted on the event loop as before;
 * larger ones in one message to a worker thread, which answers the same sum of countText (tokens.ts).
 *
 * Up to COUNT_WORKERS workers per process, started on the first large count, `unref`ed while idle,
 * each ended once no count has come for COUNT_IDLE_MS (an encoding holds some 200 MB in a worker;
 * the next large count starts one again, which builds the encoding it needs in about a second). A
 * prompt's count passes `largeCounts`: at most COUNT_WORKERS run and COUNT_QUEUE wait, and the next
 * is refused at once with 429 RATE_LIMITED and Retry-After, before anything is held. An output's
 * count is never refused (the call was made and must be settled).
 */

/**
 * A request's texts up to this many UTF-8 bytes in all are counted on the event loop: some 25 ms of
 * it at worst (CJK, emoji, Devanagari: 2–3 µs a byte), about 1 ms of prose, code or JSON.
 */
export const SYNC_COUNT_BYTES = 8 * 1024;
/** Workers per process: one, or two where there are three cores or more (the event loop keeps one). */
export const COUNT_WORKERS = Math.max(1, Math.min(2, availableParallelism() - 1));
/** Large prompts waiting for a worker; the next is refused (a full queue of 1 MiB bodies is 16 × 2–9 s of counting at worst). */
export const COUNT_QUEUE = 16;
/** How long a counting worker waits for a next count before it ends. */
export const COUNT_IDLE_MS = 30_000;

/** Every large prompt count of the process passes this gate. */
export const largeCounts = new BoundedGate(COUNT_WORKERS, COUNT_QUEUE, 'large prompts being counted', 500);
/**
 * Large prompt counts one organization may have in the gate at once (running or waiting): one tenant
 * cannot fill the queue and refuse every other tenant's large prompts (a prompt is counted before its
 * hold can refuse it, so even a tenant with nothing left to spend could).
 */
export const COUNTS_PER_ORGANIZATION = 2;
const inGate = new Map<string, number>();

const require = createRequire(import.meta.url);

// Plain CommonJS given as text, with the packages' resolved paths, like the password estimator's
// worker (auth/password-strength.ts): it runs the same from src/ under tsx or vitest and from dist/.
// countText is tokens.ts's loop line for line, with the same expressions (their sources in workerData).
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const { Tiktoken } = require(workerData.lite);
const LONG_RUN = new RegExp(workerData.longRun, workerData.longRunFlags);
const RUN_PIECE = new RegExp(workerData.runPiece, workerData.runPieceFlags);
const SHORT_TEXT = workerData.shortText;
const encoders = new Map();
function encoderOf(name) {
  let enc = encoders.get(name);
  if (!enc) {
    enc = new Tiktoken(require(workerData.ranks[name]));
    encoders.set(name, enc);
  }
  return enc;
}
function countText(enc, text) {
  if (text === '') return 0;
  const encode = (part) => (part === '' ? 0 : enc.encode(part, [], []).length);
  if (text.length <= SHORT_TEXT) return encode(text);
  let tokens = 0;
  let last = 0;
  for (const run of text.matchAll(LONG_RUN)) {
    tokens += encode(text.slice(last, run.index));
    for (const [piece] of run[0].matchAll(RUN_PIECE)) tokens += encode(piece);
    last = run.index + run[0].length;
  }
  return tokens + encode(text.slice(last));
}
parentPort.on('message', ({ id, encoding, texts }) => {
  try {
    const enc = encoderOf(encoding);
    let tokens = 0;
    for (const text of texts) tokens += countText(enc, text);
    parentPort.postMessage({ id, tokens });
  } catch (err) {
    parentPort.postMessage({ id, error: String((err && err.message) || err) });
  }
});
`;

interface Job {
  resolve: (tokens: number) => void;
  reject: (err: Error) => void;
}

interface CountWorker {
  worker: Worker;
  pending: Map<number, Job>;
  idleTimer?: NodeJS.Timeout;
}

const workers: CountWorker[] = [];
let nextId = 0;
let idleMs = COUNT_IDLE_MS;

/** For tests: a shorter idle time (idle workers count it from now), so a worker's end and restart can be observed. */
export function setCountIdleMs(ms: number): void {
  idleMs = ms;
  for (const slot of workers) idleAfterLastCount(slot);
}

/** Counting workers running now (they start on a large count and end when idle). */
export function countWorkersRunning(): number {
  return workers.length;
}

function startWorker(): CountWorker {
  const worker = new Worker(WORKER_SOURCE, {
    eval: true,
    workerData: {
      lite: require.resolve('js-tiktoken/lite'),
      ranks: { o200k_base: require.resolve('js-tiktoken/ranks/o200k_base'), cl100k_base: require.resolve('js-tiktoken/ranks/cl100k_base') },
      longRun: LONG_RUN.source,
      longRunFlags: LONG_RUN.flags,
      runPiece: RUN_PIECE.source,
      runPieceFlags: RUN_PIECE.flags,
      shortText: SHORT_TEXT,
    },
  });
  worker.unref();
  const slot: CountWorker = { worker, pending: new Map() };
  worker.on('message', (msg: { id: number; tokens?: number; error?: string }) => {
    const job = slot.pending.get(msg.id);
    slot.pending.delete(msg.id);
    if (typeof msg.tokens === 'number') job?.resolve(msg.tokens);
    else job?.reject(new Error(`token counting worker: ${msg.error}`));
    idleAfterLastCount(slot);
  });
  // A dead worker fails the counts it held; the next count starts a new one.
  const fail = (err: Error) => {
    const at = workers.indexOf(slot);
    if (at === -1) return; // ended when idle, with nothing pending
    workers.splice(at, 1);
    clearTimeout(slot.idleTimer);
    for (const job of slot.pending.values()) job.reject(err);
    slot.pending.clear();
  };
  worker.on('error', fail);
  worker.on('exit', (code) => fail(new Error(`token counting worker exited with code ${code}`)));
  workers.push(slot);
  return slot;
}

/** A worker with nothing to do no longer holds the process open, and ends after `idleMs` unless a count comes first. */
function idleAfterLastCount(slot: CountWorker): void {
  clearTimeout(slot.idleTimer);
  if (slot.pending.size > 0) return;
  slot.worker.unref();
  slot.idleTimer = setTimeout(() => {
    const at = workers.indexOf(slot);
    if (at === -1 || slot.pending.size > 0) return;
    workers.splice(at, 1);
    void slot.worker.terminate();
  }, idleMs);
  slot.idleTimer.unref();
}

/** An idle worker, else a new one while fewer than COUNT_WORKERS run, else the least busy. */
function pickWorker(): CountWorker {
  let best: CountWorker | undefined;
  for (const slot of workers) if (!best || slot.pending.size < best.pending.size) best = slot;
  if (best && (best.pending.size === 0 || workers.length >= COUNT_WORKERS)) return best;
  return startWorker();
}

/** The sum of countText over `texts` by the model's encoding, counted in a worker (whatever their size). */
export function countInWorker(model: string, texts: string[]): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    const slot = pickWorker();
    const id = nextId++;
    clearTimeout(slot.idleTimer);
    slot.pending.set(id, { resolve, reject });
    slot.worker.ref();
    slot.worker.postMessage({ id, encoding: encodingOf(model), texts });
  });
}

/** More than SYNC_COUNT_BYTES of UTF-8 in all (a string's UTF-8 is never shorter than its length). */
function overSyncBytes(texts: readonly string[]): boolean {
  let bytes = 0;
  for (const text of texts) {
    bytes += text.length > SYNC_COUNT_BYTES ? text.length : Buffer.byteLength(text);
    if (bytes > SYNC_COUNT_BYTES) return true;
  }
  return false;
}

function countHere(model: string, texts: readonly string[]): number {
  let tokens = 0;
  for (const text of texts) tokens += countText(model, text);
  return tokens;
}

/**
 * The sum of countText over a request's `texts`: on the event loop when they are small, else in a
 * worker. A `prompt` count is refused past largeCounts' queue (429 RATE_LIMITED); an `output` count
 * never is, and one a worker fails is counted on the event loop (the call must be settled).
 */
export async function countTexts(model: string, texts: string[], what: 'prompt' | 'output', organizationId?: string): Promise<number> {
  if (!overSyncBytes(texts)) return countHere(model, texts);
  if (what === 'prompt') return countPromptInGate(model, texts, organizationId);
  try {
    return await countInWorker(model, texts);
  } catch {
    return countHere(model, texts);
  }
}

/** A large prompt's count through the gate, at most COUNTS_PER_ORGANIZATION of one organization in it. */
async function countPromptInGate(model: string, texts: string[], organizationId: string | undefined): Promise<number> {
  if (organizationId === undefined) return largeCounts.run(() => countInWorker(model, texts));
  const held = inGate.get(organizationId) ?? 0;
  if (held >= COUNTS_PER_ORGANIZATION) {
    throw new AppError(
      'RATE_LIMITED',
      `Too many large prompts of this organization being counted at once (${COUNTS_PER_ORGANIZATION}); retry when one is answered`,
      {},
      { 'retry-after': '1' },
    );
  }
  inGate.set(organizationId, held + 1);
  try {
    return await largeCounts.run(() => countInWorker(model, texts));
  } finally {
    const left = (inGate.get(organizationId) ?? 1) - 1;
    if (left > 0) inGate.set(organizationId, left);
    else inGate.delete(organizationId);
  }
}

/** countEmbeddingInput, its strings counted together by countTexts. */
export async function countEmbeddingInputAsync(model: string, input: unknown, organizationId?: string): Promise<number> {
  const texts: string[] = [];
  const ids = countEmbeddingInput(model, input, (text) => {
    texts.push(text);
    return 0;
  });
  return ids + (await countTexts(model, texts, 'prompt', organizationId));
}

/** countOutput (tokens.ts) by countTexts: what a call relayed, for its settle. */
export async function countOutputAsync(model: string, output: Output): Promise<number> {
  return (await countTexts(model, [output.text], 'output')) + output.unreadable;
}
