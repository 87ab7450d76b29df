import Fastify, { type FastifyInstance } from 'fastify';
import Stripe from 'stripe';
import { type StripeStandIn, type StripeStandInOptions, startStripeStandIn } from './server.js';

/** A fixed instant (Jan 31, so month ends clamp) that tests move by hand: nothing here reads the wall clock. */
export const START = Date.UTC(2031, 0, 31, 12, 0, 0);

export interface Kit {
  standIn: StripeStandIn;
  /** The official SDK, pointed at the stand-in exactly as the product does. */
  stripe: Stripe;
  /** Events the webhook endpoint verified with `Stripe.webhooks.constructEvent`, in arrival order. */
  received: Stripe.Event[];
  /** Why the endpoint refused a delivery (signature errors), in arrival order. */
  rejected: string[];
  /** The endpoint answers this status to verified events (default 200). */
  respond(status: number): void;
  nowMs(): number;
  advance(seconds: number): void;
  close(): Promise<void>;
}

/**
 * A Fastify webhook endpoint reached through `inject`, verifying each delivery against the kit's clock
 * with the SDK and a 300 s tolerance, the way the product's receiver does.
 */
function webhookApp(kit: { secret: () => string; nowMs: () => number; received: Stripe.Event[]; rejected: string[]; status: () => number }): FastifyInstance {
  const app = Fastify();
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => done(null, body));
  app.post('/webhooks/stripe', async (request, reply) => {
    try {
      const signature = request.headers['stripe-signature'] as string;
      const event = Stripe.webhooks.constructEvent(request.body as string, signature, kit.secret(), 300, undefined, kit.nowMs());
      kit.received.push(event);
      return reply.code(kit.status()).send({ received: true });
    } catch (error) {
      kit.rejected.push((error as Error).message);
      return reply.code(400).send({ error: (error as Error).message });
    }
  });
  return app;
}

export async function startKit(options: Omit<StripeStandInOptions, 'now' | 'deliver'> = {}): Promise<Kit> {
  let now = START;
  let status = 200;
  let secret = '';
  const received: Stripe.Event[] = [];
  const rejected: string[] = [];
  const app = webhookApp({ secret: () => secret, nowMs: () => now, received, rejected, status: () => status });
  const standIn = await startStripeStandIn({
    ...options,
    now: () => new Date(now),
    deliver: async (payload, headers) => {
      const response = await app.inject({ method: 'POST', url: '/webhooks/stripe', headers, payload });
      return { status: response.statusCode };
    },
  });
  secret = standIn.webhookSecret;
  const stripe = new Stripe(standIn.secretKey, { host: '127.0.0.1', port: standIn.port, protocol: 'http', maxNetworkRetries: 0 });
  return {
    standIn,
    stripe,
    received,
    rejected,
    respond: (code) => {
      status = code;
    },
    nowMs: () => now,
    advance: (seconds) => {
      now += seconds * 1000;
    },
    close: async () => {
      await standIn.close();
      await app.close();
    },
  };
}

/** A customer, a recurring price and a one-time price, made through the SDK. */
export async function catalog(stripe: Stripe) {
  const monthly = await stripe.prices.create({ product_data: { name: 'Launch' }, unit_amount: 4900, currency: 'usd', recurring: { interval: 'month' } });
  const growth = await stripe.prices.create({ product: monthly.product as string, unit_amount: 19900, currency: 'usd', recurring: { interval: 'month' } });
  const pack = await stripe.prices.create({ product_data: { name: 'Small pack' }, unit_amount: 500, currency: 'usd' });
  const customer = await stripe.customers.create({ email: 'ada@example.com', name: 'Ada', metadata: { organization_id: 'org_1' } });
  return { monthly, growth, pack, customer };
}

/** A paid subscription through Checkout, its events delivered; returns its id. */
export async function subscribe(kit: Kit, price: string, customer: string): Promise<string> {
  const session = await kit.stripe.checkout.sessions.create({
    mode: 'subscription',
    customer,
    line_items: [{ price, quantity: 1 }],
    success_url: 'https://app.example/ok?session={CHECKOUT_SESSION_ID}',
    subscription_data: { metadata: { organization_id: 'org_1' } },
  });
  kit.standIn.completeCheckout(session.id);
  await kit.standIn.flush();
  return kit.standIn.state.checkoutSessions.get(session.id)!.subscription!;
}

export function types(events: readonly { type: string }[]): string[] {
  return events.map((e) => e.type);
}
