import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { passwordHashing } from './passwords.js';

/**
 * The password estimator (docs/accounts.md, "Password rule"): zxcvbn-ts with the common and English
 * dictionaries. One check takes 5 to 80 ms of synchronous CPU, and loading the dictionaries about
 * 150 ms, so it runs in a worker thread, never on the event loop, and each check passes the same
 * bounded gate as password hashing (passwords.ts): a flood of sign-ups waits there, or gets 429,
 * instead of queueing without end. One worker per process, started on the first check (not at boot)
 * and `unref`ed so it never holds the process open; checks run there one at a time. It ends once no
 * check has come for ESTIMATOR_IDLE_MS: its isolate and dictionaries hold some 70 MB, which a service
 * that sees a sign-up now and then should not keep for good (docs/operations-memory.md); the next
 * check starts a new one (about 150 ms).
 */
export interface Strength {
  /** 0 (too guessable) to 4 (very unguessable). */
  score: number;
  /** On the common-password list of @zxcvbn-ts/language-common (compared in lower case). */
  isCommon: boolean;
  warning: string | null;
  suggestions: string[];
}

/** The estimator scores this many characters (code points); a longer password is not weaker for it. */
export const SCORED_LENGTH = 64;

const require = createRequire(import.meta.url);

// The worker's code is plain CommonJS given as text, with the packages' resolved paths: it runs the
// same from src/ under tsx or vitest and from dist/, with no separate file for the build to copy.
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const { ZxcvbnFactory } = require(workerData.core);
const common = require(workerData.common);
const en = require(workerData.en);
const zxcvbn = new ZxcvbnFactory({
  dictionary: { ...common.dictionary, ...en.dictionary },
  graphs: common.adjacencyGraphs,
  translations: en.translations,
});
const commonList = new Set(common.dictionary['passwords-common']);
parentPort.on('message', ({ id, password, userInputs }) => {
  try {
    const result = zxcvbn.check(password, userInputs);
    parentPort.postMessage({ id, strength: {
      score: result.score,
      isCommon: commonList.has(password.trim().toLowerCase()),
      warning: result.feedback.warning || null,
      suggestions: result.feedback.suggestions,
    } });
  } catch (err) {
    parentPort.postMessage({ id, error: String(err && err.message || err) });
  }
});
`;

type Pending = { resolve: (s: Strength) => void; reject: (e: Error) => void };

let worker: Worker | undefined;
let nextId = 0;
const pending = new Map<number, Pending>();

/** How long the estimator's worker waits for a next check before it ends (docs/operations-memory.md). */
export const ESTIMATOR_IDLE_MS = 10_000;
let idleMs = ESTIMATOR_IDLE_MS;
let idleTimer: NodeJS.Timeout | undefined;

/** For tests: a shorter idle time, so the worker's end and restart can be observed. */
export function setEstimatorIdleMs(ms: number): void {
  idleMs = ms;
}

/** Whether the estimator's worker is running (it starts on a check and ends when idle). */
export function estimatorRunning(): boolean {
  return worker !== undefined;
}

/** The worker has nothing to do: end it after `idleMs` unless a check comes first. */
function idleAfterLastCheck(): void {
  clearTimeout(idleTimer);
  if (pending.size > 0 || !worker) return;
  const idle = worker;
  idleTimer = setTimeout(() => {
    if (worker !== idle || pending.size > 0) return;
    worker = undefined;
    void idle.terminate();
  }, idleMs);
  idleTimer.unref();
}

function estimator(): Worker {
  if (worker) return worker;
  const started = new Worker(WORKER_SOURCE, {
    eval: true,
    // A small young generation: the dictionaries are old objects once loaded, and a check's garbage is
    // small; the default (16 MB semi-spaces) made the worker hold about 24 MB more while it lives.
    resourceLimits: { maxYoungGenerationSizeMb: 4 },
    workerData: {
      core: require.resolve('@zxcvbn-ts/core'),
      common: require.resolve('@zxcvbn-ts/language-common'),
      en: require.resolve('@zxcvbn-ts/language-en'),
    },
  });
  started.unref();
  started.on('message', (msg: { id: number; strength?: Strength; error?: string }) => {
    const job = pending.get(msg.id);
    pending.delete(msg.id);
    if (msg.strength) job?.resolve(msg.strength);
    else job?.reject(new Error(`password estimator: ${msg.error}`));
    idleAfterLastCheck();
  });
  // A dead worker fails the checks it held (500, logged); the next check starts a new one.
  const fail = (err: Error) => {
    if (worker !== started) return; // ended when idle, with nothing pending
    worker = undefined;
    for (const job of pending.values()) job.reject(err);
    pending.clear();
  };
  started.on('error', fail);
  started.on('exit', (code) => fail(new Error(`password estimator exited with code ${code}`)));
  worker = started;
  return started;
}

/** Score `password` (its first SCORED_LENGTH characters) against the dictionaries and `userInputs`. */
export function estimateStrength(password: string, userInputs: string[]): Promise<Strength> {
  const scored = Array.from(password).slice(0, SCORED_LENGTH).join('');
  return passwordHashing.run(
    () =>
      new Promise<Strength>((resolve, reject) => {
        const id = nextId++;
        clearTimeout(idleTimer);
        pending.set(id, { resolve, reject });
        estimator().postMessage({ id, password: scored, userInputs });
      }),
  );
}
