import { describe, expect, it } from 'vitest';
import { isTokenShaped, REDACTED, requestSerializer, SecretRoutes } from './log-redaction.js';

/** Where secrets sit in URLs comes from the routes (config.secretParams); the raw URL is matched, routed or not. */
function routes(): SecretRoutes {
  const secrets = new SecretRoutes();
  secrets.add({ url: '/invitations/:token', config: { secretParams: ['token'] } });
  secrets.add({ url: '/invitations/:token/accept', config: { secretParams: ['token'] } });
  secrets.add({ url: '/organizations/:id/invitations/:invitationId', config: {} });
  secrets.add({ url: '/hooks/:org/:secret(^[a-z]+$)', config: { secretParams: ['secret'] } });
  return secrets;
}

describe('URL redaction for logs', () => {
  const secrets = routes();
  it.each([
    ['/invitations/cginv_abc', `/invitations/${REDACTED}`],
    ['/invitations/cginv_abc/accept', `/invitations/${REDACTED}/accept`],
    ['/invitations/cginv_abc/typo/more', `/invitations/${REDACTED}/typo/more`],
    ['//invitations///cginv_abc', `//invitations///${REDACTED}`],
    ['/%69nvitations/cginv_abc', `/%69nvitations/${REDACTED}`],
    ['/hooks/acme/sekret', `/hooks/acme/${REDACTED}`],
    ['/organizations/o1/invitations/i1', '/organizations/o1/invitations/i1'],
    ['/invitations', '/invitations'],
    ['/Invitations/cginv_abc', `/Invitations/${REDACTED}`],
    ['/auth/verify-email?token=t1&next=%2F', `/auth/verify-email?token=${REDACTED}&next=%2F`],
    ['/x?A%50I_KEY=k&ok=1&Refresh_Token=r&token', `/x?A%50I_KEY=${REDACTED}&ok=1&Refresh_Token=${REDACTED}&token=${REDACTED}`],
    ['/invitations/cginv_abc?lang=en', `/invitations/${REDACTED}?lang=en`],
  ])('%s → %s', (url, logged) => {
    expect(secrets.redactUrl(url)).toBe(logged);
  });

  it.each([
    'password', 'Passwd', 'pwd', 'pass', 'client_secret', 'admin_key', 'x-admin-key', 'authorization', 'signature', 'sig', 'code',
    'session', 'session_id', 'jwt', 'id_token', 'metrics_token', 'user%5Bpassword%5D', 'p%2561ssword', 'private_key', 'credentials',
  ])('a query parameter named %s is hidden whatever its value (docs/operations.md, "Secrets in logs")', (name) => {
    expect(secrets.redactUrl(`/x?${name}=hunter2&lang=en`)).toBe(`/x?${name}=${REDACTED}&lang=en`);
  });

  it('refuses a secretParams name that is not a path parameter of the route (a typo would log the secret)', () => {
    expect(() => new SecretRoutes().add({ url: '/invitations/:token', config: { secretParams: ['tokn'] } })).toThrow(/not all path parameters/);
  });

  it('serializes a Fastify or a raw Node request the same way, without headers', () => {
    const serialize = requestSerializer(secrets);
    const raw = { method: 'GET', url: '/invitations/cginv_abc', headers: { host: 'h', authorization: 'Bearer x' }, socket: { remoteAddress: '10.0.0.1', remotePort: 5 } };
    expect(serialize(raw as never)).toEqual({ method: 'GET', url: `/invitations/${REDACTED}`, version: undefined, host: 'h', remoteAddress: '10.0.0.1', remotePort: 5 });
  });

  describe('token-shaped values, anywhere in the URL (docs/accounts.md, "Secrets in logs")', () => {
    const token = 'cginv_7Qd2LmX9pRt4VbN8cZk1YhWs3FgJ6aE0uTqOiP5n';
    const apiKey = 'cg_AbCdEfGhIjKlMnOpQrStUvWxYz0123ab12cd';
    const uuid = '6f1c2a9e-3b7d-4c1e-9f20-8a4b5c6d7e8f';
    it.each([
      // The review's attack URLs: an encoded slash hides the token from the route patterns; any query name.
      [`/invitations%2F${token}`, `/invitations%2F${REDACTED}`],
      [`/invitations%2f${token}/accept`, `/invitations%2F${REDACTED}/accept`],
      [`/x?foo=${token}`, `/x?foo=${REDACTED}`],
      [`/x?a=1&next=%2Finvitations%2F${token}&b=2`, `/x?a=1&next=%2Finvitations%2F${REDACTED}&b=2`],
      [`/x?${token}`, `/x?${REDACTED}`],
      [`/x?${token}=1`, `/x?${REDACTED}=1`],
      // Escapes inside the token, a double-encoded one, a stray % that would stop decodeURIComponent.
      [`/x/${token.slice(0, 10)}%41${token.slice(10)}`, `/x/${REDACTED}`],
      [`/x/invitations%252F${token}`, `/x/invitations%2F${REDACTED}`],
      [`/x/${token}%`, `/x/${REDACTED}%25`],
      // Any secret this service issues, in any place; a short (truncated) one with its prefix.
      [`/anything/${apiKey}/more`, `/anything/${REDACTED}/more`],
      ['/y/cgrt_Ab3dEfGh', `/y/${REDACTED}`],
      ['/hooks?s=whsec_Ab+cD/eF=gh12', `/hooks?s=${REDACTED}`],
      // Long base64url values without a prefix (a foreign key, a JWT's parts); shorter runs stay.
      ['/cb?state=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.dBjftJeZ4CVPmB92K27uhbUJU1p1r', `/cb?state=${REDACTED}.eyJzdWIiOiIxIn0.${REDACTED}`],
      // Standard base64 (`openssl rand -base64`): its `+/=` do not cut it into pieces too short to look like a token.
      ['/x?v=Qx7+Lm2/9aZ4kP+Tr8/Wq3Nv5Bs6Hy1Ue0Io=', `/x?v=${REDACTED}`],
      ['/x?v=Qx7%2BLm2%2F9aZ4kP%2BTr8%2FWq3Nv5Bs6Hy1Ue0Io%3D&lang=en', `/x?v=${REDACTED}&lang=en`],
      ['/x?v=Qx7Lm29aZ4/kPTr8Wq3N/v5Bs6Hy1Ue0Io', `/x?v=${REDACTED}`],
      [`/x/Qx7+Lm2%2F9aZ4kP+Tr8%2FWq3Nv5Bs6Hy1Ue0Io=`, `/x/${REDACTED}`],
    ])('%s → %s', (url, logged) => {
      expect(secrets.redactUrl(url)).toBe(logged);
    });

    it.each([
      [`/organizations/${uuid}/invitations/${uuid.toUpperCase()}`],
      ['/organizations/abc/template-deployments/x/verify-domain'],
      ['/api/v1/admin/tool-actions/search_documents_by_keyword'],
      ['/organizations?limit=20&status=all&q=hello+world'],
      ['/x?from=2026-01-15T12:00:00.000Z&to=2026-01-16'],
      ['/x/short-Token-1'],
      ['/x?q=hello+world&lang=en&limit=20&next=%2Forganizations%2Fabc'],
    ])('ordinary ids and words stay readable: %s', (url) => {
      expect(secrets.redactUrl(url)).toBe(url);
    });

    it('defines the shape', () => {
      expect(isTokenShaped(`${'a'.repeat(19)}B`)).toBe(true);
      expect(isTokenShaped(`${'a'.repeat(18)}B`)).toBe(false);
      expect(isTokenShaped('abcdefghijklmnopqrstuvwxyz-words_only')).toBe(false);
      expect(isTokenShaped(uuid)).toBe(false);
      expect(isTokenShaped(`${uuid}x`)).toBe(true);
      expect(isTokenShaped('cg_tool_name')).toBe(false);
    });
  });
});
