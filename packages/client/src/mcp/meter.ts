import { createHash } from 'node:crypto';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import type { CallToolResult, ServerNotification, ServerRequest } from '@modelcontextprotocol/sdk/types.js';
import { v7 as uuidv7 } from 'uuid';
import { type ClientOptions, type CreditgateClient, createClient } from '../client.js';
import { CreditgateError, isCreditgateError } from '../errors.js';
import type { RecordResult } from '../types.js';
import { FileOutbox, MemoryOutbox, type Outbox, type OutboxEntry } from './outbox.js';
import { denialInfo, META_USAGE, type MeteringRefusal, refusalResult } from './results.js';

export type ToolExtra = RequestHandlerExtra<ServerRequest, ServerNotification>;

/** What the middleware reports as it works (for logs, metrics and tests). */
export type MeteringEvent =
  | { type: 'allowed'; tool: string; invocationId: string; reserved: boolean }
  | { type: 'denied'; tool: string; reason: MeteringRefusal; userId?: string }
  | { type: 'unverified'; tool: string; invocationId: string; error: CreditgateError }
  | { type: 'recorded'; tool: string; invocationId: string; result: RecordResult }
  | { type: 'released'; tool: string; invocationId: string }
  | { type: 'queued'; tool: string; invocationId: string; error: CreditgateError }
  | { type: 'record_failed'; tool: string; invocationId: string; error: unknown }
  | { type: 'outbox_delivered'; invocationId: string; result: RecordResult }
  | { type: 'outbox_failed'; invocationId: string; reason: string };

export interface MeteringLogger {
  warn(message: string): void;
  error(message: string): void;
}

export interface MeteringOptions extends Omit<ClientOptions, 'cache'> {
  /** Stdio mode: the organization API key (scopes read and write). */
  apiKey?: string;
  /** Service mode: the shared service key; the user comes from the request's authInfo. */
  serviceKey?: string;
  /** Use this client instead of creating one (its credentials decide the mode). */
  client?: CreditgateClient;
  /** Hold the tool's cost during the call so recording cannot fail for balance (default true). */
  reserve?: boolean;
  /** When the platform cannot be reached: refuse the call (default) or run it and record later. */
  onOutage?: 'fail_closed' | 'fail_open';
  /**
   * Where usage that could not be sent waits: a directory (stdio default
   * `~/.creditgate/outbox/<key hash>`), an Outbox, or false. Service mode keeps it in memory by default.
   */
  outbox?: string | Outbox | false;
  /** How often the outbox is retried while it holds entries (default 30 s). */
  outboxIntervalMs?: number;
  /** Service mode: the end user's id from the request (default: authInfo.extra.userId, .user_id or .sub). */
  userId?: (extra: ToolExtra) => string | undefined;
  /** Tools that are free: not checked, not recorded. */
  exclude?: string[] | ((toolName: string) => boolean);
  /** Metadata stored with each usage record (≤ 16 KiB serialized). */
  metadata?: (call: { toolName: string; args: unknown; extra: ToolExtra }) => Record<string, unknown> | undefined;
  /** Shown in denials for tier and credits (e.g. your pricing page). */
  upgradeUrl?: string;
  logger?: MeteringLogger;
  onEvent?: (event: MeteringEvent) => void;
}

/** `_meta` keys a client may send on tools/call to make a retried call idempotent. */
export const IDEMPOTENCY_META_KEYS = ['io.creditgate/idempotency-key', 'idempotency-key', 'idempotency_key', 'idempotencyKey'];

const SESSION_TTL_MS = 5 * 60_000;
const stderrLogger: MeteringLogger = {
  // Never stdout: a stdio MCP server's stdout is its protocol channel.
  warn: (message) => console.error(`[creditgate] ${message}`),
  error: (message) => console.error(`[creditgate] ${message}`),
};

function sha256(value: string, encoding: 'hex' | 'base64url' = 'hex'): string {
  return createHash('sha256').update(value).digest(encoding);
}

/** JSON with sorted object keys, so the same arguments hash the same. */
function canonical(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  const keys = Object.keys(value as object).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`).join(',')}}`;
}

function idempotencyKeyOf(extra: ToolExtra): string | undefined {
  const meta = extra._meta as Record<string, unknown> | undefined;
  if (!meta) return undefined;
  for (const key of IDEMPOTENCY_META_KEYS) {
    const value = meta[key];
    if (typeof value === 'string' && value !== '') return value;
  }
  return undefined;
}

