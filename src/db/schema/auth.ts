import { sql } from 'drizzle-orm';
import { boolean, index, integer, pgTable, primaryKey, text, timestamp, uniqueIndex, uuid } from 'drizzle-orm/pg-core';
import { apiKeys, organizations, users } from './accounts.js';

/** A signed-in session: access tokens carry its id, so ending it stops them at once. */
export const sessions = pgTable(
  'sessions',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    userId: uuid('user_id')
      .notNull()
      .references(() => users.id),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull(),
    revokedAt: timestamp('revoked_at', { withTimezone: true }),
    revokedReason: text('revoked_reason'),
    ipAddress: text('ip_address'),
    userAgent: text('user_agent'),
  },
  (t) => [index('sessions_user_idx').on(t.userId)],
);

/**
 * Opaque refresh tokens (SHA-256 only), one family per session. Rotation marks a token used by one
 * conditional UPDATE; its child is the only live token (RFC 9700 reuse detection).
 */
export const refreshTokens = pgTable(
  'refresh_tokens',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    sessionId: uuid('session_id')
      .notNull()
      .references(() => sessions.id),
    tokenHash: text('token_hash').notNull(),
    parentId: uuid('parent_id'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull(),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
    usedAt: timestamp('used_at', { withTimezone: true }),
  },
  (t) => [uniqueIndex('refresh_tokens_hash_key').on(t.tokenHash), index('refresh_tokens_session_idx').on(t.sessionId)],
);

export const roles = pgTable('roles', {
  id: uuid('id').primaryKey().defaultRandom(),
  name: text('name').notNull().unique(),
  description: text('description'),
  isSystem: boolean('is_system').notNull().default(false),
});

export const permissions = pgTable('permissions', {
  id: uuid('id').primaryKey().defaultRandom(),
  name: text('name').notNull().unique(),
  resource: text('resource').notNull(),
  action: text('action').notNull(),
  description: text('description'),
});

export const rolePermissions = pgTable(
  'role_permissions',
  {
    roleId: uuid('role_id')
      .notNull()
      .references(() => roles.id),
    permissionId: uuid('permission_id')
      .notNull()
      .references(() => permissions.id),
  },
  (t) => [primaryKey({ columns: [t.roleId, t.permissionId] })],
);

/** A per-user, per-organization permission override (docs/accounts.md, Roles and permissions), `granted` true (add) or false (take away). */
export const userPermissions = pgTable(
  'user_permissions',
  {
    organizationId: uuid('organization_id')
      .notNull()
      .references(() => organizations.id),
    userId: uuid('user_id')
      .notNull()
      .references(() => users.id),
    permissionId: uuid('permission_id')
      .notNull()
      .references(() => permissions.id),
    granted: boolean('granted').notNull().default(true),
  },
  (t) => [primaryKey({ columns: [t.organizationId, t.userId, t.permissionId] })],
);

export const invitations = pgTable(
  'invitations',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    organizationId: uuid('organization_id')
      .notNull()
      .references(() => organizations.id),
    email: text('email').notNull(),
    role: text('role').notNull().default('member'),
    /** The member the invitation acts for (the key's maker when an API key sent it); see docs/accounts.md. */
    invitedBy: uuid('invited_by').references(() => users.id),
    /** The API key that sent it, if any: the invitation is acceptable only while that key is active. */
    apiKeyId: uuid('api_key_id').references(() => apiKeys.id),
    /** Why the service withdrew it (inviter_lost_power, api_key_revoked, inviter_unknown); null when a person revoked it. */
    withdrawnReason: text('withdrawn_reason'),
    tokenHash: text('token_hash').notNull(),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
    acceptedAt: timestamp('accepted_at', { withTimezone: true }),
    revokedAt: timestamp('revoked_at', { withTimezone: true }),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull(),
  },
  (t) => [
    uniqueIndex('invitations_token_hash_key').on(t.tokenHash),
    index('invitations_org_idx').on(t.organizationId),
    // The invitation caps (docs/accounts.md, Account safety) count one organization's and one address's invitations of the last day.
    index('invitations_org_created_idx').on(t.organizationId, t.createdAt),
    index('invitations_email_created_idx').on(sql`lower(${t.email})`, t.createdAt),
    // Taking back what a member lost (powers.ts) finds their open invitations and those of a revoked key.
    index('invitations_api_key_idx').on(t.apiKeyId).where(sql`${t.apiKeyId} IS NOT NULL`),
    index('invitations_inviter_idx').on(t.organizationId, t.invitedBy).where(sql`${t.acceptedAt} IS NULL AND ${t.revokedAt} IS NULL`),
    // One open invitation per address and organization, even under concurrent invites.
    uniqueIndex('invitations_open_email_key')
      .on(t.organizationId, sql`lower(${t.email})`)
      .where(sql`${t.acceptedAt} IS NULL AND ${t.revokedAt} IS NULL`),
  ],
);

/** Mail that could not be sent by SMTP (SMTP_URL unset): kept here, readable by operators and tests. */
export const emailOutbox = pgTable('email_outbox', {
  id: uuid('id').primaryKey().defaultRandom(),
  organizationId: uuid('organization_id'),
  to: text('to').notNull(),
  subject: text('subject').notNull(),
  body: text('body').notNull(),
  /** The body holds a secret (an invitation or verification link): stored encrypted until sent (docs/accounts.md, Account safety). */
  bodyEncrypted: boolean('body_encrypted').notNull().default(false),
  template: text('template').notNull(),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull(),
  sentAt: timestamp('sent_at', { withTimezone: true }),
  /** SMTP tries so far; the `mail-retry` worker gives up after MAIL_MAX_ATTEMPTS. */
  attempts: integer('attempts').notNull().default(0),
  /** When the next try may run (also a claim: a worker moves it forward before sending). */
  nextAttemptAt: timestamp('next_attempt_at', { withTimezone: true }),
  lastError: text('last_error'),
});

/**
 * Email verification links (docs/accounts.md, Email verification): the token is mailed, stored only as its SHA-256, for the address
 * it was sent to (a changed address needs a new link), used once.
 */
export const emailVerifications = pgTable(
  'email_verifications',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    userId: uuid('user_id')
      .notNull()
      .references(() => users.id),
    email: text('email').notNull(),
    tokenHash: text('token_hash').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull(),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
    usedAt: timestamp('used_at', { withTimezone: true }),
  },
  (t) => [uniqueIndex('email_verifications_token_hash_key').on(t.tokenHash), index('email_verifications_user_idx').on(t.userId, t.createdAt)],
);
