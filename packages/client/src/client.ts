import { v7 as uuidv7 } from 'uuid';
import { TtlCache } from './cache.js';
import { CheckCache } from './check-cache.js';
import { CreditgateError } from './errors.js';
import { type Answer, type CallOptions, Transport, type TransportOptions } from './http.js';
import type * as T from './types.js';

/** Any of the service's three credentials (docs/client.md, Client); a client may hold several (a hosted server with a service key and its deployment's credentials). */
export interface Credentials {
  /** Organization API key (`cg_…`): stdio mode. */
  apiKey?: string;
  /** The shared `X-MCP-Service-Key`: service-to-service mode. */
  serviceKey?: string;
  /** Deployment credentials: entitlement snapshot, AI quota, webhook proxy. */
  deploymentId?: string;
  deploymentSecret?: string;
}

/** How long answers may be reused; each is capped at the limits of docs/client.md, Caches. `false` turns caching off. */
export interface CacheOptions {
  /** check-entitlement answers (not reservations, never a denial for credits); ≤ 5 minutes, default 5 minutes. */
  entitlementsMs?: number;
  /** The credit cost table; ≤ 1 hour, default 1 hour. */
  creditCostsMs?: number;
  /** resolve-deployment answers that found a deployment; ≤ 5 minutes, default 5 minutes. */
  resolveMs?: number;
}

export interface ClientOptions extends TransportOptions {
  cache?: CacheOptions | false;
  /** The clock the caches read (milliseconds); tests move it. */
  now?: () => number;
}

export interface ReadOptions {
  /** Skip every cache, ask the service (and for the entitlement snapshot, the service's cache too). */
  forceRefresh?: boolean;
}

/**
 * A conditional read of the cost table (`creditCostsIfChanged`): unchanged since `etag` (a 304, no
 * body), or the table with the ETag to send next time.
 */
export type CreditCostsRevalidation = { notModified: true; etag: string } | { notModified: false; etag: string | undefined; costs: T.CreditCosts };

/** An answer of a write that carries an idempotency id, with whether the service replayed the first answer. */
export type WithReplay<R> = R & { replayed: boolean };

const FIVE_MINUTES = 5 * 60_000;
const ONE_HOUR = 60 * 60_000;
/** A proxy send makes up to 3 attempts of 10 s each inside one request. */
const WEBHOOK_SEND_TIMEOUT_MS = 35_000;

function capped(value: number | undefined, max: number): number {
  if (value === undefined) return max;
  return Math.max(0, Math.min(value, max));
}

function present(value: string | undefined): string | undefined {
  return typeof value === 'string' && value.trim() !== '' ? value : undefined;
}

function budgetsPath(organizationId: string, budgetId?: string): string {
  const base = `/organizations/${encodeURIComponent(organizationId)}/budgets`;
  return budgetId === undefined ? base : `${base}/${encodeURIComponent(budgetId)}`;
}

function autoTopUpPath(organizationId: string): string {
  return `/organizations/${encodeURIComponent(organizationId)}/auto-top-up`;
}

/** Typed client for creditgate's /api/v1 routes; see createClient. */
export class CreditgateClient {
  private readonly transport: Transport;
  private readonly sendTransport: Transport;
  private readonly credentials: Credentials;
  private readonly ttl: Required<CacheOptions>;
  private readonly checks: CheckCache;
  private readonly resolved: TtlCache<T.ResolveResult>;
  private readonly snapshots: TtlCache<T.EntitlementSnapshot>;
  private costs: { value: T.CreditCosts; expiresAt: number } | undefined;
  private readonly now: () => number;
  private readonly reading = new Map<string, Promise<unknown>>();
  /** The snapshot's lifetime is the service's next_check_seconds; `cache: false` is the only way to turn it off. */
  private readonly snapshotsCached: boolean;

