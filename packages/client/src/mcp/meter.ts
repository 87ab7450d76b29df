import { homedir } from 'node:os';
import { join } from 'node:path';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { type CreditgateClient, createClient } from '../client.js';
import { CreditgateError, isCreditgateError } from '../errors.js';
import type { PaymentRequired, RecordResult } from '../types.js';
import { v7 as uuidv7 } from 'uuid';
import { defaultUserId, invocationIdFor, sha256 } from './identity.js';
import { isOutage, type MeteringEvent, type MeteringLogger, type MeteringOptions, stderrLogger, type ToolExtra } from './options.js';
import { FileOutbox, MemoryOutbox, type Outbox, type OutboxEntry } from './outbox.js';
import { PriceList } from './pricing.js';
import { type FlushReport, OutboxReplayer } from './replay.js';
import { denialInfo, META_USAGE, type MeteringRefusal, refusalResult } from './results.js';

/** A reservation's 422 for an invocation recorded and then refunded (its `invocation_status`). */
function isRefundedInvocation(err: unknown): boolean {
  return isCreditgateError(err) && err.code === 'IDEMPOTENCY_KEY_REUSED' && (err.body as { invocation_status?: unknown } | null)?.invocation_status === 'refunded';
}

/** The service's bound on a usage record's metadata, serialized (docs/metering.md). */
const METADATA_LIMIT_BYTES = 16 * 1024;
export const SESSION_TTL_MS = 5 * 60_000;

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
  private readonly replayer: OutboxReplayer | undefined;
  /** Calls between check and record, so close() can let them finish recording. */
  private readonly inflight = new Set<Promise<CallToolResult>>();
  /** Names wrapped by this Meter: the tools whose prices tools/list shows (unless excluded). */
  private readonly wrapped = new Set<string>();
  /** The servers whose tools/list shows prices (withMetering, withPricing): told when prices change. */
  private readonly servers = new Set<WeakRef<{ sendToolListChanged(): void }>>();
  /** The price list of tools/list (undefined with `pricing: false`). */
  readonly prices: PriceList | undefined;

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
    this.outbox = this.outboxFrom(options.outbox);
    this.replayer = this.outbox
      ? new OutboxReplayer(
          this.outbox,
          {
            send: (mode, body) => this.send(mode, body),
            getInvocation: (id, o) => this.client.getInvocation(id, o),
            logger: this.logger,
            emit: (event) => this.emit(event),
          },
          options.outboxIntervalMs ?? 30_000,
        )
      : undefined;
    this.replayer?.kick();
    this.prices =
      options.pricing === false
        ? undefined
        : new PriceList({
            client: this.client,
            now: options.now ?? Date.now,
            logger: this.logger,
            meteredTools: () => [...this.wrapped].filter((name) => !this.isExcluded(name)),
            changed: () => this.pricesChanged(),
          });
  }

  /** Whether tools/list shows this tool's price: a tool this Meter wraps and does not exclude. */
  isMetered(toolName: string): boolean {
    return this.wrapped.has(toolName) && !this.isExcluded(toolName);
  }

  /** A server whose tools/list shows prices: it is sent notifications/tools/list_changed when they change. */
  addServer(server: { sendToolListChanged(): void }): void {
    this.servers.add(new WeakRef(server));
  }

  private pricesChanged(): void {
    for (const ref of this.servers) {
      const server = ref.deref();
      if (!server) {
        this.servers.delete(ref);
        continue;
      }
      try {
        // McpServer sends it only while connected.
        server.sendToolListChanged();
      } catch (err) {
        this.logger.warn(`could not send notifications/tools/list_changed (${(err as Error).message})`);
      }
    }
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
    this.wrapped.add(toolName);
    const wrapped = (...params: unknown[]) => {
      const extra = params[params.length - 1] as ToolExtra;
      const args = params.length > 1 ? params[0] : undefined;
      return this.run(toolName, args, extra, () => Promise.resolve((handler as unknown as (...p: unknown[]) => CallToolResult | Promise<CallToolResult>)(...params)), options.outputSchema ?? false);
    };
    return wrapped as unknown as H;
  }

  /** One metered call. Exported for frameworks that do not register tools through McpServer. */
  run(toolName: string, args: unknown, extra: ToolExtra, invoke: () => Promise<CallToolResult>, hasOutputSchema = false): Promise<CallToolResult> {
    // A client that listed tools once and only calls them still learns of a price change (within 5 minutes).
    if (this.prices?.active) void this.prices.refreshIfDue();
    const call = this.meter(toolName, args, extra, invoke, hasOutputSchema);
    this.inflight.add(call);
    const forget = () => this.inflight.delete(call);
    call.then(forget, forget);
    return call;
  }

  private async meter(toolName: string, args: unknown, extra: ToolExtra, invoke: () => Promise<CallToolResult>, hasOutputSchema: boolean): Promise<CallToolResult> {
    if (this.isExcluded(toolName)) return invoke();
    const target: Target = {};
    const refuse = (reason: MeteringRefusal, tier: string | null = null, available?: number | null, retryAfterSeconds?: number, paymentRequired?: PaymentRequired) => {
      this.emit({ type: 'denied', tool: toolName, reason, ...(target.userId ? { userId: target.userId } : {}) });
      return refusalResult(denialInfo(reason, toolName, tier, this.options.upgradeUrl, available, retryAfterSeconds, paymentRequired), !hasOutputSchema, paymentRequired);
    };

    if (this.mode === 'service') {
      const userId = (this.options.userId ?? defaultUserId)(extra);
      if (!userId) return refuse('no_user');
      target.userId = userId;
    }
    let invocationId = invocationIdFor(toolName, args, extra, target.userId);

    let reserved = false;
    try {
      if (target.userId !== undefined) {
        const session = await this.resolveSession(extra.sessionId, target.userId);
        if (!session.deploymentId) return refuse('no_deployment_found', session.tier);
        target.deploymentId = session.deploymentId;
      }
      let check = await this.check(toolName, invocationId, target).catch((err: unknown) => {
        if (!(this.reserve && isRefundedInvocation(err))) throw err;
        return undefined;
      });
      if (check === undefined) {
        // The key's call was paid and then refunded: running it again is a new call, paid as one
        // (docs/client.md), under a new id since the refunded one is done.
        invocationId = uuidv7();
        check = await this.check(toolName, invocationId, target);
      }
      if (!check.allowed) {
        if (check.reason === 'deployment_not_found' && target.userId) this.forgetSession(extra.sessionId, target.userId);
        const available = 'credits_available' in check ? (check.credits_available as number | null) : undefined;
        return refuse(check.reason ?? 'insufficient_credits', check.tier, available, undefined, check.payment_required);
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
      // The user is the call's end user: the check (and its hold, whose windows the record inherits) is
      // counted by end-user budgets as the record's mcp_user_id is (docs/budgets.md).
      const endUser = target.userId !== undefined && target.userId !== '*' && target.userId.length <= 200 ? { end_user_id: target.userId } : {};
      return this.client.service.checkEntitlement({ deployment_id: target.deploymentId!, tool_name: toolName, ...endUser, ...reservation });
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
      // The service refuses metadata over 16 KiB serialized (docs/metering.md): a record refused for it
      // would give the tool's result away uncharged, so such metadata is dropped, not sent.
      if (metadata !== undefined && new TextEncoder().encode(JSON.stringify(metadata)).length > METADATA_LIMIT_BYTES) {
        this.logger.warn(`the metadata of "${toolName}" is over 16 KiB serialized; recording it without metadata`);
        metadata = undefined;
      }
    } catch (err) {
      this.logger.warn(`the metadata option threw (${(err as Error).message}); recording "${toolName}" without metadata`);
      metadata = undefined;
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
    let body = this.usageBody(toolName, invocationId, target, args, extra);
    try {
      const result = await this.send(this.mode, body).catch((err: unknown) => {
        // Metadata the service refused (400) must not cost the charge: the record goes again without it.
        if (!(isCreditgateError(err) && err.status === 400 && body.metadata !== undefined)) throw err;
        this.logger.warn(`the service refused the metadata of "${toolName}" (${err.message}); recording it without metadata`);
        const { metadata: _refused, ...rest } = body;
        body = rest;
        return this.send(this.mode, body);
      });
      this.emit({ type: 'recorded', tool: toolName, invocationId, result });
      if (!result.success) this.logger.warn(`usage of "${toolName}" was not charged: ${result.error ?? 'unknown reason'}`);
      this.replayer?.kick();
      return result;
    } catch (err) {
      if (isOutage(err) && this.outbox && this.replayer) {
        try {
          await this.outbox.add({ invocation_id: invocationId, mode: this.mode, body, created_at: new Date().toISOString() });
        } catch (writeError) {
          // The tool's result still goes back; the loss is reported loudly.
          this.emit({ type: 'record_failed', tool: toolName, invocationId, error: writeError });
          this.logger.error(`usage of "${toolName}" (${invocationId}) is lost: the outbox could not be written (${(writeError as Error).message})`);
          return undefined;
        }
        this.replayer.added();
        this.emit({ type: 'queued', tool: toolName, invocationId, error: err });
        this.logger.warn(`platform unreachable; usage of "${toolName}" kept in the outbox and sent later`);
        return undefined;
      }
      this.emit({ type: 'record_failed', tool: toolName, invocationId, error: err });
      this.logger.error(`usage of "${toolName}" could not be recorded: ${(err as Error).message}`);
      return undefined;
    }
  }

  /** Sends what the outbox holds, oldest first; stops at the first outage. Safe to call any time. */
  flushOutbox(): Promise<FlushReport> {
    return this.replayer?.flush() ?? Promise.resolve({ delivered: 0, failed: 0, remaining: 0 });
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
    const work = Promise.allSettled([...this.inflight, this.replayer?.running]);
    await Promise.race([work, limit]);
    clearTimeout(timeout);
    this.replayer?.cancelTimer();
    this.prices?.stop();
  }
}

