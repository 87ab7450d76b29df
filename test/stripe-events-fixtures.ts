import type { LightMyRequestResponse } from 'fastify';
import Stripe from 'stripe';
import type { Harness } from './harness.js';
import { unique } from './harness.js';

/**
 * Stripe events built and signed the way Stripe does (the SDK's own test header), for the tests of
 * POST /webhooks/stripe that need no Stripe API: the stateful stand-in covers the rest.
 */
export const WEBHOOK_SECRET = 'whsec_test_creditgate_0123456789abcdef';
export const PRICE_TIERS = { price_launch: 'launch', price_growth: 'growth', price_enterprise: 'enterprise' } as const;
export const PACKS = { small: { credits: 1000, priceId: 'price_pack_small' }, large: { credits: 10_000, priceId: 'price_pack_large' } };

export const stripeConfig = {
  stripeWebhookSecret: WEBHOOK_SECRET,
  stripePriceTiers: { ...PRICE_TIERS },
  creditPacks: PACKS,
};

const seconds = (d: Date) => Math.floor(d.getTime() / 1000);

export interface SubscriptionInput {
  id: string;
  customer: string;
  price: string;
  status?: string;
  start: Date;
  end: Date;
  organizationId?: string;
  cancelAtPeriodEnd?: boolean;
}

export function subscriptionObject(s: SubscriptionInput): Record<string, unknown> {
  return {
    id: s.id,
    object: 'subscription',
    customer: s.customer,
    status: s.status ?? 'active',
    cancel_at_period_end: s.cancelAtPeriodEnd ?? false,
    metadata: s.organizationId ? { organization_id: s.organizationId } : {},
    created: seconds(s.start),
    items: {
      object: 'list',
      data: [
        {
          id: `si_${s.id}`,
          object: 'subscription_item',
          price: { id: s.price, object: 'price' },
          quantity: 1,
          current_period_start: seconds(s.start),
          current_period_end: seconds(s.end),
        },
      ],
    },
  };
}

export function stripeEvent(type: string, object: Record<string, unknown>, created: Date, id = unique('evt')): { id: string; body: string } {
  const body = JSON.stringify({
    id,
    object: 'event',
    api_version: '2026-10-28.endive',
    created: seconds(created),
    type,
    data: { object },
    livemode: false,
    pending_webhooks: 1,
    request: { id: null, idempotency_key: null },
  });
  return { id, body };
}

export function signature(body: string, at: Date, secret = WEBHOOK_SECRET): string {
  return Stripe.webhooks.generateTestHeaderString({ payload: body, secret, timestamp: seconds(at) });
}

/** Deliver a signed event to the harness; `signedAt` defaults to the harness clock. */
export function deliver(h: Harness, event: { body: string }, options: { signedAt?: Date; secret?: string } = {}): Promise<LightMyRequestResponse> {
  return h.request({
    method: 'POST',
    url: '/webhooks/stripe',
    headers: { 'content-type': 'application/json', 'stripe-signature': signature(event.body, options.signedAt ?? h.clock.now(), options.secret) },
    payload: event.body,
  });
}

export function checkoutSessionObject(input: {
  id?: string;
  customer: string;
  organizationId: string;
  deploymentId: string;
  pack: string;
  credits: number;
  paymentIntent: string;
  paymentStatus?: string;
  amountTotal?: number;
}): Record<string, unknown> {
  return {
    id: input.id ?? unique('cs_test'),
    object: 'checkout.session',
    mode: 'payment',
    status: 'complete',
    payment_status: input.paymentStatus ?? 'paid',
    customer: input.customer,
    payment_intent: input.paymentIntent,
    amount_total: input.amountTotal ?? 500,
    currency: 'usd',
    metadata: {
      organization_id: input.organizationId,
      deployment_id: input.deploymentId,
      creditgate_pack: input.pack,
      creditgate_credits: String(input.credits),
      creditgate_price: 'price_pack_small',
    },
  };
}