  constructor(credentials: Credentials, options: ClientOptions) {
    if (credentials === null || typeof credentials !== 'object') {
      throw new CreditgateError({ code: 'CONFIGURATION_ERROR', message: 'createClient needs credentials: { apiKey } | { serviceKey } | { deploymentId, deploymentSecret }' });
    }
    this.credentials = {
      apiKey: present(credentials.apiKey),
      serviceKey: present(credentials.serviceKey),
      deploymentId: present(credentials.deploymentId),
      deploymentSecret: present(credentials.deploymentSecret),
    };
    const c = this.credentials;
    if (!c.apiKey && !c.serviceKey && !(c.deploymentId && c.deploymentSecret)) {
      throw new CreditgateError({
        code: 'CONFIGURATION_ERROR',
        message: 'no credentials: pass apiKey (stdio mode), serviceKey (service mode) or deploymentId with deploymentSecret',
      });
    }
    if (!options || typeof options !== 'object') {
      throw new CreditgateError({ code: 'CONFIGURATION_ERROR', message: 'createClient needs options with baseUrl' });
    }
    this.transport = new Transport(options);
    this.sendTransport = new Transport({ ...options, timeoutMs: Math.max(options.timeoutMs ?? 0, WEBHOOK_SEND_TIMEOUT_MS) });
    const cache = options.cache === false ? { entitlementsMs: 0, creditCostsMs: 0, resolveMs: 0 } : (options.cache ?? {});
    this.ttl = {
      entitlementsMs: capped(cache.entitlementsMs, FIVE_MINUTES),
      creditCostsMs: capped(cache.creditCostsMs, ONE_HOUR),
      resolveMs: capped(cache.resolveMs, FIVE_MINUTES),
    };
    this.snapshotsCached = options.cache !== false;
    this.now = options.now ?? Date.now;
    this.checks = new CheckCache(this.now, this.ttl.entitlementsMs);
    this.resolved = new TtlCache(this.now);
    this.snapshots = new TtlCache(this.now, 1_000);
  }

  /** The base URL calls go to (normalized). */
  get baseUrl(): string {
    return this.transport.baseUrl.href;
  }

  /** Which mode the MCP calls of this client use. */
  get mode(): 'stdio' | 'service' | 'deployment' {
    if (this.credentials.serviceKey) return 'service';
    if (this.credentials.apiKey) return 'stdio';
    return 'deployment';
  }

  /** Drops every cached answer. */
  clearCache(): void {
    this.checks.clear();
    this.resolved.clear();
    this.snapshots.clear();
    this.costs = undefined;
  }

  // ---- stdio mode (organization API key) ----

  readonly stdio = {
    /** May this organization run the tool, and what does it cost? `reserve: true` holds the cost for 5 minutes. */
    checkEntitlement: (input: T.StdioCheckInput, options: ReadOptions = {}): Promise<T.StdioCheckResult> =>
      this.check('stdio', input, options, (body) =>
        this.call<T.StdioCheckResult>({ method: 'POST', path: '/api/v1/mcp/stdio/check-entitlement', body, headers: this.apiKeyHeaders(), idempotent: true }),
      ),
    /** Records a completed tool call and deducts its credits; an invocation_id is generated when none is given, so a retry never deducts twice. */
    recordUsage: async (input: T.StdioRecordInput): Promise<WithReplay<T.RecordResult>> => {
      const body = { ...input, invocation_id: input.invocation_id ?? uuidv7() };
      const answer = await this.call<T.RecordResult>({ method: 'POST', path: '/api/v1/mcp/stdio/record-usage', body, headers: this.apiKeyHeaders(), idempotent: true });
      this.checks.noteRecord('stdio', answer.data, answer.replayed);
      return { ...answer.data, replayed: answer.replayed };
    },
  };

  // ---- service-to-service mode (X-MCP-Service-Key) ----