function defaultUserId(extra: ToolExtra): string | undefined {
  const fromAuth = extra.authInfo?.extra as Record<string, unknown> | undefined;
  for (const key of ['userId', 'user_id', 'sub']) {
    const value = fromAuth?.[key];
    if (typeof value === 'string' && value !== '') return value;
  }
  return undefined;
}

/** The platform did not give an answer (or a transient one): the outage policy decides. */
function isOutage(err: unknown): err is CreditgateError {
  return isCreditgateError(err) && (err.isTransient || err.code === 'INVALID_RESPONSE');
}

interface Target {
  deploymentId?: string;
  userId?: string;
}

/**
 * Meters MCP tool calls: check (with a reservation) before the handler, record after a successful
 * result, release otherwise. One Meter per server; see withMetering and meteredTool.
 */
export class Meter {
  readonly client: CreditgateClient;
  readonly mode: 'stdio' | 'service';
  readonly outbox: Outbox | undefined;
  private readonly reserve: boolean;
  private readonly onOutage: 'fail_closed' | 'fail_open';
  private readonly options: MeteringOptions;
  private readonly logger: MeteringLogger;
  private readonly sessions = new Map<string, { deploymentId: string | null; tier: string | null; at: number }>();
  private flushing: Promise<FlushReport> | undefined;
  /** Whether the outbox may hold entries (true at start: a previous run may have left some). */
  private pending = true;
  private timer: NodeJS.Timeout | undefined;
  private readonly intervalMs: number;
  /** Calls between check and record, so close() can let them finish recording. */
  private readonly inflight = new Set<Promise<CallToolResult>>();

  constructor(options: MeteringOptions) {
    if (!options || typeof options !== 'object') {
      throw new CreditgateError({ code: 'CONFIGURATION_ERROR', message: 'withMetering needs options: { apiKey | serviceKey, baseUrl }' });
    }
    this.options = options;
    this.client =
      options.client ??
      (!options.apiKey?.trim() && !options.serviceKey?.trim()
        ? (() => {
            throw new CreditgateError({
              code: 'CONFIGURATION_ERROR',
              message: 'metering needs apiKey (stdio mode) or serviceKey (service mode); got neither — is the environment variable set?',
            });
          })()
        : createClient({ apiKey: options.apiKey, serviceKey: options.serviceKey }, { ...options, cache: {} }));
    const mode = this.client.mode;
    if (mode === 'deployment') {
      throw new CreditgateError({ code: 'CONFIGURATION_ERROR', message: 'metering needs an API key or the service key, not deployment credentials' });
    }
    this.mode = mode;
    this.reserve = options.reserve ?? true;
    this.onOutage = options.onOutage ?? 'fail_closed';
    if (this.onOutage !== 'fail_closed' && this.onOutage !== 'fail_open') {
      throw new CreditgateError({ code: 'CONFIGURATION_ERROR', message: `onOutage must be "fail_closed" or "fail_open", got "${String(this.onOutage)}"` });
    }
    this.logger = options.logger ?? stderrLogger;
    this.intervalMs = options.outboxIntervalMs ?? 30_000;
    this.outbox = this.outboxFrom(options.outbox);
    if (this.outbox) this.kickFlush();
  }

  private outboxFrom(option: MeteringOptions['outbox']): Outbox | undefined {
    if (option === false) return undefined;
    if (typeof option === 'string') return new FileOutbox(option);
    if (option) return option;
    if (this.mode === 'service') return new MemoryOutbox();
    // One directory per (platform, key): entries are replayed with the credentials that made them.
    const key = this.options.apiKey ?? this.options.serviceKey ?? this.client.mode;
    return new FileOutbox(join(homedir(), '.creditgate', 'outbox', sha256(`${this.client.baseUrl}\n${key}`).slice(0, 16)));
  }

  /** Wraps a tool callback (`(args, extra)` or `(extra)`) so every call is metered under toolName. */
  wrap<H extends (...params: never[]) => CallToolResult | Promise<CallToolResult>>(
    toolName: string,
    handler: H,
    options: { outputSchema?: boolean } = {},
  ): H {
    const wrapped = (...params: unknown[]) => {
      const extra = params[params.length - 1] as ToolExtra;
      const args = params.length > 1 ? params[0] : undefined;
      return this.run(toolName, args, extra, () => Promise.resolve((handler as unknown as (...p: unknown[]) => CallToolResult | Promise<CallToolResult>)(...params)), options.outputSchema ?? false);
    };
    return wrapped as unknown as H;
  }

