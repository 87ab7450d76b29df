import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CONSOLE_CSP, CONSOLE_DIR } from '../../src/modules/console/routes.js';
import { createHarness, type Harness } from '../harness.js';

/**
 * The built console goes compressed (docs/console.md "Files and caching"): the build writes a brotli
 * and a gzip copy beside each script, style sheet and the page (console/vite.config.ts), and the
 * service sends the one the request's Accept-Encoding takes, with Content-Encoding, `Vary:
 * Accept-Encoding`, the file's own Content-Type and its caching. Checked on the real build
 * (`npm run build:console`, which `npm test` runs first).
 */
let h: Harness;
let html: string;
let script: string;
let style: string;

beforeAll(async () => {
  if (!existsSync(join(CONSOLE_DIR, 'index.html'))) {
    throw new Error(`The console is not built (${CONSOLE_DIR}): run \`npm run build:console\` (npm test does)`);
  }
  html = readFileSync(join(CONSOLE_DIR, 'index.html'), 'utf8');
  script = /src="\/console\/(assets\/[^"]+\.js)"/.exec(html)?.[1] ?? '';
  style = /href="\/console\/(assets\/[^"]+\.css)"/.exec(html)?.[1] ?? '';
  expect(script, 'the entry script in index.html').not.toBe('');
  expect(style, 'the style sheet in index.html').not.toBe('');
  h = await createHarness();
});
afterAll(async () => {
  await h?.close();
});

const get = (url: string, acceptEncoding?: string) =>
  h.app.inject({ method: 'GET', url, headers: acceptEncoding === undefined ? {} : { 'accept-encoding': acceptEncoding } });

describe('console files, compressed', () => {
  it('sends the entry script as brotli or gzip by Accept-Encoding, decoding to the same bytes, and as it is without one', async () => {
    const file = readFileSync(join(CONSOLE_DIR, script));
    const url = `/console/${script}`;

    const br = await get(url, 'gzip, deflate, br, zstd');
    expect(br.statusCode).toBe(200);
    expect(br.headers['content-encoding']).toBe('br');
    expect(br.headers['content-type']).toMatch(/^(text|application)\/javascript; charset=utf-8$/);
    expect(String(br.headers.vary)).toMatch(/accept-encoding/i);
    expect(br.headers['cache-control']).toBe('public, max-age=31536000, immutable');
    expect(Number(br.headers['content-length'])).toBe(br.rawPayload.length);
    expect(br.rawPayload.length).toBeLessThan(file.length / 2);
    expect(brotliDecompressSync(br.rawPayload).equals(file)).toBe(true);

    for (const accept of ['gzip', 'gzip, deflate', 'br;q=0, gzip']) {
      const gz = await get(url, accept);
      expect(gz.headers['content-encoding'], accept).toBe('gzip');
      expect(gz.headers['content-type']).toMatch(/^(text|application)\/javascript; charset=utf-8$/);
      expect(String(gz.headers.vary)).toMatch(/accept-encoding/i);
      expect(gunzipSync(gz.rawPayload).equals(file)).toBe(true);
    }

    for (const accept of [undefined, 'identity']) {
      const plain = await get(url, accept);
      expect(plain.statusCode).toBe(200);
      expect(plain.headers['content-encoding'], String(accept)).toBeUndefined();
      expect(String(plain.headers.vary)).toMatch(/accept-encoding/i);
      expect(plain.headers['content-type']).toMatch(/^(text|application)\/javascript; charset=utf-8$/);
      expect(plain.rawPayload.equals(file)).toBe(true);
    }
  });

  it('sends the style sheet and the page compressed too, the page with its own headers', async () => {
    const css = await get(`/console/${style}`, 'br');
    expect(css.headers['content-encoding']).toBe('br');
    expect(css.headers['content-type']).toMatch(/^text\/css/);
    expect(brotliDecompressSync(css.rawPayload).equals(readFileSync(join(CONSOLE_DIR, style)))).toBe(true);

    for (const url of ['/console/', '/console/orgs/6f1c3d2e-5b7a-4c1d-9e2f-0a1b2c3d4e5f/usage']) {
      const page = await get(url, 'gzip');
      expect(page.statusCode, url).toBe(200);
      expect(page.headers['content-encoding']).toBe('gzip');
      expect(page.headers['content-type']).toMatch(/^text\/html/);
      expect(page.headers['cache-control']).toBe('no-cache');
      expect(String(page.headers.vary)).toMatch(/accept-encoding/i);
      expect(gunzipSync(page.rawPayload).toString('utf8')).toBe(html);
    }
    const plain = await get('/console/');
    expect(plain.headers['content-encoding']).toBeUndefined();
    expect(plain.body).toBe(html);
  });

  it("allows the page's one inline script (the theme, before first paint) by its hash, and no other", async () => {
    const inline = /<script>([\s\S]*?)<\/script>/.exec(html)?.[1];
    expect(inline, 'the theme script in index.html').toBeTruthy();
    const hash = createHash('sha256').update(inline!).digest('base64');
    const csp = String((await get('/console/')).headers['content-security-policy']);
    expect(csp).toBe(CONSOLE_CSP.replace("script-src 'self'", `script-src 'self' 'sha256-${hash}'`));
    expect(csp).not.toContain('unsafe-inline');
  });
});
