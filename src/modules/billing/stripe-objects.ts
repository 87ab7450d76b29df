import type { Queryable } from '../../db/client.js';
import { isUuid } from '../../lib/ids.js';

/** What handling one Stripe event came to (billing/stripe-events.ts). */
export interface EventOutcome {
  organizationId?: string;
  /** Nothing to act on, and why (stored as the event's last_error with status `ignored`). */
  ignored?: string;
  /** Ignored because it asked for what this installation never sold (a forged or altered grant): logged at warn. */
  refused?: boolean;
  tierChanged?: boolean;
  planChanged?: boolean;
  /** Auto top-up was switched off for this organization: its balance rows lose the line after the commit (billing/auto-top-up.ts). */
  autoTopUpOff?: string;
}

/** An expandable Stripe field: the id whether it came as a string or an object. */
export function stripeId(value: string | { id: string } | null | undefined): string | null {
  if (typeof value === 'string') return value;
  return value && typeof value.id === 'string' ? value.id : null;
}

/** A whole number as Stripe sends amounts; anything else (missing, fractional, huge) as null. */
export function wholeNumber(value: unknown): number | null {
  return typeof value === 'number' && Number.isSafeInteger(value) ? value : null;
}

/** Stripe's Unix seconds as a Date; anything else as null. */
export function toDate(seconds: unknown): Date | null {
  const whole = wholeNumber(seconds);
  return whole !== null && whole >= 0 && whole < 32_503_680_000 ? new Date(whole * 1000) : null;
}

/**
 * The organization a Stripe customer belongs to: the one that stores the customer reference (set when
 * creditgate made the customer), else the organization named in the object's metadata — but only
 * when that organization has no other customer, so metadata can never move billing between tenants.
 */
export async function organizationOfCustomer(tx: Queryable, customer: string | null, metadataOrganizationId: string | null): Promise<string | null> {
  if (customer) {
    const rows = await tx.query<{ id: string }>('SELECT id FROM organizations WHERE stripe_customer_id = $1 AND deleted_at IS NULL', [customer]);
    if (rows[0]) return rows[0].id;
  }
  if (!customer || !metadataOrganizationId || !isUuid(metadataOrganizationId)) return null;
  const rows = await tx.query<{ id: string }>(
    `UPDATE organizations SET stripe_customer_id = $2 WHERE id = $1 AND deleted_at IS NULL AND (stripe_customer_id IS NULL OR stripe_customer_id = $2)
     RETURNING id`,
    [metadataOrganizationId, customer],
  );
  return rows[0]?.id ?? null;
}