  /** One metered call. Exported for frameworks that do not register tools through McpServer. */
  run(toolName: string, args: unknown, extra: ToolExtra, invoke: () => Promise<CallToolResult>, hasOutputSchema = false): Promise<CallToolResult> {
    const call = this.meter(toolName, args, extra, invoke, hasOutputSchema);
    this.inflight.add(call);
    const forget = () => this.inflight.delete(call);
    call.then(forget, forget);
    return call;
  }

  private async meter(toolName: string, args: unknown, extra: ToolExtra, invoke: () => Promise<CallToolResult>, hasOutputSchema: boolean): Promise<CallToolResult> {
    if (this.isExcluded(toolName)) return invoke();
    const target: Target = {};
    const refuse = (reason: MeteringRefusal, tier: string | null = null, available?: number | null, retryAfterSeconds?: number) => {
      this.emit({ type: 'denied', tool: toolName, reason, ...(target.userId ? { userId: target.userId } : {}) });
      return refusalResult(denialInfo(reason, toolName, tier, this.options.upgradeUrl, available, retryAfterSeconds), !hasOutputSchema);
    };

    if (this.mode === 'service') {
      const userId = (this.options.userId ?? defaultUserId)(extra);
      if (!userId) return refuse('no_user');
      target.userId = userId;
    }
    const invocationId = this.invocationIdFor(toolName, args, extra, target.userId);

    let reserved = false;
    try {
      if (target.userId !== undefined) {
        const session = await this.resolveSession(extra.sessionId, target.userId);
        if (!session.deploymentId) return refuse('no_deployment_found', session.tier);
        target.deploymentId = session.deploymentId;
      }
      const check = await this.check(toolName, invocationId, target);
      if (!check.allowed) {
        if (check.reason === 'deployment_not_found' && target.userId) this.forgetSession(extra.sessionId, target.userId);
        return refuse(check.reason ?? 'insufficient_credits', check.tier, 'credits_available' in check ? (check.credits_available as number | null) : undefined);
      }
      reserved = this.reserve;
      this.emit({ type: 'allowed', tool: toolName, invocationId, reserved });
    } catch (err) {
      if (isCreditgateError(err) && err.code === 'IDEMPOTENCY_KEY_REUSED') {
        // A retried tools/call whose first attempt was already recorded: it is paid for; run it again
        // and let the record replay the first answer (no second deduction).
        this.emit({ type: 'allowed', tool: toolName, invocationId, reserved: false });
      } else if (isCreditgateError(err) && err.code === 'RATE_LIMITED') {
        // The platform answered: over the limit is a refusal under either outage policy.
        return refuse('rate_limited', null, undefined, err.retryAfterSeconds);
      } else if (isOutage(err) && this.onOutage === 'fail_open') {
        this.logger.warn(`platform unreachable (${err.message}); running "${toolName}" unverified (fail_open)`);
        this.emit({ type: 'unverified', tool: toolName, invocationId, error: err });
      } else if (isOutage(err)) {
        this.logger.warn(`platform unreachable (${err.message}); refusing "${toolName}" (fail_closed)`);
        return refuse('platform_unavailable');
      } else {
        this.logger.error(`metering refused this server's request: ${(err as Error).message}`);
        return refuse('metering_misconfigured');
      }
    }

    let result: CallToolResult;
    try {
      result = await invoke();
    } catch (err) {
      if (reserved) await this.release(toolName, invocationId, target);
      throw err;
    }
    if (result?.isError || extra.signal?.aborted) {
      if (reserved) await this.release(toolName, invocationId, target);
      return result;
    }
    const recorded = await this.record(toolName, invocationId, target, args, extra);
    if (!recorded) return result;
    return {
      ...result,
      _meta: {
        ...(result._meta ?? {}),
        [META_USAGE]: { invocation_id: invocationId, credits_used: recorded.credits_used, credits_remaining: recorded.credits_remaining },
      },
    };
  }

