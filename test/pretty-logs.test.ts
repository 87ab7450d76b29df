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

describe('LOG_FORMAT=pretty', () => {
  it('writes one line per request, with the redacted URL, status and time, and no secret', async () => {
    const t = await createTenant(h);
    let output = '';
    const logStream = new Writable({
      write(chunk, _encoding, done) {
        output += chunk.toString();
        done();
      },
    });
    const config = testConfig({ logLevel: 'info', logFormat: 'pretty' });
    const app = await buildApp({ config, db: h.deps.db, clock: h.clock, logStream });
    try {
      const token = 'cginv_pretty-log-secret-token-0123456789';
      const headers = { ...bearer(t.apiKey), 'x-admin-key': config.adminApiKey, 'x-deployment-secret': t.deploymentSecret };
      const answers = [
        await app.inject({ method: 'GET', url: '/healthz' }),
        await app.inject({ method: 'GET', url: `/invitations/${token}?token=${token}`, headers }),
        await app.inject({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers, payload: { tool_name: 'rag_query' } }),
        await app.inject({ method: 'GET', url: '/' }),
      ];
      expect(answers.map((a) => a.statusCode)).toEqual([200, 404, 200, 302]);
      const lines = output.trimEnd().split('\n');
      expect(lines, output).toHaveLength(4);
      const time = String.raw`\[\d\d:\d\d:\d\d\.\d{3}\] INFO: req-\w+ `;
      const ms = String.raw` \d+\.\d ms$`;
      expect(lines[0]).toMatch(new RegExp(`^${time}GET /healthz 200${ms}`));
      expect(lines[1]).toMatch(new RegExp(`^${time}GET /invitations/\\[redacted\\]\\?token=\\[redacted\\] 404${ms}`));
      expect(lines[2]).toMatch(new RegExp(`^${time}POST /api/v1/mcp/stdio/check-entitlement 200${ms}`));
      expect(lines[3]).toMatch(new RegExp(`^${time}GET / 302${ms}`));
      for (const secret of [token, t.apiKey, config.adminApiKey, t.deploymentSecret]) expect(output).not.toContain(secret);
    } finally {
      await app.close();
    }
  });
});
