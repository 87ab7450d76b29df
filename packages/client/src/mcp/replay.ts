import { CreditgateError, isCreditgateError } from '../errors.js';
import type { InvocationStatus, RecordResult } from '../types.js';
import { isOutage, type MeteringEvent, type MeteringLogger } from './options.js';
import type { Outbox, OutboxEntry } from './outbox.js';

export interface FlushReport {
  delivered: number;
  failed: number;
  /** Entries still waiting because the platform is unreachable. */
  remaining: number;
}

const OUTBOX_CHECK_AFTER_MS = 23 * 60 * 60_000;
const OUTBOX_MAX_AGE_MS = 7 * 24 * 60 * 60_000;

export interface ReplayDeps {
  send(mode: OutboxEntry['mode'], body: OutboxEntry['body']): Promise<RecordResult>;
  getInvocation(invocationId: string, options: { deploymentId?: string }): Promise<InvocationStatus>;
  logger: MeteringLogger;
  emit(event: MeteringEvent): void;
}

/**
 * Sends what a Meter's outbox holds: at start, after each successful record, and every intervalMs
 * while entries wait; one flush at a time, oldest entry first, under the entry's own invocation id.
 */
export class OutboxReplayer {
  /** Whether the outbox may hold entries (true at start: a previous run may have left some). */
  private pending = true;
  private flushing: Promise<FlushReport> | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    readonly outbox: Outbox,
    private readonly deps: ReplayDeps,
    private readonly intervalMs: number,
  ) {}

  /** An entry was just added. */
  added(): void {
    this.pending = true;
    this.schedule();
  }

  /** Sends what the outbox holds, oldest first; stops at the first outage. Safe to call any time. */
  flush(): Promise<FlushReport> {
    this.flushing ??= this.flushOnce().finally(() => {
      this.flushing = undefined;
    });
    return this.flushing;
  }

  private async flushOnce(): Promise<FlushReport> {
    const report: FlushReport = { delivered: 0, failed: 0, remaining: 0 };
    this.pending = false;
    const entries = await this.outbox.list();
    for (const [index, entry] of entries.entries()) {
      try {
        const result = await this.deliver(entry);
        await this.outbox.remove(entry.invocation_id);
        report.delivered++;
        if (result) this.deps.emit({ type: 'outbox_delivered', invocationId: entry.invocation_id, result });
      } catch (err) {
        if (isOutage(err)) {
          this.pending = true;
          report.remaining = entries.length - index;
          this.schedule();
          return report;
        }
        const reason = (err as Error).message;
        await this.outbox.fail(entry.invocation_id, reason);
        report.failed++;
        this.deps.emit({ type: 'outbox_failed', invocationId: entry.invocation_id, reason });
        this.deps.logger.error(`outbox entry ${entry.invocation_id} refused for good: ${reason}`);
      }
    }
    return report;
  }

  /**
   * Replays one entry. Past the service's 24-hour idempotency window a replay could deduct twice, so
   * older entries first ask what became of the invocation (kept 7 days); older than that they are set aside.
   */
  private async deliver(entry: OutboxEntry): Promise<RecordResult | undefined> {
    const age = Date.now() - Date.parse(entry.created_at);
    if (age > OUTBOX_MAX_AGE_MS) {
      throw new CreditgateError({ code: 'OUTBOX_EXPIRED', message: 'older than 7 days: cannot prove it was not recorded' });
    }
    if (age > OUTBOX_CHECK_AFTER_MS) {
      const deploymentId = typeof entry.body.deployment_id === 'string' ? entry.body.deployment_id : undefined;
      try {
        const status = await this.deps.getInvocation(entry.invocation_id, { deploymentId });
        if (status.status === 'recorded' || status.status === 'refunded') return undefined;
      } catch (err) {
        if (!(isCreditgateError(err) && err.status === 404)) throw err;
      }
    }
    const result = await this.deps.send(entry.mode, entry.body);
    return result;
  }

  /** Starts a flush unless one runs or nothing may be waiting. */
  kick(): void {
    if (!this.pending || this.flushing) return;
    void this.flush().catch((err) => this.deps.logger.error(`outbox flush failed: ${(err as Error).message}`));
  }

  /** Tries again in intervalMs. */
  schedule(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.kick();
    }, this.intervalMs);
    this.timer.unref();
  }

  /** No more retries on the timer (a flush already running goes on). */
  cancelTimer(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** A running flush, for close() to wait on. */
  get running(): Promise<unknown> {
    return this.flushing ?? Promise.resolve();
  }
}
