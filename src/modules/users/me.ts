import type { Ctx } from '../../context.js';
import { AppError } from '../../errors.js';
import { getProfile, profileOf, type UserProfile } from '../auth/service.js';
import { authorize } from '../organizations/rbac.js';

export interface MembershipView {
  id: string;
  name: string;
  slug: string;
  tier: string;
  role: string;
  joined_at: string;
}

export interface ApiKeyCallerView {
  api_key: { id: string; organization_id: string; name: string; key_prefix: string; scopes: string[]; expires_at: string | null; created_at: string };
  user: UserProfile | null;
}

/**
 * GET /api/users/me (docs/decisions-keys-billing.md). A user: its profile (as /auth/me) and its
 * organizations with roles. An API key (scope read): the key itself and the user who created it,
 * only while that user is still a member of the key's organization (else null: the key does not
 * speak for someone who left).
 */
export async function describeCaller(ctx: Ctx): Promise<(UserProfile & { organizations: MembershipView[] }) | ApiKeyCallerView> {
  if (ctx.actor.type === 'user') {
    const profile = await getProfile(ctx, ctx.actor.userId);
    const rows = await ctx.db.query<Omit<MembershipView, 'joined_at'> & { joined_at: Date }>(
      `SELECT o.id, o.name, o.slug, o.plan AS tier, m.role, m.joined_at
       FROM organization_members m JOIN organizations o ON o.id = m.organization_id AND o.deleted_at IS NULL
       WHERE m.user_id = $1 ORDER BY m.joined_at, o.id`,
      [ctx.actor.userId],
    );
    return { ...profile, organizations: rows.map((r) => ({ ...r, joined_at: r.joined_at.toISOString() })) };
  }
  if (ctx.actor.type !== 'api_key') throw new AppError('FORBIDDEN', 'Only a user or an organization API key has a "me"');
  await authorize(ctx, ctx.actor.organizationId, 'organization.read');
  const rows = await ctx.db.query<{
    id: string;
    organization_id: string;
    name: string;
    key_prefix: string;
    scopes: string[];
    expires_at: Date | null;
    created_at: Date;
    u_id: string | null;
    email: string;
    email_verified_at: Date | null;
    full_name: string | null;
    avatar_url: string | null;
    bio: string | null;
    default_organization_id: string | null;
    u_created_at: Date;
    u_updated_at: Date;
  }>(
    `SELECT k.id, k.organization_id, k.name, k.key_prefix, k.scopes, k.expires_at, k.created_at,
            u.id AS u_id, u.email, u.email_verified_at, u.full_name, u.avatar_url, u.bio, u.default_organization_id,
            u.created_at AS u_created_at, u.updated_at AS u_updated_at
     FROM api_keys k
     LEFT JOIN organization_members m ON m.organization_id = k.organization_id AND m.user_id = k.created_by
     LEFT JOIN users u ON u.id = m.user_id
     WHERE k.id = $1`,
    [ctx.actor.apiKeyId],
  );
  const k = rows[0];
  if (!k) throw new AppError('UNAUTHORIZED', 'Missing or invalid API key');
  return {
    api_key: {
      id: k.id,
      organization_id: k.organization_id,
      name: k.name,
      key_prefix: k.key_prefix,
      scopes: k.scopes,
      expires_at: k.expires_at?.toISOString() ?? null,
      created_at: k.created_at.toISOString(),
    },
    user: k.u_id
      ? profileOf({
          id: k.u_id,
          email: k.email,
          email_verified_at: k.email_verified_at,
          full_name: k.full_name,
          avatar_url: k.avatar_url,
          bio: k.bio,
          // The creator's other organizations are none of this key's business.
          default_organization_id: k.default_organization_id === k.organization_id ? k.default_organization_id : null,
          created_at: k.u_created_at,
          updated_at: k.u_updated_at,
        })
      : null,
  };
}