  readonly service = {
    /** The deployment a user's session meters against. Found deployments are cached up to 5 minutes. */
    resolveDeployment: async (userId: string, options: ReadOptions = {}): Promise<T.ResolveResult> => {
      if (typeof userId !== 'string' || userId === '') {
        throw new CreditgateError({ code: 'INVALID_REQUEST', message: 'resolveDeployment needs a user id' });
      }
      if (!options.forceRefresh) {
        const hit = this.resolved.get(userId);
        if (hit) return hit;
      }
      const headers = this.serviceHeaders();
      return this.shared(`resolve\u0000${userId}`, async () => {
        const answer = await this.call<T.ResolveResult>({
          method: 'GET',
          path: '/api/v1/mcp/resolve-deployment',
          query: { user_id: userId },
          headers,
          idempotent: true,
        });
        if (answer.data.deployment_id) this.resolved.set(userId, answer.data, this.ttl.resolveMs);
        return answer.data;
      });
    },
    /** May this deployment run the tool? Same caching and reservation rules as stdio.checkEntitlement. */
    checkEntitlement: (input: T.ServiceCheckInput, options: ReadOptions = {}): Promise<T.ServiceCheckResult> =>
      this.check(input.deployment_id, input, options, (body) =>
        this.call<T.ServiceCheckResult>({ method: 'POST', path: '/api/v1/mcp/check-entitlement', body, headers: this.serviceHeaders(), idempotent: true }),
      ) as Promise<T.ServiceCheckResult>,
    /** Records a completed tool call for a deployment; an invocation_id is generated when none is given. */
    recordUsage: async (input: T.ServiceUsageInput): Promise<WithReplay<T.ServiceUsageResult>> => {
      const body = { ...input, invocation_id: input.invocation_id ?? uuidv7() };
      const answer = await this.call<T.ServiceUsageResult>({ method: 'POST', path: '/api/v1/mcp/usage', body, headers: this.serviceHeaders(), idempotent: true });
      this.checks.noteRecord(input.deployment_id, answer.data, answer.replayed);
      return { ...answer.data, replayed: answer.replayed };
    },
    /** Cost of every action; cached up to 1 hour. */
    creditCosts: async (options: ReadOptions = {}): Promise<T.CreditCosts> => {
      if (!options.forceRefresh && this.costs && this.costs.expiresAt > this.now()) return this.costs.value;
      const headers = this.serviceHeaders();
      return this.shared('costs', async () => {
        const answer = await this.call<T.CreditCosts>({ method: 'GET', path: '/api/v1/mcp/credit-costs', headers, idempotent: true });
        if (this.ttl.creditCostsMs > 0) this.costs = { value: answer.data, expiresAt: this.now() + this.ttl.creditCostsMs };
        return answer.data;
      });
    },
  };

  /**
   * The cost table with the tool → action map, revalidated: with the `etag` of an earlier answer, an
   * unchanged table answers `{ notModified: true }` (a 304 without a body). With either metering
   * credential (an API key with `read`, or the service key); never cached here, the caller keeps the
   * table and its ETag (the MCP middleware does: docs/client.md, Prices in tools/list).
   */
  async creditCostsIfChanged(etag?: string): Promise<CreditCostsRevalidation> {
    const headers = { ...this.meteringHeaders(), ...(etag ? { 'if-none-match': etag } : {}) };
    const answer = await this.call<T.CreditCosts>({ method: 'GET', path: '/api/v1/mcp/credit-costs', headers, idempotent: true });
    const tag = answer.headers.get('etag') ?? undefined;
    if (answer.status === 304) return { notModified: true, etag: tag ?? (etag as string) };
    return { notModified: false, etag: tag, costs: answer.data };
  }

  // ---- reservations and invocations (API key or service key); refunds (service key only) ----

  /** Releases a reservation (the tool failed or was cancelled). With the service key, name the deployment. */
  async releaseReservation(invocationId: string, options: { deploymentId?: string } = {}): Promise<T.ReleaseResult> {
    const answer = await this.call<T.ReleaseResult>({
      method: 'POST',
      path: `/api/v1/mcp/reservations/${encodeURIComponent(invocationId)}/release`,
      body: options.deploymentId ? { deployment_id: options.deploymentId } : {},
      headers: this.meteringHeaders(),
      idempotent: true,
    });
    return answer.data;
  }

