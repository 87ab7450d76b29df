import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createHarness, type Harness, json, signUp, signUpWithOrganization } from '../../test/harness.js';

/**
 * docs/input.md, URLs users store: URLs users store (avatar_url, website, logo_url) are http/https only.
 * The review stored `javascript:` URLs that other members' browsers would open. One schema
 * (StoredUrl, src/http/schemas.ts) for every such field.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

const HOSTILE = [
  'javascript:alert(document.cookie)',
  'JavaScript:alert(1)',
  'data:text/html,<script>alert(1)</script>',
  'file:///etc/passwd',
  'vbscript:msgbox(1)',
  'ftp://example.com/logo.png',
  'https:///no-host',
  '//example.com/protocol-relative.png',
  `https://example.com/${'a'.repeat(2000)}`,
];
const FINE = ['https://example.com/a.png', 'http://example.com', 'HTTPS://Example.com/Logo.PNG?size=2#top'];

type Fields = { error: { code: string }; details: { fields: Array<{ field: string }> } };

describe('stored URLs are http or https only', () => {
  it('PUT /auth/me avatar_url: hostile schemes are 400 naming avatar_url and nothing is stored; http(s) is stored', async () => {
    const u = await signUp(h);
    for (const avatar_url of HOSTILE) {
      const res = await h.request({ method: 'PUT', url: '/auth/me', headers: bearer(u.accessToken), payload: { avatar_url } });
      expect(res.statusCode, avatar_url.slice(0, 60)).toBe(400);
      const body = json<Fields>(res);
      expect(body.error.code).toBe('VALIDATION_ERROR');
      expect(body.details.fields.map((f) => f.field)).toContain('avatar_url');
    }
    const stored = await h.deps.db.query<{ avatar_url: string | null }>('SELECT avatar_url FROM users WHERE id = $1', [u.userId]);
    expect(stored[0]!.avatar_url).toBeNull();
    for (const avatar_url of FINE) {
      const res = await h.request({ method: 'PUT', url: '/auth/me', headers: bearer(u.accessToken), payload: { avatar_url } });
      expect(res.statusCode, avatar_url).toBe(200);
      expect(json<{ data: { avatar_url: string } }>(res).data.avatar_url).toBe(avatar_url);
    }
  });

  it('PUT /organizations/{id} logo_url and website: the same rule, 400 naming the field', async () => {
    const owner = await signUpWithOrganization(h);
    const put = (payload: Record<string, string>) =>
      h.request({ method: 'PUT', url: `/organizations/${owner.organizationId}`, headers: bearer(owner.accessToken), payload });
    for (const field of ['logo_url', 'website']) {
      for (const url of HOSTILE) {
        const res = await put({ [field]: url });
        expect(res.statusCode, `${field} ${url.slice(0, 60)}`).toBe(400);
        expect(json<Fields>(res).details.fields.map((f) => f.field)).toContain(field);
      }
      for (const url of FINE) expect((await put({ [field]: url })).statusCode, `${field} ${url}`).toBe(200);
    }
    const stored = await h.deps.db.query<{ logo_url: string; website: string }>('SELECT logo_url, website FROM organizations WHERE id = $1', [
      owner.organizationId,
    ]);
    expect(stored[0]).toEqual({ logo_url: FINE[2], website: FINE[2] });
  });
});
