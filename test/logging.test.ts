import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { testConfig } from '../src/config.js';
import { bearer, createHarness, createTenant, type Harness } from './harness.js';

let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

describe('logs', () => {
  it('never contain a bearer secret, even at debug level and on errors', async () => {
    const t = await createTenant(h);
    let output = '';
    const stream = new Writable({
      write(chunk, _encoding, done) {
        output += chunk.toString();
        done();
      },
    });
    const config = testConfig({ logLevel: 'trace' });
    const app = await buildApp({ config, db: h.deps.db, clock: h.clock, logStream: stream });
    try {
      app.get('/api/v1/log-probe', { config: { auth: 'public' } }, async (request) => {
        // What a careless log line would do: dump the request with its headers.
        request.log.info({ req: request, headers: request.headers }, 'probe');
        throw new Error('boom');
      });
      await app.ready();
      const secrets = {
        ...bearer(t.apiKey),
        'x-admin-key': config.adminApiKey,
        'x-mcp-service-key': config.mcpServiceKey,
        'x-deployment-id': t.deploymentId,
        'x-deployment-secret': t.deploymentSecret,
      };
      await app.inject({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: secrets, payload: { tool_name: 'x' } });
      await app.inject({ method: 'GET', url: '/api/v1/admin/deployments', headers: secrets });
      const probe = await app.inject({ method: 'GET', url: '/api/v1/log-probe', headers: secrets });
      expect(probe.statusCode).toBe(500);
      expect(probe.json()).toMatchObject({ code: 'INTERNAL_ERROR', message: 'Internal error' });
      expect(probe.body).not.toContain('boom');
      expect(output).toContain('incoming request');
      expect(output).toContain('[redacted]');
      for (const secret of [t.apiKey, config.adminApiKey, config.mcpServiceKey, t.deploymentSecret]) {
        expect(output).not.toContain(secret);
      }
    } finally {
      await app.close();
    }
  });
});