  /** What became of an invocation: reserved, recorded, released, expired, refunded or denied. */
  async getInvocation(invocationId: string, options: { deploymentId?: string } = {}): Promise<T.InvocationStatus> {
    const answer = await this.call<T.InvocationStatus>({
      method: 'GET',
      path: `/api/v1/mcp/invocations/${encodeURIComponent(invocationId)}`,
      query: { deployment_id: options.deploymentId },
      headers: this.meteringHeaders(),
      idempotent: true,
    });
    return answer.data;
  }

  /**
   * Refunds a recorded usage in whole or in part; an idempotency key is generated when none is given.
   * Service key only: the platform refunds, an organization's API key gets 403 FORBIDDEN.
   */
  async refundUsage(usageId: string, input: T.RefundInput): Promise<T.RefundResult> {
    const answer = await this.call<T.RefundResult>({
      method: 'POST',
      path: `/api/v1/mcp/usage/${encodeURIComponent(usageId)}/refund`,
      body: { ...input, idempotency_key: input.idempotency_key ?? uuidv7() },
      headers: this.meteringHeaders(),
      idempotent: true,
    });
    return answer.data;
  }

  // ---- entitlements and quota (deployment credentials) ----

  readonly entitlements = {
    /** The deployment's entitlement snapshot, cached for its next_check_seconds; forceRefresh bypasses both caches. */
    check: async (options: ReadOptions = {}): Promise<T.EntitlementSnapshot> => {
      const { deploymentId, deploymentSecret } = this.deploymentCredentials();
      if (!options.forceRefresh) {
        const hit = this.snapshots.get(deploymentId);
        if (hit) return hit;
      }
      const answer = await this.call<T.EntitlementSnapshot>({
        method: 'POST',
        path: '/api/v1/entitlements/check',
        query: options.forceRefresh ? { force: true } : undefined,
        body: { deployment_id: deploymentId, deployment_secret: deploymentSecret },
        headers: {},
        idempotent: true,
      });
      if (this.snapshotsCached) this.snapshots.set(deploymentId, answer.data, Math.max(0, answer.data.next_check_seconds) * 1000);
      return answer.data;
    },
  };

  readonly ai = {
    /** AI tokens used and left in the period, and the credits that pay past the limit. */
    quota: async (): Promise<T.AiQuota> =>
      (await this.call<T.AiQuota>({ method: 'GET', path: '/api/v1/ai/quota', headers: this.deploymentHeaders(), idempotent: true })).data,
  };

  // ---- webhook proxy (deployment credentials) ----

  readonly webhooks = {
    /**
     * Delivers a payload (signed when a secret is given). The target's failures are in the answer
     * (success false); failures to set the send up throw (INSUFFICIENT_CREDITS carries
     * creditsRequired and creditsAvailable). An idempotency key is generated when none is given, so a
     * retried send is delivered and charged once.
     */
    send: async (input: T.WebhookSendInput): Promise<WithReplay<T.WebhookSendResult>> => {
      const body = { ...input, idempotency_key: input.idempotency_key ?? uuidv7() };
      const answer = await this.call<T.WebhookSendResult>(
        { method: 'POST', path: '/api/v1/proxy/webhooks/send', body, headers: this.deploymentHeaders(), idempotent: true },
        this.sendTransport,
      );
      return { ...answer.data, replayed: answer.replayed };
    },
    quota: async (): Promise<T.WebhookQuota> =>
      (await this.call<T.WebhookQuota>({ method: 'GET', path: '/api/v1/proxy/webhooks/quota', headers: this.deploymentHeaders(), idempotent: true })).data,
    deliveries: async (query: T.WebhookDeliveriesQuery = {}): Promise<T.WebhookDeliveries> =>
      (
        await this.call<T.WebhookDeliveries>({
          method: 'GET',
          path: '/api/v1/proxy/webhooks/deliveries',
          query,
          headers: this.deploymentHeaders(),
          idempotent: true,
        })
      ).data,
    delivery: async (webhookId: string): Promise<T.WebhookDelivery> =>
      (
        await this.call<T.WebhookDelivery>({
          method: 'GET',
          path: `/api/v1/proxy/webhooks/deliveries/${encodeURIComponent(webhookId)}`,
          headers: this.deploymentHeaders(),
          idempotent: true,
        })
      ).data,
  };

