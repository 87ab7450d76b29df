import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { ctxOf } from '../../http/auth.js';
import { Envelope, envelopeErrors, ok } from '../../http/envelope.js';
import { anyOf, Nullable } from '../../http/schemas.js';
import { Profile } from '../auth/routes.js';
import { describeCaller } from '../users/me.js';

const Uuid = (description: string) => Type.String({ format: 'uuid', description, examples: ['6f1c3d2e-5b7a-4c1d-9e2f-0a1b2c3d4e5f'] });
const Timestamp = (description: string) => Type.String({ format: 'date-time', description, examples: ['2026-01-15T12:00:00.000Z'] });

const UserMe = Type.Object(
  {
    ...Profile.properties,
    organizations: Type.Array(
      Type.Object({
        id: Uuid('Organization id'),
        name: Type.String({ description: 'Organization name', examples: ['Acme'] }),
        slug: Type.String({ description: 'Organization slug', examples: ['acme'] }),
        tier: Type.String({ description: 'Organization plan: free, pro or enterprise', examples: ['free'] }),
        role: Type.String({ description: "The user's role: owner, admin, member or viewer", examples: ['owner'] }),
        joined_at: Timestamp('When the user joined'),
      }),
      { description: "The user's organizations with its role in each" },
    ),
  },
  { description: 'Called with a user access token: the profile (as GET /auth/me) and its organizations' },
);

const ApiKeyMe = Type.Object(
  {
    api_key: Type.Object({
      id: Uuid('API key id'),
      organization_id: Uuid('The organization the key acts for'),
      name: Type.String({ description: 'Key name', examples: ['CI deploys'] }),
      key_prefix: Type.String({ description: 'First 10 characters of the key', examples: ['cg_4fT9aQ2'] }),
      scopes: Type.Array(Type.String({ examples: ['read'] }), { description: 'read, write, admin' }),
      expires_at: Nullable(Timestamp('Expiry; null = never')),
      created_at: Timestamp('Creation time'),
    }),
    user: Nullable(Type.Object(Profile.properties, { description: 'The user who created the key, while still a member; else null' })),
  },
  { description: 'Called with an API key (scope read): the key and its creator' },
);

/**
 * GET /api/users/me (self-hosted; docs/decisions-keys-billing.md). Exported on its own so the self-hosted plugin registers it
 * next to /api/email/test: `await usersMeRoute(app)` inside selfHostedRoutes.
 */
export async function usersMeRoute(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  app.get(
    '/api/users/me',
    {
      config: { auth: 'account' },
      schema: {
        tags: ['Self-hosted'],
        security: anyOf('apiKeyHeader', 'bearerAuth', 'apiKey'),
        operationId: 'getCurrentPrincipal',
        summary: 'The caller: a user with its organizations, or an API key with its creator',
        response: { 200: Envelope(Type.Union([UserMe, ApiKeyMe])), ...envelopeErrors(401, 403) },
      },
    },
    async (request) => ok(await describeCaller(ctxOf(request))),
  );
}
