import { Type } from 'typebox';
import { Nullable, StoredUrl, StringEnum } from '../../http/schemas.js';
import { SLUG_RE } from '../organizations/service.js';
import { STATUSES } from './deployments.js';
import { DOMAIN_STATUSES } from './domain-claims.js';

/** TypeBox schemas of templates and template deployments (docs/templates.md), shared by the operator and the application routes. */
const Uuid = (description: string) => Type.String({ format: 'uuid', description });
const Timestamp = (description: string) => Type.String({ format: 'date-time', description });

export const Slug = (description: string) =>
  Type.String({ pattern: SLUG_RE.source, maxLength: 63, description: `${description}: a-z, 0-9 and inner hyphens, 1 to 63 characters`, examples: ['acme-blog'] });

export const Config = (description: string) =>
  Type.Record(Type.String(), Type.Unknown(), { description: `${description} (a JSON object, at most 64 KiB serialized)`, examples: [{ plan: 'starter' }] });

const Name = Type.String({ minLength: 1, maxLength: 200, description: 'Display name', examples: ['Blog starter'] });
const Text = (description: string, maxLength: number) => Nullable(Type.String({ maxLength, description }));

export const TemplateSchema = Type.Object(
  {
    id: Uuid('Template id'),
    name: Type.String({ description: 'Display name' }),
    slug: Type.String({ description: 'Unique slug' }),
    description: Nullable(Type.String({ description: 'What the template sets up' })),
    category: Nullable(Type.String({ description: 'Grouping for a catalogue page' })),
    icon_url: Nullable(Type.String({ description: 'http(s) URL of an icon' })),
    config: Type.Record(Type.String(), Type.Unknown(), { description: 'The template configuration handed to the provisioner' }),
    is_active: Type.Boolean({ description: 'Listed at GET /templates and deployable' }),
    created_at: Timestamp('When the template was created'),
    updated_at: Timestamp('When the template last changed'),
  },
  { title: 'Template' },
);

const templateFields = {
  description: Type.Optional(Text('What the template sets up', 2000)),
  category: Type.Optional(Text('Grouping for a catalogue page', 100)),
  icon_url: Type.Optional(Nullable(StoredUrl('Icon'))),
  config: Type.Optional(Config('The template configuration handed to the provisioner')),
  is_active: Type.Optional(Type.Boolean({ description: 'Listed and deployable (default true)' })),
};

export const CreateTemplateBody = Type.Object(
  { name: Name, slug: Slug('Unique slug'), ...templateFields },
  { additionalProperties: false },
);

export const UpdateTemplateBody = Type.Object(
  { name: Type.Optional(Name), slug: Type.Optional(Slug('Unique slug')), ...templateFields },
  { additionalProperties: false, minProperties: 1 },
);

export const TemplateDeploymentSchema = Type.Object(
  {
    id: Uuid('Template deployment id'),
    organization_id: Uuid('Organization id'),
    template_id: Uuid('Template id'),
    name: Type.String({ description: 'Display name' }),
    subdomain: Type.String({ description: 'Unique across the installation' }),
    custom_domain: Nullable(
      Type.String({ description: 'The claimed host name, lower-case ASCII (punycode); exclusive once verified', examples: ['blog.example.com'] }),
    ),
    custom_domain_status: Nullable(
      StringEnum(DOMAIN_STATUSES, {
        description:
          'pending_verification (claimed: publish the challenge, then POST …/verify-domain), verified, or lapsed (the claim ended unverified: ' +
          'after 7 days, or another deployment verified the domain; custom_domain is then null). null: no domain ever claimed or removed',
      }),
    ),
    custom_domain_challenge: Nullable(
      Type.Object(
        {
          type: Type.Literal('TXT', { description: 'The DNS record type to publish' }),
          name: Type.String({ description: 'The record name', examples: ['_creditgate-challenge.blog.example.com'] }),
          value: Type.String({ description: 'The record value, new for every claim', examples: ['creditgate-verify=3kTq8ZrV0bWmX1yC5nD7fH2jL4pS6uA9'] }),
        },
        { description: 'The TXT record that proves control of custom_domain (null without a domain)' },
      ),
    ),
    custom_domain_verified_at: Nullable(Timestamp('When custom_domain was verified')),
    config: Type.Record(Type.String(), Type.Unknown(), { description: 'The deployment configuration handed to the provisioner' }),
    status: StringEnum(STATUSES, { description: 'pending → deploying → active, or failed after 5 attempts (retry: failed → deploying)' }),
    deployment_url: Nullable(Type.String({ description: 'Where it runs, once active' })),
    last_error: Nullable(Type.String({ description: 'The last provisioning error' })),
    attempts: Type.Integer({ description: 'Provisioning attempts since creation or the last retry' }),
    next_attempt_at: Nullable(Timestamp('When the worker tries next (pending or deploying)')),
    created_at: Timestamp('When it was created'),
    updated_at: Timestamp('When it last changed'),
  },
  { title: 'TemplateDeployment' },
);

const CustomDomain = Type.String({
  minLength: 1,
  maxLength: 253,
  description:
    'A host name such as app.example.com (international names are stored as punycode); a new value starts a new claim with a new challenge. ' +
    'Needs the custom_domain flag of the primary deployment',
  examples: ['blog.example.com'],
});
const DeploymentConfig = Config('The deployment configuration handed to the provisioner');

export const CreateTemplateDeploymentBody = Type.Object(
  {
    template_id: Uuid('An active template (GET /templates)'),
    name: Name,
    subdomain: Slug('Unique across the installation'),
    custom_domain: Type.Optional(Nullable(CustomDomain)),
    config: Type.Optional(DeploymentConfig),
  },
  { additionalProperties: false },
);

export const UpdateTemplateDeploymentBody = Type.Object(
  {
    name: Type.Optional(Name),
    custom_domain: Type.Optional(Nullable(CustomDomain)),
    config: Type.Optional(DeploymentConfig),
  },
  { additionalProperties: false, minProperties: 1 },
);

export const VerifyDomainResult = Type.Object(
  {
    verified: Type.Boolean({ description: 'The challenge record was found (or the domain was already verified)' }),
    reason: Type.Optional(
      StringEnum(['record_not_found', 'dns_timeout', 'dns_error'], {
        description: 'Why not: no TXT record with the challenge value, no DNS answer within 5 s, or a DNS failure (SERVFAIL, refused)',
      }),
    ),
  },
  { title: 'DomainVerification' },
);

export const TemplateIdParams = Type.Object({ id: Uuid('Template id') });
export const OrgParams = Type.Object({ id: Uuid('Organization id') });
export const TemplateDeploymentParams = Type.Object({ id: Uuid('Organization id'), tdId: Uuid('Template deployment id') });