  // ---- budgets (organization API key: read to read, admin to change; docs/budgets.md, API) ----

  /**
   * An organization's budgets through the application API (`/organizations/{id}/budgets`), with the
   * client's API key: `read` reads, `admin` creates, changes and deletes. Answers are the envelope's
   * `data`. Reads and changes are retried like every safe call; a create or delete is sent once (the
   * route takes no idempotency key: a repeated create would make a second budget).
   */
  readonly budgets = {
    /** Every budget of the organization, oldest first, each with what its window in progress has counted. */
    list: async (organizationId: string): Promise<T.Budget[]> =>
      this.envelope<T.Budget[]>({ method: 'GET', path: budgetsPath(organizationId), headers: this.apiKeyHeaders(), idempotent: true }),
    /** Creates a budget (at least one limit; the scope names its id). */
    create: async (organizationId: string, input: T.BudgetCreateInput): Promise<T.Budget> =>
      this.envelope<T.Budget>({ method: 'POST', path: budgetsPath(organizationId), body: input, headers: this.apiKeyHeaders(), idempotent: false }),
    /** One budget with its window in progress. */
    get: async (organizationId: string, budgetId: string): Promise<T.Budget> =>
      this.envelope<T.Budget>({ method: 'GET', path: budgetsPath(organizationId, budgetId), headers: this.apiKeyHeaders(), idempotent: true }),
    /** Changes what `input` names (limits, window, mode, alert thresholds); `limit_credits: null` removes that limit. */
    update: async (organizationId: string, budgetId: string, input: T.BudgetUpdateInput): Promise<T.Budget> =>
      this.envelope<T.Budget>({ method: 'PUT', path: budgetsPath(organizationId, budgetId), body: input, headers: this.apiKeyHeaders(), idempotent: true }),
    /** Deletes the budget and its windows; answers it as it was. */
    delete: async (organizationId: string, budgetId: string): Promise<T.Budget> =>
      this.envelope<T.Budget>({ method: 'DELETE', path: budgetsPath(organizationId, budgetId), headers: this.apiKeyHeaders(), idempotent: false }),
  };

  // ---- auto top-up (organization API key with admin; docs/billing.md, "Auto top-up") ----

  /**
   * An organization's auto top-up setting through the application API (`/organizations/{id}/auto-top-up`),
   * with the client's API key, which needs `admin` to read or change it. Answers are the envelope's
   * `data`. Both calls are retried like every safe call: a PUT sets the whole setting, so a repeat
   * changes nothing more.
   */
  readonly autoTopUp = {
    /** The setting; never set, `enabled` is false and the rest null. */
    get: async (organizationId: string): Promise<T.AutoTopUp> =>
      this.envelope<T.AutoTopUp>({ method: 'GET', path: autoTopUpPath(organizationId), headers: this.apiKeyHeaders(), idempotent: true }),
    /**
     * Sets the whole setting (every field required). An unknown `pack` is VALIDATION_ERROR 400 naming the
     * packs. Enabling needs billing available and a saved payment method, else CONFLICT 409 with
     * `body.details.missing` (`billing_available`, `payment_method`) and nothing changes; `enabled: false`
     * needs neither. Enabling resets the count of failures in a row.
     */
    set: async (organizationId: string, input: T.AutoTopUpInput): Promise<T.AutoTopUp> =>
      this.envelope<T.AutoTopUp>({ method: 'PUT', path: autoTopUpPath(organizationId), body: input, headers: this.apiKeyHeaders(), idempotent: true }),
  };

