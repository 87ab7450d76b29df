/** A user as the API shows it (GET /auth/me, the `user` of a token pair, /api/users/me). */
export interface UserProfile {
  id: string;
  email: string;
  /** Proven by the mailed link (docs/accounts.md, Email verification); only a verified user accepts invitations. */
  email_verified: boolean;
  full_name: string | null;
  avatar_url: string | null;
  bio: string | null;
  default_organization_id: string | null;
  created_at: string;
  updated_at: string;
}

export interface UserRow {
  id: string;
  email: string;
  email_verified_at: Date | null;
  full_name: string | null;
  avatar_url: string | null;
  bio: string | null;
  default_organization_id: string | null;
  password_hash: string | null;
  created_at: Date;
  updated_at: Date;
}

export const USER_COLUMNS = 'id, email, email_verified_at, full_name, avatar_url, bio, default_organization_id, created_at, updated_at';

export function profileOf(u: Omit<UserRow, 'password_hash'>): UserProfile {
  return {
    id: u.id,
    email: u.email,
    email_verified: u.email_verified_at !== null,
    full_name: u.full_name,
    avatar_url: u.avatar_url,
    bio: u.bio,
    default_organization_id: u.default_organization_id,
    created_at: u.created_at.toISOString(),
    updated_at: u.updated_at.toISOString(),
  };
}
