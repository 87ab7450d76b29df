import type { Config } from '../src/config.js';
import type { Harness } from './harness.js';
import { type StripeStandIn, startStripeStandIn } from './stripe-stand-in/server.js';

/**
 * The Stripe stand-in for a harness that sells credit packs (docs/billing.md): two packs (small: 1,000
 * credits for $5.00, large: 10,000 for $40.00), its events delivered to the harness's /webhooks/stripe
 * on `flush()`, its clock the harness's once there is one. `config` is what the harness needs.
 */
export async function startPackStandIn(harness: () => Harness | undefined, start: Date): Promise<{ standIn: StripeStandIn; config: Partial<Config>; price: { small: string; large: string } }> {
  const standIn = await startStripeStandIn({
    now: () => harness()?.clock.now() ?? start,
    deliver: async (payload, headers) => ({ status: (await harness()!.request({ method: 'POST', url: '/webhooks/stripe', headers, payload })).statusCode }),
  });
  const price = {
    small: standIn.createPrice({ productName: '1,000 credits', unitAmount: 500 }).id,
    large: standIn.createPrice({ productName: '10,000 credits', unitAmount: 4000 }).id,
  };
  const config: Partial<Config> = {
    stripeSecretKey: standIn.secretKey,
    stripeApiBase: standIn.url,
    stripeWebhookSecret: standIn.webhookSecret,
    creditPacks: { small: { credits: 1000, priceId: price.small }, large: { credits: 10_000, priceId: price.large } },
  };
  return { standIn, config, price };
}
