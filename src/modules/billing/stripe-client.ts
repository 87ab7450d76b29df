import Stripe from 'stripe';
import type { Config } from '../../config.js';
import type { Deps } from '../../context.js';
import type { Metrics } from '../../lib/metrics.js';
import { AppError, ValidationError } from '../../errors.js';

/**
 * The one way the service talks to Stripe (docs/billing.md): the official SDK, pointed at STRIPE_API_BASE when
 * it is set (a local stand-in in tests, a proxy in some installations). One client per configuration
 * and app (its metrics count every HTTP attempt the SDK makes, retries included).
 */
const clients = new WeakMap<Config, WeakMap<Metrics, Stripe>>();

export function stripeClient(deps: Pick<Deps, 'config' | 'metrics'>): Stripe | null {
  const { config, metrics } = deps;
  if (!config.stripeSecretKey) return null;
  let perApp = clients.get(config);
  if (!perApp) {
    perApp = new WeakMap();
    clients.set(config, perApp);
  }
  let client = perApp.get(metrics);
  if (!client) {
    const base = config.stripeApiBase ? new URL(config.stripeApiBase) : null;
    client = new Stripe(config.stripeSecretKey, {
      ...(base
        ? {
            host: base.hostname,
            port: base.port || (base.protocol === 'https:' ? 443 : 80),
            protocol: base.protocol === 'https:' ? 'https' : 'http',
          }
        : {}),
      // The SDK retries with its own Idempotency-Key, so a retried POST has one effect.
      maxNetworkRetries: 1,
      timeout: 10_000,
      appInfo: { name: 'creditgate' },
      httpClient: countedHttpClient(metrics),
    });
    perApp.set(metrics, client);
  }
  return client;
}

/** The SDK's own Node HTTP client, each attempt counted in creditgate_upstream_requests_total{upstream="stripe"}. */
function countedHttpClient(metrics: Metrics): Stripe.HttpClient {
  const inner = Stripe.createNodeHttpClient();
  const counted = Object.create(inner) as Stripe.HttpClient;
  counted.makeRequest = (...args) =>
    metrics.observeUpstream('stripe', () => inner.makeRequest(...args), (res) => res.getStatusCode());
  return counted;
}

/** For selling: Stripe must be configured, else 503 BILLING_NOT_CONFIGURED (a state of the installation, not of the request). */
export function requireStripe(deps: Pick<Deps, 'config' | 'metrics'>): Stripe {
  const client = stripeClient(deps);
  if (!client) throw new AppError('BILLING_NOT_CONFIGURED', 'Billing is not configured on this installation (STRIPE_SECRET_KEY is not set)');
  return client;
}

/** Seconds a signature's timestamp may differ from the service clock, either way (docs/billing.md, "Inbound events"). */
export const SIGNATURE_TOLERANCE_S = 300;

/** The timestamp the SDK verified: it reads `t=` as below (the last one wins), and that is the one the HMAC covers. */
function signedAt(header: string): number {
  let timestamp = -1;
  for (const item of header.split(',')) {
    const [key, value] = item.split('=');
    if (key === 't') timestamp = Number.parseInt(value ?? '', 10);
  }
  return timestamp;
}

const badSignature = (reason: string) =>
  new ValidationError(`Invalid Stripe signature: ${reason}`, [
    { field: 'stripe-signature', message: 'does not verify (wrong secret, altered body, or signed more than 5 minutes before or after now)' },
  ]);

/**
 * Verify a delivery with the SDK (raw body, `Stripe-Signature`) against the service's clock, 5 minutes
 * either way. The SDK checks only that the signature is not too old (`receivedAt` is our clock, so
 * tests move it); a timestamp too far ahead is refused here, so a signature cannot be made to stay
 * valid for longer than the tolerance. Any failure, including a body that is not an event, is 400
 * naming the header or the body.
 */
export function verifyStripeEvent(rawBody: string, signature: string, secret: string, now: Date): Stripe.Event {
  let event: Stripe.Event;
  try {
    event = Stripe.webhooks.constructEvent(rawBody, signature, secret, SIGNATURE_TOLERANCE_S, undefined, now.getTime());
  } catch (error) {
    throw badSignature((error as Error).message);
  }
  // A timestamp that is not a number (`t=x` signs "NaN.<body>") passes the SDK's age check forever.
  const timestamp = signedAt(signature);
  if (!Number.isSafeInteger(timestamp)) throw badSignature('Timestamp is not a number');
  if (timestamp - Math.floor(now.getTime() / 1000) > SIGNATURE_TOLERANCE_S) throw badSignature('Timestamp is in the future beyond the tolerance');
  const e = event as unknown as Record<string, unknown>;
  const data = e.data as { object?: unknown } | undefined;
  if (typeof e.id !== 'string' || typeof e.type !== 'string' || typeof e.created !== 'number' || !data || typeof data.object !== 'object' || data.object === null) {
    throw new ValidationError('The body is not a Stripe event', [{ field: 'body', message: 'an event needs id, type, created and data.object' }]);
  }
  if (e.id.length > 255 || e.type.length > 255) throw new ValidationError('The event id or type is too long', [{ field: 'body', message: 'id and type ≤ 255 characters' }]);
  return event;
}

/** True for an answer Stripe may give differently later (network, 5xx, 429, lock timeout): worth retrying. */
export function isTransientStripeError(error: unknown): boolean {
  if (!(error instanceof Stripe.errors.StripeError)) return true;
  if (error instanceof Stripe.errors.StripeConnectionError || error instanceof Stripe.errors.StripeAPIError) return true;
  if (error instanceof Stripe.errors.StripeRateLimitError) return true;
  return (error.statusCode ?? 500) >= 500 || error.statusCode === 409;
}

export { Stripe };
