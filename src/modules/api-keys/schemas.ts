import { Type } from 'typebox';
import { Nullable, StringEnum } from '../../http/schemas.js';

const Uuid = (description: string) => Type.String({ format: 'uuid', description, examples: ['6f1c3d2e-5b7a-4c1d-9e2f-0a1b2c3d4e5f'] });
const Timestamp = (description: string) =>
  Type.String({ format: 'date-time', description, examples: ['2026-01-15T12:00:00.000Z'] });

export const ScopeSchema = StringEnum(['read', 'write', 'admin'], {
  description: 'read: GET routes; write: other methods; admin: member, key, billing, webhook management and the audit log',
});

export const OrganizationParams = Type.Object({ id: Uuid('Organization id') });
export const ApiKeyParams = Type.Object({ id: Uuid('Organization id'), keyId: Uuid('API key id') });

export const ApiKeySchema = Type.Object({
  id: Uuid('API key id'),
  organization_id: Uuid('The organization the key belongs to'),
  name: Type.String({ description: 'Name given at creation', examples: ['CI deploys'] }),
  key_prefix: Type.String({ description: 'First 10 characters of the key, to recognise it', examples: ['cg_4fT9aQ2'] }),
  scopes: Type.Array(ScopeSchema, { description: 'What the key may do', examples: [['read', 'write']] }),
  last_used_at: Nullable(Timestamp('Last use (updated at most once a minute); null if never used')),
  expires_at: Nullable(Timestamp('When the key stops working; null = never')),
  created_by: Nullable(Uuid('The user who created it; null when an API key or the operator did')),
  created_at: Timestamp('Creation time'),
  revoked_at: Nullable(Timestamp('When the key was revoked; null while active')),
}, { title: 'ApiKey' });

export const CreatedApiKeySchema = Type.Object({
  ...ApiKeySchema.properties,
  key: Type.String({
    description: 'The full key, shown once: store it now, it cannot be read again',
    examples: ['cg_4fT9aQ2xLm8Rk1Vb7Nc3Pd6Hs0Jw5Ye2Zq4Tu9'],
  }),
}, { title: 'CreatedApiKey' });

export const CreateApiKeyBody = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 200, description: 'A name to recognise the key by', examples: ['CI deploys'] }),
    scopes: Type.Optional(
      Type.Array(ScopeSchema, {
        minItems: 1,
        maxItems: 3,
        uniqueItems: true,
        description: 'Default ["read"]. An API key caller may only grant scopes it has itself',
        examples: [['read', 'write']],
      }),
    ),
    expires_at: Type.Optional(Nullable(Timestamp('Optional expiry, in the future; null or absent = never'))),
  },
  { additionalProperties: false },
);
