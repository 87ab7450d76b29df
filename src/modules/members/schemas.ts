import { Type } from 'typebox';
import { PageQuery } from '../../http/envelope.js';
import { anyOf, Nullable, StringEnum } from '../../http/schemas.js';
import type { Permission } from '../organizations/rbac.js';
import { INVITATIONS_PER_ADDRESS_PER_DAY, INVITATIONS_PER_ORGANIZATION_PER_DAY } from './invitation-caps.js';

/** Every seeded permission (migrations/0005, 0017, 0018); a test checks this list against the table. */
export const PERMISSION_NAMES = [
  'organization.read',
  'organization.update',
  'organization.delete',
  'members.read',
  'members.invite',
  'members.update',
  'members.remove',
  'api_keys.read',
  'api_keys.manage',
  'deployments.read',
  'deployments.manage',
  'billing.read',
  'billing.manage',
  'audit.read',
  'webhooks.read',
  'webhooks.manage',
  'templates.read',
  'templates.manage',
  'usage.read',
] as const satisfies readonly Permission[];

export const security = anyOf('bearerAuth', 'apiKeyHeader', 'apiKey');
export const userSecurity = [{ bearerAuth: [] }];


export const RoleSchema = StringEnum(['owner', 'admin', 'member', 'viewer'], {
  description: 'Organization role: owner, admin, member or viewer',
});
export const InviteRole = StringEnum(['admin', 'member', 'viewer'], {
  description: 'Role the invitee gets: admin, member or viewer (default member)',
});
export const ApiInviteRole = StringEnum(['owner', 'admin', 'member', 'viewer'], {
  description: 'Role the invitee gets (default member); owner only when an owner invites',
});
const Delivered = (description: string) => StringEnum(['smtp', 'outbox'], { description });

export const Email = Type.String({ format: 'email', maxLength: 320, description: 'Email address', examples: ['grace@example.com'] });
const Uuid = (description: string) => Type.String({ format: 'uuid', description });
const Timestamp = (description: string) => Type.String({ format: 'date-time', description });

export const OrgParams = Type.Object({ id: Uuid('Organization id') });
export const MemberParams = Type.Object({ id: Uuid('Organization id'), userId: Uuid('The member\'s user id') });
export const InvitationParams = Type.Object({ id: Uuid('Organization id'), invitationId: Uuid('Invitation id') });
export const ApiOrgParams = Type.Object({ org_id: Uuid('Organization id') });
export const TokenParams = Type.Object({
  token: Type.String({ minLength: 1, maxLength: 200, description: 'The invitation token (cginv_…) from the accept link' }),
});

export const InvitationListQuery = Type.Object(
  {
    ...PageQuery.properties,
    status: Type.Optional(
      StringEnum(['pending', 'all'], {
        description: 'pending (default): open invitations only; all: also accepted, expired and revoked ones',
      }),
    ),
  },
  { additionalProperties: false },
);

export const PermissionOverrides = Type.Object(
  Object.fromEntries(
    PERMISSION_NAMES.map((name) => [
      name,
      Type.Optional(Nullable(Type.Boolean({ description: `${name}: true grants, false denies, null removes the override` }))),
    ]),
  ),
  { title: 'PermissionOverrides',
    additionalProperties: false,
    description: 'Per-user overrides of the role\'s permissions: true grants, false takes away, null removes the override',
    examples: [{ 'api_keys.manage': true, 'billing.read': false }],
  },
);

export const MemberSchema = Type.Object({
  id: Uuid('Membership id'),
  organization_id: Uuid('Organization id'),
  user_id: Uuid('User id'),
  email: Type.String({ description: 'The member\'s email' }),
  full_name: Nullable(Type.String({ description: 'The member\'s name' })),
  role: Type.String({ description: 'owner, admin, member or viewer' }),
  invited_by: Nullable(Type.String({ format: 'uuid', description: 'Member whose invitation they accepted (the key\'s maker for a key-sent one); null for the creator' })),
  joined_at: Timestamp('When they joined'),
  permissions: Type.Record(Type.String(), Type.Boolean(), { description: 'Per-user permission overrides (granted true/false)' }),
}, { title: 'Member' });

export const InvitationStatus = StringEnum(['pending', 'accepted', 'expired', 'revoked'], {
  description: 'pending, accepted, expired or revoked',
});

