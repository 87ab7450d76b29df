import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';

/**
 * METRICS_PORT (docs/operations-metrics.md): a second listener bound to 127.0.0.1 that serves only
 * GET /metrics, without credentials, for a Prometheus or agent on the same host. Loopback only: an
 * address reachable from elsewhere takes the Bearer METRICS_TOKEN route of the main port instead.
 * Opened when the app gets ready (a port in use stops the start), closed with the app.
 */
export function registerMetricsListener(app: FastifyInstance): void {
  const port = app.deps.config.metricsPort;
  if (port === undefined) return;
  let server: Server | undefined;
  app.addHook('onReady', async () => {
    const metrics = app.deps.metrics;
    const listener = createServer((req, res) => {
      const path = (req.url ?? '').split('?')[0];
      if (path !== '/metrics' || (req.method !== 'GET' && req.method !== 'HEAD')) {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('Only GET /metrics is served here\n');
        return;
      }
      metrics.scrape().then(
        (text) => res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(req.method === 'HEAD' ? undefined : text),
        (err: unknown) => {
          app.log.error({ err }, 'metrics listener: scrape failed');
          res.writeHead(500, { 'content-type': 'text/plain' }).end('scrape failed\n');
        },
      );
    });
    await new Promise<void>((resolve, reject) => {
      listener.once('error', reject);
      listener.listen(port, '127.0.0.1', () => {
        listener.off('error', reject);
        resolve();
      });
    });
    server = listener;
    app.log.info({ port: (listener.address() as AddressInfo).port }, 'metrics listener on 127.0.0.1');
  });
  app.addHook('onClose', async () => {
    if (!server) return;
    // Scrapers keep connections alive: drop them rather than wait for them to go.
    server.closeAllConnections();
    await new Promise<void>((resolve) => server!.close(() => resolve()));
  });
}
