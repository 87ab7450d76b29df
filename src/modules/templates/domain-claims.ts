import type { Queryable } from '../../db/client.js';
import { AppError } from '../../errors.js';
import type { TemplateDeploymentRow } from './deployments.js';
import { challengeOf, type DomainChallenge, newChallengeValue } from './dns-challenge.js';

/**
 * A custom domain is only claimed until verified (docs/templates.md, Custom domains): any number of
 * deployments may claim one, each with its own challenge; 409 only while another deployment holds it
 * verified. Claiming, clearing and the fields a reader sees live here.
 */
export const DOMAIN_STATUSES = ['pending_verification', 'verified', 'lapsed'] as const;
export type DomainStatus = (typeof DOMAIN_STATUSES)[number];
/** An unverified claim lapses this long after it was made (the custom-domain-lapse worker). */
export const CLAIM_TTL_MS = 7 * 24 * 60 * 60_000;

export interface ClaimColumns {
  custom_domain: string | null;
  custom_domain_status: DomainStatus | null;
  custom_domain_challenge: string | null;
  custom_domain_claimed_at: Date | null;
  custom_domain_verified_at: Date | null;
}

/** A fresh claim of `domain` (a new challenge every time), or no domain at all for null. */
export function claimOf(domain: string | null, now: Date): ClaimColumns {
  if (domain === null) {
    return { custom_domain: null, custom_domain_status: null, custom_domain_challenge: null, custom_domain_claimed_at: null, custom_domain_verified_at: null };
  }
  return { custom_domain: domain, custom_domain_status: 'pending_verification', custom_domain_challenge: newChallengeValue(), custom_domain_claimed_at: now, custom_domain_verified_at: null };
}

/** 409 while another deployment (of any organization) holds `domain` verified; claims by others do not count. */
export async function assertDomainClaimable(tx: Queryable, domain: string, ownId: string | null): Promise<void> {
  const rows = await tx.query<{ id: string }>(
    `SELECT id FROM template_deployments WHERE custom_domain = $1 AND custom_domain_status = 'verified' AND ($2::uuid IS NULL OR id <> $2::uuid) LIMIT 1`,
    [domain, ownId],
  );
  if (rows[0]) throw domainTaken(domain);
}

export const domainTaken = (domain: string | null | undefined) =>
  new AppError('CONFLICT', `The custom domain "${domain}" is verified by another template deployment`);

/** Write a claim (or its removal) onto one deployment of the organization, in the caller's transaction. */
export async function writeClaim(tx: Queryable, organizationId: string, id: string, claim: ClaimColumns, now: Date): Promise<TemplateDeploymentRow> {
  const rows = await tx.query<TemplateDeploymentRow>(
    `UPDATE template_deployments SET custom_domain = $3, custom_domain_status = $4, custom_domain_challenge = $5, custom_domain_claimed_at = $6,
       custom_domain_verified_at = $7, updated_at = $8
     WHERE id = $1 AND organization_id = $2 RETURNING *`,
    [id, organizationId, claim.custom_domain, claim.custom_domain_status, claim.custom_domain_challenge, claim.custom_domain_claimed_at, claim.custom_domain_verified_at, now],
  );
  return rows[0]!;
}

/** The challenge a reader is shown: while a domain is set (pending or verified), else null. */
export function challengeView(row: Pick<ClaimColumns, 'custom_domain' | 'custom_domain_challenge'>): DomainChallenge | null {
  return row.custom_domain && row.custom_domain_challenge ? challengeOf(row.custom_domain, row.custom_domain_challenge) : null;
}

/** What the provisioner is given: the domain only once verified. */
export const provisionedDomain = (row: Pick<ClaimColumns, 'custom_domain' | 'custom_domain_status'>): string | null =>
  row.custom_domain_status === 'verified' ? row.custom_domain : null;