  private isExcluded(toolName: string): boolean {
    const exclude = this.options.exclude;
    if (!exclude) return false;
    return typeof exclude === 'function' ? exclude(toolName) : exclude.includes(toolName);
  }

  /**
   * The client's idempotency key, scoped to the user, tool and arguments, so a retry of the same call
   * deducts once and the key cannot buy a different call; a new UUID v7 when the client sent none.
   */
  private invocationIdFor(toolName: string, args: unknown, extra: ToolExtra, userId: string | undefined): string {
    const key = idempotencyKeyOf(extra);
    if (!key) return uuidv7();
    return `mcp_${sha256(JSON.stringify([userId ?? '', toolName, canonical(args ?? null), key]), 'base64url')}`;
  }

  private sessionKey(sessionId: string | undefined, userId: string): string {
    return `${sessionId ?? ''}\u0000${userId}`;
  }

  private forgetSession(sessionId: string | undefined, userId: string): void {
    this.sessions.delete(this.sessionKey(sessionId, userId));
  }

  /** Service mode resolves the user's deployment once per session (and at most every 5 minutes). */
  private async resolveSession(sessionId: string | undefined, userId: string): Promise<{ deploymentId: string | null; tier: string | null }> {
    const key = this.sessionKey(sessionId, userId);
    const now = Date.now();
    const known = this.sessions.get(key);
    if (known && now - known.at < SESSION_TTL_MS) return known;
    const resolved = await this.client.service.resolveDeployment(userId);
    const entry = { deploymentId: resolved.deployment_id, tier: resolved.tier, at: now };
    if (resolved.deployment_id) {
      this.sessions.set(key, entry);
      if (this.sessions.size > 10_000) this.sessions.delete(this.sessions.keys().next().value!);
    }
    return entry;
  }

  private check(toolName: string, invocationId: string, target: Target) {
    const reservation = this.reserve ? { reserve: true, invocation_id: invocationId } : {};
    if (this.mode === 'service') {
      return this.client.service.checkEntitlement({ deployment_id: target.deploymentId!, tool_name: toolName, ...reservation });
    }
    return this.client.stdio.checkEntitlement({ tool_name: toolName, ...reservation });
  }

  private async release(toolName: string, invocationId: string, target: Target): Promise<void> {
    try {
      await this.client.releaseReservation(invocationId, { deploymentId: target.deploymentId });
      this.emit({ type: 'released', tool: toolName, invocationId });
    } catch (err) {
      // Not fatal: an unreleased reservation lapses by itself after 5 minutes.
      this.logger.warn(`could not release the reservation of "${toolName}" (${(err as Error).message}); it lapses in 5 minutes`);
    }
  }

  private usageBody(toolName: string, invocationId: string, target: Target, args: unknown, extra: ToolExtra): OutboxEntry['body'] {
    let metadata: Record<string, unknown> | undefined;
    try {
      metadata = this.options.metadata?.({ toolName, args, extra });
    } catch (err) {
      this.logger.warn(`the metadata option threw (${(err as Error).message}); recording "${toolName}" without metadata`);
    }
    const common = { tool_name: toolName, invocation_id: invocationId, ...(metadata ? { metadata } : {}) };
    if (this.mode === 'service') return { ...(target.deploymentId ? { deployment_id: target.deploymentId } : {}), mcp_user_id: target.userId ?? null, ...common };
    return common;
  }

  private async send(mode: 'stdio' | 'service', body: OutboxEntry['body']): Promise<RecordResult> {
    if (mode === 'stdio') return this.client.stdio.recordUsage(body as Parameters<CreditgateClient['stdio']['recordUsage']>[0]);
    let deploymentId = typeof body.deployment_id === 'string' ? body.deployment_id : undefined;
    if (!deploymentId) {
      // fail_open ran the tool while even the user's deployment was unknown: resolve it now.
      const userId = typeof body.mcp_user_id === 'string' ? body.mcp_user_id : '';
      deploymentId = (await this.client.service.resolveDeployment(userId)).deployment_id ?? undefined;
      if (!deploymentId) {
        throw new CreditgateError({ code: 'NO_DEPLOYMENT', message: `user ${userId} has no deployment to record "${body.tool_name}" against` });
      }
    }
    return this.client.service.recordUsage({ ...(body as Parameters<CreditgateClient['service']['recordUsage']>[0]), deployment_id: deploymentId });
  }

