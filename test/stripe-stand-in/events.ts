import { createHmac } from 'node:crypto';
import { newId } from './clock.js';
import type { StripeEventObject } from './objects.js';
import { snapshot } from './state.js';

export const API_VERSION = '2026-10-28.endive';

/** The API request an event came from, when it came from one (Stripe fills `event.request` the same way). */
export interface EventOrigin {
  id: string | null;
  idempotency_key: string | null;
}

/** A snapshot event: `data.object` as the object was at this instant. */
export function buildEvent(
  type: string,
  object: object,
  created: number,
  previousAttributes?: Record<string, unknown>,
  origin: EventOrigin = { id: null, idempotency_key: null },
): StripeEventObject {
  return {
    id: newId('evt_'),
    object: 'event',
    api_version: API_VERSION,
    created,
    type,
    data: previousAttributes ? { object: snapshot(object), previous_attributes: snapshot(previousAttributes) } : { object: snapshot(object) },
    livemode: false,
    pending_webhooks: 1,
    request: { ...origin },
  };
}

/** The body Stripe posts: the event, pretty-printed, byte for byte the same on every delivery attempt. */
export function eventPayload(event: StripeEventObject): string {
  return JSON.stringify(event, null, 2);
}

/** `Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<payload>")>`, as Stripe signs. */
export function signatureHeader(payload: string, secret: string, timestamp: number): string {
  const v1 = createHmac('sha256', secret).update(`${timestamp}.${payload}`, 'utf8').digest('hex');
  return `t=${timestamp},v1=${v1}`;
}

/** Every header of a delivery, signed at `timestamp`. */
export function deliveryHeaders(payload: string, secret: string, timestamp: number): Record<string, string> {
  return {
    'Content-Type': 'application/json; charset=utf-8',
    'Stripe-Signature': signatureHeader(payload, secret, timestamp),
    'User-Agent': 'Stripe/1.0 (+https://stripe.com/docs/webhooks)',
    Accept: '*/*; q=0.5, application/xml',
    'Cache-Control': 'no-cache',
  };
}
