import { describe, expect, it } from 'vitest';
import { limitClassOf } from './rate-limit.js';
import { isApiPath, isIntegrationApi, isOperatorApi, usesFlatShape } from './route-prefixes.js';

describe('route prefixes', () => {
  it('the integration API is /api/v1/…, the operator API a part of it', () => {
    expect(isIntegrationApi('/api/v1/mcp/check-entitlement')).toBe(true);
    expect(isIntegrationApi('/api/v1/admin/deployments/:id')).toBe(true);
    expect(isIntegrationApi('/api/v1')).toBe(false);
    expect(isIntegrationApi('/api/v10/x')).toBe(false);
    expect(isIntegrationApi('/api/organizations')).toBe(false);
    expect(isOperatorApi('/api/v1/admin/deployments/:id')).toBe(true);
    expect(isOperatorApi('/api/v1/admin')).toBe(true);
    expect(isOperatorApi('/api/v1/administrators')).toBe(false);
    expect(isOperatorApi('/api/v1/mcp/usage')).toBe(false);
  });

  it('the API is /api and the application roots, whole segments only', () => {
    for (const path of ['/api/users/me', '/api/v1/ai/models', '/auth/login', '/organizations', '/organizations/:id/usage/records', '/invitations/:token', '/billing/catalog', '/templates', '/users/x']) {
      expect(isApiPath(path), path).toBe(true);
    }
    for (const path of ['/', '/healthz', '/metrics', '/openapi.json', '/docs', '/console/', '/console/session', '/webhooks/stripe', '/apis', '/organizationsx']) {
      expect(isApiPath(path), path).toBe(false);
    }
  });

  it('the flat error shape on /api/v1, its paths and the billing webhooks; the envelope elsewhere', () => {
    for (const url of ['/api/v1', '/api/v1/mcp/usage?x=1', '/api/v1/admin/templates', '/api/v1/nowhere', '/webhooks/stripe']) expect(usesFlatShape(url), url).toBe(true);
    for (const url of ['/api/organizations', '/auth/login', '/console/session', '/nowhere']) expect(usesFlatShape(url), url).toBe(false);
  });

  it('the rate limit of a route follows from its prefix (docs/limits.md, Rate limits)', () => {
    expect(limitClassOf('/api/v1/mcp/usage')).toBe('tier');
    expect(limitClassOf('/api/v1/admin/deployments')).toBe('none');
    expect(limitClassOf('/api/organizations')).toBe('plan');
    expect(limitClassOf('/organizations/:id')).toBe('plan');
    expect(limitClassOf('/auth/login')).toBe('plan');
    expect(limitClassOf('/healthz')).toBe('none');
    expect(limitClassOf('/webhooks/stripe')).toBe('none');
    expect(limitClassOf('/console/session')).toBe('none');
  });
});
