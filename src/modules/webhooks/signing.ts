import { createHmac } from 'node:crypto';

/**
 * SPEC §7 signatures. `x-service-signature` is the hex HMAC-SHA256 of the exact bytes sent; the
 * Standard Webhooks headers (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64>` over
 * `id.timestamp.body`) let receivers verify with a Standard Webhooks library. The key is the
 * base64-decoded remainder of a `whsec_` secret, or the UTF-8 bytes of any other secret.
 */
export function signingKey(secret: string): Buffer {
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
  const key = signingKey(input.secret);
  const hex = createHmac('sha256', key).update(input.body).digest('hex');
  const standard = createHmac('sha256', key)
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
