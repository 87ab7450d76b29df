import type { Clock } from './clock.js';
import { deliveryHeaders, eventPayload } from './events.js';
import type { StripeEventObject } from './objects.js';

/** Posts one signed delivery and reports the endpoint's status; a throw counts as a network failure. */
export type DeliverFn = (payload: string, headers: Record<string, string>) => Promise<{ status: number }>;

/** `auto`: each event is sent as it is created, failures retried with backoff. `manual`: events wait for `flush()`. */
export type DeliveryMode = 'auto' | 'manual';

export interface DeliveryResult {
  eventId: string;
  type: string;
  /** The endpoint's HTTP status; 0 when the request failed (connection refused, timeout, a throwing `deliver`). */
  status: number;
  ok: boolean;
  /** The `t=` of the signature, unix seconds. */
  signedAt: number;
  error?: string;
}

export interface DeliveryOptions {
  clock: Clock;
  secret: string;
  transport: DeliverFn | null;
  mode: DeliveryMode;
  /** Auto mode: waits before the 2nd, 3rd … attempt; after the last, the event stays queued for `flush()`. */
  retryDelaysMs: readonly number[];
  onResult?: (result: DeliveryResult) => void;
}

export interface Delivery {
  enqueue(event: StripeEventObject): void;
  /** Events not yet acknowledged with a 2xx, in creation order. */
  queue(): StripeEventObject[];
  flush(options?: { order?: 'created' | 'reverse' }): Promise<DeliveryResult[]>;
  deliverEvent(event: StripeEventObject, options?: { times?: number; concurrently?: boolean }): Promise<DeliveryResult[]>;
  resend(event: StripeEventObject, options?: { signedAt?: Date }): Promise<DeliveryResult>;
  log(): DeliveryResult[];
  /** Auto mode: resolves once the deliveries started so far are done (scheduled retries are not waited for). */
  idle(): Promise<void>;
  close(): void;
}

/** Stripe retries for days with growing gaps; standalone use needs the first few, sooner. */
export const DEFAULT_RETRY_DELAYS_MS = [1_000, 5_000, 30_000, 120_000, 600_000, 3_600_000] as const;

export function createDelivery(options: DeliveryOptions): Delivery {
  const pending = new Map<string, StripeEventObject>();
  const results: DeliveryResult[] = [];
  const timers = new Set<NodeJS.Timeout>();
  let chain: Promise<void> = Promise.resolve();
  let closed = false;

  async function attempt(event: StripeEventObject, signedAt = options.clock.seconds()): Promise<DeliveryResult> {
    const transport = options.transport;
    if (!transport) throw new Error('The Stripe stand-in has no webhook destination: pass webhookUrl or deliver');
    const payload = eventPayload(event);
    const base = { eventId: event.id, type: event.type, signedAt };
    let result: DeliveryResult;
    try {
      const { status } = await transport(payload, deliveryHeaders(payload, options.secret, signedAt));
      result = { ...base, status, ok: status >= 200 && status < 300 };
    } catch (error) {
      result = { ...base, status: 0, ok: false, error: (error as Error).message };
    }
    results.push(result);
    if (result.ok) pending.delete(event.id);
    options.onResult?.(result);
    return result;
  }

  function schedule(event: StripeEventObject, attemptIndex: number): void {
    chain = chain.then(async () => {
      if (closed || !pending.has(event.id)) return;
      const result = await attempt(event);
      if (!result.ok) retryLater(event, attemptIndex);
    });
  }

  function retryLater(event: StripeEventObject, attemptIndex: number): void {
    const delay = options.retryDelaysMs[attemptIndex];
    if (delay === undefined || closed) return;
    const timer = setTimeout(() => {
      timers.delete(timer);
      schedule(event, attemptIndex + 1);
    }, delay);
    timer.unref();
    timers.add(timer);
  }

  return {
    enqueue(event) {
      pending.set(event.id, event);
      if (options.mode === 'auto' && options.transport) schedule(event, 0);
    },
    queue: () => [...pending.values()],
    async flush({ order = 'created' } = {}) {
      const batch = [...pending.values()];
      if (order === 'reverse') batch.reverse();
      const out: DeliveryResult[] = [];
      for (const event of batch) {
        if (pending.has(event.id)) out.push(await attempt(event));
      }
      return out;
    },
    async deliverEvent(event, { times = 1, concurrently = false } = {}) {
      if (concurrently) return Promise.all(Array.from({ length: times }, () => attempt(event)));
      const out: DeliveryResult[] = [];
      for (let i = 0; i < times; i++) out.push(await attempt(event));
      return out;
    },
    resend: (event, { signedAt } = {}) => attempt(event, signedAt ? Math.floor(signedAt.getTime() / 1000) : undefined),
    log: () => [...results],
    async idle() {
      let seen: Promise<void> | undefined;
      while (seen !== chain) {
        seen = chain;
        await chain;
      }
    },
    close() {
      closed = true;
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
    },
  };
}

/** Delivery by HTTP POST to `url`, with Stripe's patience (it gives up on an endpoint after about 10 s). */
export function fetchTransport(url: string, timeoutMs = 10_000): DeliverFn {
  return async (payload, headers) => {
    const response = await fetch(url, { method: 'POST', headers, body: payload, signal: AbortSignal.timeout(timeoutMs) });
    await response.arrayBuffer().catch(() => undefined);
    return { status: response.status };
  };
}