export const InvitationSchema = Type.Object({
  id: Uuid('Invitation id'),
  organization_id: Uuid('Organization id'),
  email: Type.String({ description: 'Who is invited' }),
  role: Type.String({ description: 'Role given on acceptance' }),
  status: InvitationStatus,
  invited_by: Nullable(Type.String({ format: 'uuid', description: 'The member it acts for: the inviting user, or the maker of the API key that sent it (null only for rows older than this field)' })),
  api_key_id: Nullable(Type.String({ format: 'uuid', description: 'The API key that sent it, if any: it can be accepted only while that key is active' })),
  withdrawn_reason: Nullable(
    StringEnum(['inviter_lost_power', 'api_key_revoked', 'inviter_unknown'], {
      description: 'Why the service withdrew it (status revoked): the inviter left or can no longer invite with this role, the key was revoked, or the inviter is unknown; null otherwise',
    }),
  ),
  expires_at: Timestamp('The link stops working at this time (7 days after the invitation)'),
  accepted_at: Nullable(Timestamp('When it was accepted')),
  revoked_at: Nullable(Timestamp('When it was revoked')),
  created_at: Timestamp('When it was made'),
}, { title: 'Invitation' });

/** The invite routes' OpenAPI description: the invitation caps (numbers in invitation-caps.ts, docs/accounts.md). */
export const INVITE_CAPS_NOTE =
  `At most ${INVITATIONS_PER_ORGANIZATION_PER_DAY} invitations per organization and ${INVITATIONS_PER_ADDRESS_PER_DAY} per normalised address ` +
  '(lower case, +tag removed) per organization per UTC day; past either cap, 429 RATE_LIMITED with Retry-After ' +
  '(seconds until the next UTC midnight). An invitation can be accepted only while the member it acts for could still send it.';

export const InvitationCreatedSchema = Type.Object({
  ...InvitationSchema.properties,
  token: Type.String({ description: 'The invitation token, shown once (only its SHA-256 is stored)' }),
  accept_url: Type.String({ description: 'PUBLIC_BASE_URL/invitations/{token}: share it when no mail goes out' }),
  email_delivery: Delivered('smtp: the mail server accepted the message; outbox: kept in the local outbox (no SMTP_URL, or SMTP failed)'),
}, { title: 'InvitationCreated' });

export const PublicInvitationSchema = Type.Object({
  organization_name: Type.String({ description: 'The inviting organization' }),
  email: Type.String({ description: 'Who is invited (sign in or sign up with this address to accept)' }),
  role: Type.String({ description: 'Role given on acceptance' }),
  inviter: Nullable(
    Type.Object({ name: Nullable(Type.String()), email: Type.String() }, { description: 'The member the invitation acts for (for a key-sent one, the key\'s maker)' }),
  ),
  expires_at: Timestamp('The link stops working at this time'),
  status: InvitationStatus,
}, { title: 'PublicInvitation' });

export const InviteBody = Type.Object(
  { email: Email, role: Type.Optional(InviteRole) },
  { additionalProperties: false, examples: [{ email: 'grace@example.com', role: 'admin' }] },
);

export const ApiInviteBody = Type.Object(
  { email: Email, role: Type.Optional(ApiInviteRole) },
  { additionalProperties: false, examples: [{ email: 'grace@example.com', role: 'owner' }] },
);

export const UpdateMemberBody = Type.Object(
  { role: Type.Optional(RoleSchema), permissions: Type.Optional(PermissionOverrides) },
  { additionalProperties: false, minProperties: 1, examples: [{ role: 'admin' }, { permissions: { 'billing.manage': true } }] },
);

export const EmailTestBody = Type.Object(
  {
    to: Email,
    template: StringEnum(['welcome', 'invitation', 'test'], {
      description: 'Which message: welcome, invitation (with an example link) or test',
    }),
  },
  { additionalProperties: false, examples: [{ to: 'ops@example.com', template: 'test' }] },
);

export const EmailTestResult = Type.Object({
  to: Type.String({ description: 'Recipient' }),
  template: Type.String({ description: 'Template sent' }),
  delivered: Delivered('smtp: accepted by the SMTP server; outbox: kept in the local outbox (no SMTP_URL, or SMTP failed)'),
});
