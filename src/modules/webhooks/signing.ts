import { createHmac } from 'node:crypto';

/**
 * Signatures, two keys from one secret (docs/webhooks.md, Verifying a delivery):
 * - `x-service-signature` (the original interface's header) is the hex HMAC-SHA256 of the exact bytes sent, keyed
 *   with the secret exactly as given or shown (its UTF-8 bytes, a `whsec_` prefix included), so a
 *   receiver that follows that header's rule literally — `createHmac('sha256', secret)` — verifies it.
 * - The Standard Webhooks headers (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64>`
 *   over `id.timestamp.body`) are keyed as that specification says: the base64-decoded remainder of a
 *   `whsec_` secret, or the UTF-8 bytes of any other secret.
 */
export function standardWebhooksKey(secret: string): Buffer {
  if (secret.startsWith('whsec_')) {
    const decoded = Buffer.from(secret.slice('whsec_'.length), 'base64');
    if (decoded.length > 0) return decoded;
  }
  return Buffer.from(secret, 'utf8');
}

export function signatureHeaders(input: {
  secret: string;
  webhookId: string;
  /** Epoch seconds. */
  timestamp: number;
  body: Buffer;
}): Record<string, string> {
  const hex = createHmac('sha256', Buffer.from(input.secret, 'utf8')).update(input.body).digest('hex');
  const standard = createHmac('sha256', standardWebhooksKey(input.secret))
    .update(`${input.webhookId}.${input.timestamp}.`)
    .update(input.body)
    .digest('base64');
  return {
    'x-service-signature': hex,
    'x-service-timestamp': String(input.timestamp),
    'x-service-webhook-id': input.webhookId,
    'webhook-id': input.webhookId,
    'webhook-timestamp': String(input.timestamp),
    'webhook-signature': `v1,${standard}`,
  };
}
