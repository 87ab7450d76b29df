import { DAY } from '../../clock.js';
import type { Queryable } from '../../db/client.js';
import { AppError } from '../../errors.js';

/**
 * SPEC §8: invitations are capped per organization per day and per address (docs/accounts.md,
 * "Account safety"). Each invitation sends a mail, so without a cap an admin — or a stolen admin key —
 * turns the service into a mail cannon (300 invitations in 3 s, 25 to one address).
 */
export const INVITATIONS_PER_ORGANIZATION_PER_DAY = 50;
/** Across all organizations: one address is not mailed more than this, whoever invites it. */
export const INVITATIONS_PER_ADDRESS_PER_DAY = 3;

/**
 * Namespaces of the two-key advisory locks, so an organization's key never meets an address's
 * (and neither meets the migrator's one-key lock).
 */
const ORGANIZATION_LOCK = 1_231_001;
const ADDRESS_LOCK = 1_231_002;

/**
 * Inside the invite's transaction, before the invitation row is written: 429 RATE_LIMITED with
 * Retry-After when the organization or the address reached its cap in the last 24 hours (rolling, by
 * `created_at` on the service clock; every invitation counts, also revoked, replaced or accepted ones,
 * because each of them was a mail).
 *
 * Two transaction-scoped advisory locks make count-then-insert safe under concurrency: invites of one
 * organization, and invites to one address, run one after the other, and each counts the rows the
 * previous one committed (READ COMMITTED takes a new snapshot per statement). The order is always
 * organization, then address, so two invites cannot wait on each other. On PGlite (one connection,
 * one transaction at a time) the locks are uncontended and cost nothing.
 */
export async function enforceInvitationCaps(tx: Queryable, organizationId: string, email: string, now: Date): Promise<void> {
  await tx.query(`SELECT pg_advisory_xact_lock(${ORGANIZATION_LOCK}, hashtext($1))`, [organizationId]);
  await tx.query(`SELECT pg_advisory_xact_lock(${ADDRESS_LOCK}, hashtext(lower($1)))`, [email]);
  const since = new Date(now.getTime() - DAY);
  // The newest `cap` invitations of the window: when there are that many, the oldest of them must leave
  // the window before one more fits (invitations_org_created_idx / invitations_email_created_idx).
  const byOrganization = await tx.query<{ created_at: Date }>(
    'SELECT created_at FROM invitations WHERE organization_id = $1 AND created_at > $2 ORDER BY created_at DESC LIMIT $3',
    [organizationId, since, INVITATIONS_PER_ORGANIZATION_PER_DAY],
  );
  refuseAtCap(byOrganization, INVITATIONS_PER_ORGANIZATION_PER_DAY, now, `This organization sent ${INVITATIONS_PER_ORGANIZATION_PER_DAY} invitations`);
  const byAddress = await tx.query<{ created_at: Date }>(
    'SELECT created_at FROM invitations WHERE lower(email) = lower($1) AND created_at > $2 ORDER BY created_at DESC LIMIT $3',
    [email, since, INVITATIONS_PER_ADDRESS_PER_DAY],
  );
  refuseAtCap(byAddress, INVITATIONS_PER_ADDRESS_PER_DAY, now, `This address was invited ${INVITATIONS_PER_ADDRESS_PER_DAY} times`);
}

function refuseAtCap(newest: Array<{ created_at: Date }>, cap: number, now: Date, what: string): void {
  const leaving = newest[cap - 1];
  if (!leaving) return;
  // The window holds rows with created_at > now - 24 h: this one leaves it at created_at + 24 h exactly.
  const seconds = Math.max(1, Math.ceil((leaving.created_at.getTime() + DAY - now.getTime()) / 1000));
  throw new AppError(
    'RATE_LIMITED',
    `${what} in the last 24 hours, the most allowed. Retry in ${seconds} seconds.`,
    {},
    { 'retry-after': String(seconds) },
  );
}
