import Fastify from 'fastify';
import { Type } from 'typebox';
import { describe, expect, it } from 'vitest';
import { Nullable } from './schemas.js';
import { registerUuidCase } from './uuid-case.js';

/** UUIDs compare in lower case: the hook lower-cases what a route's schema calls a UUID (docs/input.md, UUID ids). */
describe('registerUuidCase', () => {
  const ID = '6F1C3D2E-5B7A-4C1D-9E2F-0A1B2C3D4E5F';
  const Uuid = Type.String({ format: 'uuid' });

  it('lower-cases the UUID fields of path, query, headers and body, and leaves every other string as sent', async () => {
    const app = Fastify();
    registerUuidCase(app);
    let seen: unknown;
    app.post(
      '/things/:id',
      {
        schema: {
          params: Type.Object({ id: Uuid }),
          querystring: Type.Object({ deployment_id: Type.Optional(Uuid), mcp_user_id: Type.Optional(Type.String()) }),
          headers: Type.Object({ 'x-organization-id': Type.Optional(Uuid) }),
          body: Type.Object({ owner: Nullable(Uuid), ids: Type.Array(Uuid), name: Type.String() }),
        },
      },
      async (request) => {
        seen = { params: request.params, query: request.query, header: request.headers['x-organization-id'], body: request.body };
        return {};
      },
    );
    const res = await app.inject({
      method: 'POST',
      url: `/things/${ID}?deployment_id=${ID}&mcp_user_id=${ID}`,
      headers: { 'x-organization-id': ID },
      payload: { owner: ID, ids: [ID], name: ID },
    });
    await app.close();
    expect(res.statusCode, res.body).toBe(200);
    const lower = ID.toLowerCase();
    expect(seen).toEqual({
      params: { id: lower },
      query: { deployment_id: lower, mcp_user_id: ID },
      header: lower,
      body: { owner: lower, ids: [lower], name: ID },
    });
  });
});
