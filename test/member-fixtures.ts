import { bearer, type Harness, joinByInvitation, signUpWithOrganization } from './harness.js';

type Headers = Record<string, string>;

/** What the membership tests share (src/modules/members/*.test.ts): a member's change, and an owner with one member of a role. */
export function memberFixtures(harness: () => Harness) {
  /** PUT /organizations/{id}/users/{userId}: role and permission overrides. */
  const setMember = (headers: Headers, orgId: string, userId: string, payload: Record<string, unknown>) =>
    harness().request({ method: 'PUT', url: `/organizations/${orgId}/users/${userId}`, headers, payload });

  /** A new organization, its owner (`ob` their headers) and one member of `role` who joined by invitation (`ub`). */
  async function orgWith(role: 'admin' | 'member' | 'viewer') {
    const h = harness();
    const owner = await signUpWithOrganization(h);
    const ob = bearer(owner.accessToken);
    const user = await joinByInvitation(h, ob, owner.organizationId, role);
    return { owner, ob, user, ub: bearer(user.accessToken), orgId: owner.organizationId };
  }

  return { setMember, orgWith };
}
