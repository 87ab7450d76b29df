/**
 * The webhook receiver of bench/webhooks.ts, in its own process (it must not share an event loop
 * with the load generator or the service): node:http on 127.0.0.1, reads the body and answers
 * 200 "ok" at once. It counts what it received, so the runner can compare deliveries with answers:
 *   requests    every request that reached it (the direct baseline's too)
 *   sends       requests carrying x-service-webhook-id (sent by the proxy)
 *   duplicates  sends whose webhook id it had already seen (a retry after a lost answer)
 *   signed      sends with signature headers; badSignatures those whose x-service-signature is not
 *               the HMAC-SHA256 of the body keyed with the secret given as argv[2], as given (docs/webhooks.md, Verifying a delivery:
 *               a whsec_ secret's UTF-8 bytes, prefix included)
 * The parent reads the counters over IPC (`counts`).
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { serveParent } from './child.js';

export interface ReceiverCounts {
  requests: number;
  sends: number;
  duplicates: number;
  signed: number;
  badSignatures: number;
}

const secret = process.argv[2];
const key = Buffer.from(secret ?? '', 'utf8');
const counts: ReceiverCounts = { requests: 0, sends: 0, duplicates: 0, signed: 0, badSignatures: 0 };
const seen = new Set<string>();

function checkSignature(signature: string, body: Buffer): boolean {
  const expected = Buffer.from(createHmac('sha256', key).update(body).digest('hex'));
  const got = Buffer.from(signature);
  return got.length === expected.length && timingSafeEqual(got, expected);
}

const server = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    counts.requests++;
    const id = req.headers['x-service-webhook-id'];
    if (typeof id === 'string') {
      counts.sends++;
      if (seen.has(id)) counts.duplicates++;
      else seen.add(id);
      const signature = req.headers['x-service-signature'];
      if (typeof signature === 'string') {
        counts.signed++;
        if (!checkSignature(signature, Buffer.concat(chunks))) counts.badSignatures++;
      }
    }
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '2' });
    res.end('ok');
  });
});
// Longer than any pause between measurements: the proxy's pooled connections are not closed under it.
server.keepAliveTimeout = 120_000;
server.headersTimeout = 130_000;

server.listen(0, '127.0.0.1', () => {
  serveParent((server.address() as AddressInfo).port, {
    counts: async () => ({ ...counts }),
  });
});
