import { DAY } from '../../clock.js';
import type { Queryable } from '../../db/client.js';
import { AppError } from '../../errors.js';

/**
 * Invitations are capped per organization per UTC day and per (organization, normalised address) per
 * UTC day (docs/accounts.md, "Account safety"). Each invitation sends a mail, so without a cap an
 * admin — or a stolen admin key — turns the service into a mail cannon (300 invitations in 3 s, 25 to
 * one address, or 25 to one mailbox under 25 `+tags`).
 */
export const INVITATIONS_PER_ORGANIZATION_PER_DAY = 100;
/** Per organization: one mailbox is not invited more often than this, whatever `+tag` is added. */
export const INVITATIONS_PER_ADDRESS_PER_DAY = 3;

/**
 * The address the per-address cap counts: lower case, `+tag` removed from the local part
 * (`Ada+x@Example.com` → `ada@example.com`). For these counts only: invitations are matched, and users
 * are unique, by the address lower-cased as given, since not every mail system treats `+` as a tag.
 */
export function capAddress(email: string): string {
  const address = email.trim().toLowerCase();
  const at = address.lastIndexOf('@');
  if (at <= 0) return address;
  const local = address.slice(0, at);
  const plus = local.indexOf('+');
  return `${plus === -1 ? local : local.slice(0, plus)}${address.slice(at)}`;
}

/** Namespace of the two-key advisory lock, so an organization's key never meets the migrator's one-key lock. */
const ORGANIZATION_LOCK = 1_231_001;

/**
 * Inside the invite's transaction, before the invitation row is written: 429 RATE_LIMITED with
 * Retry-After (seconds until the next UTC midnight) when the organization, or the normalised address
 * within it, reached its cap for the current UTC day (by `created_at` on the service clock). Every
 * invitation counts, also revoked, replaced or accepted ones: each of them was a mail.
 *
 * A transaction-scoped advisory lock per organization makes count-then-insert safe under concurrency:
 * one organization's invites run one after the other, each counting the rows the previous one
 * committed (READ COMMITTED takes a new snapshot per statement). Both caps are per organization, so
 * that one lock covers both. On PGlite (one connection) it is uncontended and costs nothing. The
 * addresses are normalised here, in one place, over the day's rows (at most the organization cap of
 * them, by invitations_org_created_idx), rather than repeated in SQL.
 */
export async function enforceInvitationCaps(tx: Queryable, organizationId: string, email: string, now: Date): Promise<void> {
  await tx.query(`SELECT pg_advisory_xact_lock(${ORGANIZATION_LOCK}, hashtext($1))`, [organizationId]);
  const dayStart = new Date(Math.floor(now.getTime() / DAY) * DAY);
  const today = await tx.query<{ email: string }>(
    'SELECT email FROM invitations WHERE organization_id = $1 AND created_at >= $2 AND created_at < $3 LIMIT $4',
    [organizationId, dayStart, new Date(dayStart.getTime() + DAY), INVITATIONS_PER_ORGANIZATION_PER_DAY],
  );
  const retryAfter = String(Math.max(1, Math.ceil((dayStart.getTime() + DAY - now.getTime()) / 1000)));
  const refuse = (what: string) =>
    new AppError('RATE_LIMITED', `${what} today (UTC), the most allowed. Retry in ${retryAfter} seconds.`, {}, { 'retry-after': retryAfter });
  if (today.length >= INVITATIONS_PER_ORGANIZATION_PER_DAY) throw refuse(`This organization sent ${INVITATIONS_PER_ORGANIZATION_PER_DAY} invitations`);
  const address = capAddress(email);
  if (today.filter((row) => capAddress(row.email) === address).length >= INVITATIONS_PER_ADDRESS_PER_DAY) {
    throw refuse(`This address (with any +tag) was invited ${INVITATIONS_PER_ADDRESS_PER_DAY} times by this organization`);
  }
}