  private async record(toolName: string, invocationId: string, target: Target, args: unknown, extra: ToolExtra): Promise<RecordResult | undefined> {
    const body = this.usageBody(toolName, invocationId, target, args, extra);
    try {
      const result = await this.send(this.mode, body);
      this.emit({ type: 'recorded', tool: toolName, invocationId, result });
      if (!result.success) this.logger.warn(`usage of "${toolName}" was not charged: ${result.error ?? 'unknown reason'}`);
      this.kickFlush();
      return result;
    } catch (err) {
      if (isOutage(err) && this.outbox) {
        try {
          await this.outbox.add({ invocation_id: invocationId, mode: this.mode, body, created_at: new Date().toISOString() });
        } catch (writeError) {
          // The tool's result still goes back; the loss is reported loudly.
          this.emit({ type: 'record_failed', tool: toolName, invocationId, error: writeError });
          this.logger.error(`usage of "${toolName}" (${invocationId}) is lost: the outbox could not be written (${(writeError as Error).message})`);
          return undefined;
        }
        this.pending = true;
        this.emit({ type: 'queued', tool: toolName, invocationId, error: err });
        this.logger.warn(`platform unreachable; usage of "${toolName}" kept in the outbox and sent later`);
        this.schedule();
        return undefined;
      }
      this.emit({ type: 'record_failed', tool: toolName, invocationId, error: err });
      this.logger.error(`usage of "${toolName}" could not be recorded: ${(err as Error).message}`);
      return undefined;
    }
  }

  /** Sends what the outbox holds, oldest first; stops at the first outage. Safe to call any time. */
  flushOutbox(): Promise<FlushReport> {
    this.flushing ??= this.flushOnce().finally(() => {
      this.flushing = undefined;
    });
    return this.flushing;
  }

  private async flushOnce(): Promise<FlushReport> {
    const report: FlushReport = { delivered: 0, failed: 0, remaining: 0 };
    if (!this.outbox) return report;
    this.pending = false;
    const entries = await this.outbox.list();
    for (const [index, entry] of entries.entries()) {
      try {
        const result = await this.deliver(entry);
        await this.outbox.remove(entry.invocation_id);
        report.delivered++;
        if (result) this.emit({ type: 'outbox_delivered', invocationId: entry.invocation_id, result });
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
        this.emit({ type: 'outbox_failed', invocationId: entry.invocation_id, reason });
        this.logger.error(`outbox entry ${entry.invocation_id} refused for good: ${reason}`);
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
        const status = await this.client.getInvocation(entry.invocation_id, { deploymentId });
        if (status.status === 'recorded' || status.status === 'refunded') return undefined;
      } catch (err) {
        if (!(isCreditgateError(err) && err.status === 404)) throw err;
      }
    }
    const result = await this.send(entry.mode, entry.body);
    return result;
  }

  private kickFlush(): void {
    if (!this.outbox || !this.pending || this.flushing) return;
    void this.flushOutbox().catch((err) => this.logger.error(`outbox flush failed: ${(err as Error).message}`));
  }

  private schedule(): void {
    if (this.timer || !this.outbox) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.kickFlush();
    }, this.intervalMs);
    this.timer.unref();
  }

  private emit(event: MeteringEvent): void {
    try {
      this.options.onEvent?.(event);
    } catch {
      // An observer's failure never changes a call's outcome.
    }
  }

  /**
   * For shutdown: waits (up to timeoutMs, default 10 s) for calls in progress to record their usage
   * and for a running outbox flush, then stops the outbox timer. Entries still in a file outbox are
   * sent by the next start.
   */
  async close(options: { timeoutMs?: number } = {}): Promise<void> {
    let timeout: NodeJS.Timeout | undefined;
    const limit = new Promise<void>((resolve) => {
      timeout = setTimeout(resolve, options.timeoutMs ?? 10_000);
    });
    const work = Promise.allSettled([...this.inflight, this.flushing ?? Promise.resolve()]).then(() => undefined);
    await Promise.race([work, limit]);
    clearTimeout(timeout);
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}

export interface FlushReport {
  delivered: number;
  failed: number;
  /** Entries still waiting because the platform is unreachable. */
  remaining: number;
}

const OUTBOX_CHECK_AFTER_MS = 23 * 60 * 60_000;
const OUTBOX_MAX_AGE_MS = 7 * 24 * 60 * 60_000;
