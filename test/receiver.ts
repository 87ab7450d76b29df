import { randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A real webhook receiver on loopback for tests: records every request (method, path, headers, raw
 * body) and answers from a script of responses (the last one repeats).
 *
 * Its `url` carries a path prefix of its own (`/rx-<random>`): a port is reused once its receiver
 * closed, and a delivery another test file left to a closed receiver (retried by a worker, or by a
 * server process a test started) must not count as a request to this one. Requests outside the
 * prefix are answered 404 and kept in `stray`; `received` holds the others, their path without it.
 */
export interface Received {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

export interface Scripted {
  status: number;
  body?: string;
  headers?: Record<string, string>;
  /** Wait this long before answering (timeouts). */
  delayMs?: number;
}

export interface Receiver {
  url: string;
  port: number;
  received: Received[];
  /** Requests to this port that were not meant for this receiver (outside its path prefix). */
  stray: Received[];
  /** Answers for the next requests, in order; the last one repeats. Resets the record. */
  script(...responses: Scripted[]): void;
  close(): Promise<void>;
}

export async function startReceiver(): Promise<Receiver> {
  let responses: Scripted[] = [{ status: 200, body: 'ok' }];
  let served = 0;
  const received: Received[] = [];
  const stray: Received[] = [];
  const prefix = `/rx-${randomBytes(6).toString('hex')}`;
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const path = req.url ?? '';
      const rest = path.slice(prefix.length);
      const ours = path.startsWith(prefix) && (rest === '' || rest.startsWith('/') || rest.startsWith('?'));
      const request = { method: req.method ?? '', path: ours ? (rest.startsWith('/') ? rest : `/${rest}`) : path, headers: req.headers, body: Buffer.concat(chunks) };
      if (!ours) {
        stray.push(request);
        res.writeHead(404, { 'content-type': 'text/plain' });
        res.end('not this receiver');
        return;
      }
      received.push(request);
      const answer = responses[Math.min(served, responses.length - 1)]!;
      served += 1;
      const send = () => {
        if (res.destroyed) return;
        res.writeHead(answer.status, { 'content-type': 'text/plain', ...answer.headers });
        res.end(answer.body ?? '');
      };
      if (answer.delayMs) setTimeout(send, answer.delayMs);
      else send();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}${prefix}`,
    port,
    received,
    stray,
    script(...next: Scripted[]) {
      responses = next;
      served = 0;
      received.length = 0;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
