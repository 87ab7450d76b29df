import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../app.js';
import { ManualClock } from '../../clock.js';
import { testConfig } from '../../config.js';
import { testDatabase } from '../../../test/harness.js';

const apps: Array<{ close(): Promise<unknown> }> = [];
afterAll(async () => {
  for (const app of apps) await app.close();
});

async function appWithConsoleAt(consoleRoot: string) {
  const app = await buildApp({ config: testConfig(), db: await testDatabase(), clock: new ManualClock('2026-01-15T12:00:00Z'), consoleRoot });
  apps.push(app);
  return app;
}

describe('GET /', () => {
  it('sends a browser to the console when it is built', async () => {
    const root = mkdtempSync(join(tmpdir(), 'cg-console-'));
    writeFileSync(join(root, 'index.html'), '<!doctype html><title>console</title>');
    const app = await appWithConsoleAt(root);
    const res = await app.inject({ method: 'GET', url: '/' });
    expect(res.statusCode).toBe(302);
    expect(res.headers.location).toBe('/console/');
    expect(app.routeList).toContainEqual(expect.objectContaining({ method: 'GET', url: '/', hidden: true }));
  });

  it('sends a browser to the API reference at /docs when the console is not built', async () => {
    const app = await appWithConsoleAt(mkdtempSync(join(tmpdir(), 'cg-no-console-')));
    const res = await app.inject({ method: 'GET', url: '/' });
    expect(res.statusCode).toBe(302);
    expect(res.headers.location).toBe('/docs');
  });
});
