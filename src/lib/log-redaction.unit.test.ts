import { describe, expect, it } from 'vitest';
import { REDACTED, requestSerializer, SecretRoutes } from './log-redaction.js';

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

  it('refuses a secretParams name that is not a path parameter of the route (a typo would log the secret)', () => {
    expect(() => new SecretRoutes().add({ url: '/invitations/:token', config: { secretParams: ['tokn'] } })).toThrow(/not all path parameters/);
  });

  it('serializes a Fastify or a raw Node request the same way, without headers', () => {
    const serialize = requestSerializer(secrets);
    const raw = { method: 'GET', url: '/invitations/cginv_abc', headers: { host: 'h', authorization: 'Bearer x' }, socket: { remoteAddress: '10.0.0.1', remotePort: 5 } };
    expect(serialize(raw as never)).toEqual({ method: 'GET', url: `/invitations/${REDACTED}`, version: undefined, host: 'h', remoteAddress: '10.0.0.1', remotePort: 5 });
  });
});