  // ---- internals ----

  private call<R>(options: CallOptions, transport = this.transport): Promise<Answer<R>> {
    return transport.call<R>(options);
  }

  /** An application API call (docs/openapi.md, Shapes): the envelope's data. */
  private async envelope<R>(options: CallOptions): Promise<R> {
    return (await this.call<{ data: R }>(options)).data.data;
  }

  /** Concurrent cacheable reads of the same thing share one request (16 first calls, one check). */
  private shared<R>(key: string, load: () => Promise<R>): Promise<R> {
    const running = this.reading.get(key) as Promise<R> | undefined;
    if (running) return running;
    const started = load().finally(() => this.reading.delete(key));
    this.reading.set(key, started);
    return started;
  }

  /**
   * Shared check logic. Reservations always go to the service (they are writes, made safe to retry
   * by their invocation id); plain checks come from the CheckCache while it has them.
   */
  private async check<I extends { tool_name: string; end_user_id?: string; reserve?: boolean; invocation_id?: string }, R extends T.StdioCheckResult>(
    scope: string,
    input: I,
    options: ReadOptions,
    send: (body: I) => Promise<Answer<R>>,
  ): Promise<R> {
    // An end user's budget can refuse one end user and not another: the answer is kept per (tool, end user).
    const subject = input.end_user_id === undefined ? input.tool_name : `${input.tool_name}\u0000${input.end_user_id}`;
    if (input.reserve) {
      const answer = await send({ ...input, invocation_id: input.invocation_id ?? uuidv7() });
      this.checks.noteCheck(scope, subject, answer.data, false);
      return answer.data;
    }
    if (!options.forceRefresh) {
      const hit = this.checks.get<R>(scope, subject);
      if (hit) return hit;
    }
    return this.shared(`check\u0000${scope}\u0000${subject}`, async () => {
      const answer = await send(input);
      this.checks.noteCheck(scope, subject, answer.data, true);
      return answer.data;
    });
  }

  private missing(what: string): CreditgateError {
    return new CreditgateError({ code: 'MISSING_CREDENTIALS', message: `this call needs ${what}; create the client with it` });
  }

  private apiKeyHeaders(): Record<string, string> {
    if (!this.credentials.apiKey) throw this.missing('an organization API key (apiKey)');
    return { authorization: `Bearer ${this.credentials.apiKey}` };
  }

  private serviceHeaders(): Record<string, string> {
    if (!this.credentials.serviceKey) throw this.missing('the service key (serviceKey)');
    return { 'x-mcp-service-key': this.credentials.serviceKey };
  }

  private meteringHeaders(): Record<string, string> {
    if (this.credentials.serviceKey) return this.serviceHeaders();
    if (this.credentials.apiKey) return this.apiKeyHeaders();
    throw this.missing('an API key or the service key');
  }

  private deploymentCredentials(): { deploymentId: string; deploymentSecret: string } {
    const { deploymentId, deploymentSecret } = this.credentials;
    if (!deploymentId || !deploymentSecret) throw this.missing('deployment credentials (deploymentId and deploymentSecret)');
    return { deploymentId, deploymentSecret };
  }

  private deploymentHeaders(): Record<string, string> {
    const { deploymentId, deploymentSecret } = this.deploymentCredentials();
    return { 'x-deployment-id': deploymentId, 'x-deployment-secret': deploymentSecret };
  }
}

/**
 * A client for creditgate's /api/v1 routes.
 *
 * ```ts
 * const cg = createClient({ apiKey: process.env.CREDITGATE_API_KEY }, { baseUrl: 'https://creditgate.example.com' });
 * const { allowed, reason } = await cg.stdio.checkEntitlement({ tool_name: 'search' });
 * ```
 */
export function createClient(credentials: Credentials, options: ClientOptions): CreditgateClient {
  return new CreditgateClient(credentials, options);
}
