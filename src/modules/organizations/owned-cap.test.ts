import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createHarness, type Harness, json, signUpWithOrganization, unique } from '../../../test/harness.js';
import { createOrganization, MAX_OWNED_ORGANIZATIONS } from './service.js';

/**
 * A user owns at most MAX_OWNED_ORGANIZATIONS organizations they create (docs/accounts.md,
 * Organizations): each is a deployment and a balance row for one sign-up. The operator creates past it.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

const create = (accessToken: string) => {
  const slug = unique('cap').toLowerCase().replace(/[^a-z0-9-]/g, '-').slice(0, 60);
  return h.request({ method: 'POST', url: '/organizations', headers: bearer(accessToken), payload: { name: 'Cap', slug } });
};

describe('organizations a user owns', () => {
  it(`at most ${MAX_OWNED_ORGANIZATIONS}, also when created at once; a deleted one frees its place`, async () => {
    const o = await signUpWithOrganization(h);
    // The user owns one; more are made directly, as the API would, up to two short of the cap.
    for (let i = 1; i < MAX_OWNED_ORGANIZATIONS - 2; i++) {
      await createOrganization(h.ctx, { name: `Org ${i}`, slug: unique('own').toLowerCase().replace(/[^a-z0-9-]/g, '-').slice(0, 60), ownerUserId: o.userId });
    }
    const burst = await Promise.all([create(o.accessToken), create(o.accessToken), create(o.accessToken), create(o.accessToken)]);
    expect(burst.map((r) => r.statusCode).sort()).toEqual([201, 201, 409, 409]);
    const refused = burst.find((r) => r.statusCode === 409)!;
    expect(json<{ error: { code: string } }>(refused).error.code).toBe('CONFLICT');
    const deleted = await h.request({ method: 'DELETE', url: `/organizations/${o.organizationId}`, headers: bearer(o.accessToken) });
    expect(deleted.statusCode, deleted.body).toBe(200);
    expect((await create(o.accessToken)).statusCode).toBe(201);
    expect((await create(o.accessToken)).statusCode).toBe(409);
  });
});
