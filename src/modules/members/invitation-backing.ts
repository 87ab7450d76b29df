import type { Queryable } from '../../db/client.js';
import { heldBy, invitationRolesAllowed } from '../organizations/powers.js';
import type { Role } from '../organizations/rbac.js';

/**
 * An invitation acts for a member (docs/accounts.md, "Invitations act for a member"): it can be
 * accepted only while its inviter (`invited_by`, the key's maker for a key-sent one) is a member who
 * holds `members.invite` and could invite with its role now (`owner` only by an owner), and, when it
 * was sent with an API key, while that key is active (not revoked, not expired). One that the service
 * withdrew stays unbacked even if the inviter regains the power. Otherwise the token reads as unknown
 * (404), on GET and on accept alike: nobody learns whether it ever existed.
 */
export interface Backing {
  organization_id: string;
  role: Role;
  invited_by: string | null;
  api_key_id: string | null;
  withdrawn_reason: string | null;
}

/**
 * True while `invitation` is backed. With `lock` (inside the accept's transaction) the inviter's
 * membership and the key are taken FOR SHARE, so a removal, demotion or revocation committing
 * meanwhile is either waited for and seen, or waits for the accept: a removed admin's invitation
 * cannot slip through in between.
 */
export async function isBacked(q: Queryable, invitation: Backing, now: Date, lock = false): Promise<boolean> {
  if (invitation.withdrawn_reason !== null || invitation.invited_by === null) return false;
  const held = await heldBy(q, invitation.organization_id, invitation.invited_by, lock);
  if (!invitationRolesAllowed(held).includes(invitation.role)) return false;
  if (invitation.api_key_id === null) return true;
  const key = await q.query(
    `SELECT 1 FROM api_keys WHERE id = $1 AND organization_id = $2 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $3)${lock ? ' FOR SHARE' : ''}`,
    [invitation.api_key_id, invitation.organization_id, now],
  );
  return key.length > 0;
}
