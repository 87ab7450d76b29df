import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { firstStartNotice } from '../src/main.js';

/** What the first development start prints (README, "Quick start"): the keys to call the service with, never the signing or encryption key. */
describe('first start notice', () => {
  const generated = {
    JWT_SECRET: 'jwt-secret-value-0123456789',
    MCP_SERVICE_KEY: 'mcp-service-key-value-0123456789',
    ADMIN_API_KEY: 'admin-api-key-value-0123456789',
    ENCRYPTION_KEY: 'encryption-key-value-0123456789',
  };

  it('prints ADMIN_API_KEY and MCP_SERVICE_KEY and where the file is, not JWT_SECRET or ENCRYPTION_KEY', () => {
    const notice = firstStartNotice(generated, '/data');
    expect(notice).toContain(`ADMIN_API_KEY=${generated.ADMIN_API_KEY}\n`);
    expect(notice).toContain(`MCP_SERVICE_KEY=${generated.MCP_SERVICE_KEY}\n`);
    expect(notice).toContain(join('/data', 'secrets.json'));
    expect(notice).toContain('JWT_SECRET, ENCRYPTION_KEY: in that file, not shown');
    expect(notice).not.toContain(generated.JWT_SECRET);
    expect(notice).not.toContain(generated.ENCRYPTION_KEY);
  });

  it('prints only what was generated, and nothing when nothing was', () => {
    expect(firstStartNotice({}, '/data')).toBe('');
    const notice = firstStartNotice({ ENCRYPTION_KEY: generated.ENCRYPTION_KEY }, '/data');
    expect(notice).not.toContain(generated.ENCRYPTION_KEY);
    expect(notice).not.toContain('ADMIN_API_KEY=');
    expect(notice).toContain('ENCRYPTION_KEY: in that file, not shown');
  });
});
