import { performance } from 'node:perf_hooks';
import { AppError } from '../errors.js';

/**
 * At most `concurrency` jobs run at once and at most `queue` wait; past that, `run` refuses at once with
 * 429 RATE_LIMITED and a Retry-After estimated from how long the jobs ahead take to drain. For work that
 * costs memory per job (a scrypt hash holds 128 MiB): running bounds memory, waiting bounds latency.
 * A finished job hands its slot straight to the first waiter, so a newcomer never jumps the queue and
 * the running count never exceeds the bound.
 */
export class BoundedGate {
  private running = 0;
  private readonly waiting: Array<() => void> = [];
  /** Moving average of a job's duration (ms), for Retry-After. */
  private averageMs: number;

  constructor(
    readonly concurrency: number,
    readonly queue: number,
    /** What is refused, for the message ("password checks"). */
    private readonly what: string,
    initialEstimateMs = 250,
  ) {
    if (concurrency < 1 || queue < 0) throw new Error('BoundedGate: concurrency ≥ 1 and queue ≥ 0');
    this.averageMs = initialEstimateMs;
  }

  /** Jobs running and waiting right now. */
  get load(): { running: number; waiting: number } {
    return { running: this.running, waiting: this.waiting.length };
  }

  async run<T>(job: () => Promise<T>): Promise<T> {
    await this.acquire();
    const started = performance.now();
    try {
      return await job();
    } finally {
      this.averageMs = 0.8 * this.averageMs + 0.2 * (performance.now() - started);
      this.release();
    }
  }

  private acquire(): Promise<void> | undefined {
    if (this.running < this.concurrency) {
      this.running += 1;
      return undefined;
    }
    if (this.waiting.length >= this.queue) throw this.refusal();
    return new Promise<void>((resolve) => this.waiting.push(resolve));
  }

  private release(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.running -= 1;
  }

  /** 429 with the time the jobs ahead need to drain (whole seconds, ≥ 1). */
  private refusal(): AppError {
    const drainMs = ((this.running + this.waiting.length) / this.concurrency) * this.averageMs;
    const seconds = Math.max(1, Math.ceil(drainMs / 1000));
    return new AppError('RATE_LIMITED', `Too many ${this.what} at once; retry in ${seconds} seconds`, {}, { 'retry-after': String(seconds) });
  }
}
