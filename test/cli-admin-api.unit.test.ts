import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminApi, baseUrl, isLoopbackUrl, readSecret, withoutUserinfo } from '../src/cli/admin-api.js';
import { UsageError } from '../src/cli/exit-codes.js';
import { loadConfig } from '../src/config.js';

/**
 * Where the CLI sends ADMIN_API_KEY (docs/cli.md, "Operator commands"): the development secrets of
 * DATA_DIR only to a service on this machine, plain http only to this machine unless
 * --insecure-http, and a URL with a password in it never echoed with it.
 */
let dataDir: string;
let generatedAdminKey: string;

beforeAll(() => {
  dataDir = mkdtempSync(join(tmpdir(), 'cg-cli-admin-api-'));
  // What a first development `serve` leaves in DATA_DIR: secrets.json with the four generated secrets.
  generatedAdminKey = loadConfig({ DATA_DIR: dataDir }).generated.ADMIN_API_KEY!;
});
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

function usageError(run: () => unknown): UsageError {
  try {
    run();
  } catch (err) {
    if (err instanceof UsageError) return err;
    throw err;
  }
  throw new Error('no usage error');
}

describe('the development secrets of DATA_DIR go only to this machine', () => {
  it.each([
    'https://creditgate.example.com',
    'https://10.0.0.5:8080',
    'https://creditgate.internal',
    'https://127.0.0.1.nip.io',
    'https://[2001:db8::1]:8080',
  ])('%s: no key read from secrets.json, refused before anything is sent', (url) => {
    expect(readSecret('ADMIN_API_KEY', url, { DATA_DIR: dataDir })).toBeUndefined();
    expect(readSecret('MCP_SERVICE_KEY', url, { DATA_DIR: dataDir })).toBeUndefined();
    expect(usageError(() => adminApi(url, { DATA_DIR: dataDir })).message).toMatch(/ADMIN_API_KEY is not set .*only for a service on this machine/);
  });

  it('an ADMIN_API_KEY set in the environment goes to a remote https service', () => {
    expect(readSecret('ADMIN_API_KEY', 'https://creditgate.example.com', { DATA_DIR: dataDir, ADMIN_API_KEY: 'from-env' })).toBe('from-env');
    expect(adminApi('https://creditgate.example.com', { DATA_DIR: dataDir, ADMIN_API_KEY: 'from-env' }).url).toBe('https://creditgate.example.com');
  });

  it('a service on this machine gets the generated key from secrets.json', async () => {
    let seen: string | undefined;
    const server = createServer((req, res) => {
      seen = String(req.headers['x-admin-key']);
      res.writeHead(200, { 'content-type': 'application/json' }).end('[]');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const url = baseUrl(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, {});
      await adminApi(url, { DATA_DIR: dataDir }).send('GET', '/api/v1/admin/deployments');
      expect(seen).toBe(generatedAdminKey);
    } finally {
      server.close();
    }
  });

  it.each([
    ['http://127.0.0.1:8080', true],
    ['http://127.8.9.10', true],
    ['http://localhost:8080', true],
    ['http://api.localhost', true],
    ['http://[::1]:8080', true],
    ['http://[::ffff:127.0.0.1]', true],
    ['http://0.0.0.0:8080', true],
    ['http://10.0.0.5', false],
    ['http://localhost.example.com', false],
    ['http://127.0.0.1.nip.io', false],
    ['http://[::ffff:10.0.0.1]', false],
    ['not a url', false],
  ])('%s is this machine: %s', (url, loopback) => {
    expect(isLoopbackUrl(url)).toBe(loopback);
  });
});

describe('plain http only to this machine', () => {
  it('refuses http:// to another host before anything is sent, even with ADMIN_API_KEY set', () => {
    const env = { DATA_DIR: dataDir, ADMIN_API_KEY: 'from-env' };
    expect(usageError(() => adminApi('http://creditgate.example.com:8080', env)).message).toMatch(
      /refusing to send ADMIN_API_KEY over plain http to http:\/\/creditgate\.example\.com:8080; use https, or --insecure-http/,
    );
    expect(usageError(() => adminApi('http://10.0.0.5', env)).message).toMatch(/plain http/);
  });

  it('--insecure-http allows it, with a key from the environment only', () => {
    const api = adminApi('http://creditgate.example.com:8080', { DATA_DIR: dataDir, ADMIN_API_KEY: 'from-env' }, { allowInsecureHttp: true });
    expect(api.url).toBe('http://creditgate.example.com:8080');
    expect(usageError(() => adminApi('http://creditgate.example.com:8080', { DATA_DIR: dataDir }, { allowInsecureHttp: true })).message).toMatch(
      /ADMIN_API_KEY is not set/,
    );
  });
});

describe('a URL is never echoed with its user name and password', () => {
  it.each([
    ['ftp://ops:hunter2hunter2@example.com', 'must be an http(s) URL, got "ftp://example.com"'],
    ['http://ops:hunter2hunter2@example.com/', 'must not hold a user name or password, got "http://example.com/"'],
    ['https://ops:hunter2hunter2@exa mple.com', 'must be an http(s) URL, got "https://exa mple.com"'],
  ])('%s', (url, message) => {
    const flag = usageError(() => baseUrl(url, {})).message;
    const env = usageError(() => baseUrl(undefined, { CREDITGATE_URL: url })).message;
    expect(flag).toBe(`--url ${message}`);
    expect(env).toBe(`CREDITGATE_URL ${message}`);
    for (const text of [flag, env]) expect(text).not.toMatch(/hunter2|ops/);
  });

  it('strips only what is before the @ of the authority', () => {
    expect(withoutUserinfo('https://a:b@host:1/p?q=x@y')).toBe('https://host:1/p?q=x@y');
    expect(withoutUserinfo('https://host/p?q=x@y')).toBe('https://host/p?q=x@y');
  });
});
