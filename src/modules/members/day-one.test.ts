import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createHarness, type Harness, json, unique } from '../../../test/harness.js';
import { readOutboxBody } from '../../lib/mailer.js';

let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type Envelope<T> = { success: true; data: T; message: string };

/** The first day of a team, over HTTP only: sign up, create an organization, invite, join, promote. */
describe('day one', () => {
  it('sign up → organization → invite → accept → change role → create key → meter with it → revoke → refused', async () => {
    const ownerEmail = `${unique('founder')}@example.com`.toLowerCase();
    const signup = await h.request({ method: 'POST', url: '/auth/signup', payload: { email: ownerEmail, password: 'founder password 1', full_name: 'Ada Founder' } });
    expect(signup.statusCode).toBe(201);
    const owner = json<Envelope<{ access_token: string; user: { id: string } }>>(signup).data;
    const ob = bearer(owner.access_token);

    const slug = unique('acme').toLowerCase();
    const org = await h.request({ method: 'POST', url: '/organizations', headers: ob, payload: { name: 'Acme', slug } });
    expect(org.statusCode).toBe(201);
    const orgId = json<Envelope<{ id: string; role: string }>>(org).data.id;

    const guestEmail = `${unique('grace')}@Example.com`;
    const invited = await h.request({ method: 'POST', url: `/organizations/${orgId}/users`, headers: ob, payload: { email: guestEmail, role: 'viewer' } });
    expect(invited.statusCode).toBe(201);
    const invitation = json<Envelope<{ token: string; accept_url: string; role: string; email_delivery: string }>>(invited).data;
    expect(invitation).toMatchObject({ role: 'viewer', email_delivery: 'outbox' });
    const token = new URL(invitation.accept_url).pathname.split('/').pop()!;
    expect(token).toBe(invitation.token);

    // The invitee opens the link before having an account.
    const preview = await h.request({ method: 'GET', url: `/invitations/${token}` });
    expect(json<Envelope<unknown>>(preview).data).toMatchObject({
      organization_name: 'Acme',
      role: 'viewer',
      status: 'pending',
      inviter: { name: 'Ada Founder', email: ownerEmail },
    });

    const guestSignup = await h.request({ method: 'POST', url: '/auth/signup', payload: { email: guestEmail.toLowerCase(), password: 'guest password 1', full_name: 'Grace' } });
    expect(guestSignup.statusCode).toBe(201);
    const guest = json<Envelope<{ access_token: string; user: { id: string; email_verified: boolean } }>>(guestSignup).data;

    // Only a verified address accepts (docs/accounts.md, Email verification): the guest opens the link of the mail signup sent.
    expect(guest.user.email_verified).toBe(false);
    const early = await h.request({ method: 'POST', url: `/invitations/${token}/accept`, headers: bearer(guest.access_token) });
    expect(early.statusCode).toBe(403);
    const mails = await h.deps.db.query<{ body: string; body_encrypted: boolean }>(
      `SELECT body, body_encrypted FROM email_outbox WHERE "to" = $1 AND template = 'verify_email'`,
      [guestEmail.toLowerCase()],
    );
    expect(mails).toHaveLength(1);
    const link = /\/verify-email#token=(cgev_[0-9A-Za-z]+)/.exec(readOutboxBody(h.config, mails[0]!))![1]!;
    const verified = await h.request({ method: 'POST', url: '/auth/verify-email', payload: { token: link } });
    expect(json<Envelope<{ email_verified: boolean }>>(verified).data.email_verified).toBe(true);

    const accepted = await h.request({ method: 'POST', url: `/invitations/${token}/accept`, headers: bearer(guest.access_token) });
    expect(accepted.statusCode).toBe(200);
    expect(json<Envelope<{ role: string; user_id: string }>>(accepted).data).toMatchObject({ role: 'viewer', user_id: guest.user.id });

    // The guest sees the organization now, as a viewer; a viewer cannot invite.
    const orgs = await h.request({ method: 'GET', url: '/organizations', headers: bearer(guest.access_token) });
    expect(json<Envelope<Array<{ id: string; role: string }>>>(orgs).data).toEqual([expect.objectContaining({ id: orgId, role: 'viewer' })]);
    const refused = await h.request({ method: 'POST', url: `/organizations/${orgId}/users`, headers: bearer(guest.access_token), payload: { email: 'x@example.com' } });
    expect(refused.statusCode).toBe(403);

    const promoted = await h.request({ method: 'PUT', url: `/organizations/${orgId}/users/${guest.user.id}`, headers: ob, payload: { role: 'admin' } });
    expect(promoted.statusCode).toBe(200);
    expect(json<Envelope<{ role: string }>>(promoted).data.role).toBe('admin');

    const members = await h.request({ method: 'GET', url: `/organizations/${orgId}/users`, headers: bearer(guest.access_token) });
    expect(members.statusCode).toBe(200);
    const roles = Object.fromEntries(json<Envelope<Array<{ user_id: string; role: string }>>>(members).data.map((m) => [m.user_id, m.role]));
    expect(roles).toEqual({ [owner.user.id]: 'owner', [guest.user.id]: 'admin' });
    const invitedNow = await h.request({ method: 'POST', url: `/organizations/${orgId}/users`, headers: bearer(guest.access_token), payload: { email: 'x@example.com' } });
    expect(invitedNow.statusCode).toBe(201);

    // The new admin creates a key and meters with it; new organizations start on sandbox, so the
    // operator moves the deployment to launch first.
    const deployments = await h.request({ method: 'GET', url: `/organizations/${orgId}/deployments`, headers: bearer(guest.access_token) });
    const deploymentId = json<Envelope<Array<{ id: string; is_primary: boolean }>>>(deployments).data.find((d) => d.is_primary)!.id;
    const key = await h.request({
      method: 'POST',
      url: `/organizations/${orgId}/api-keys`,
      headers: bearer(guest.access_token),
      payload: { name: 'mcp server', scopes: ['read', 'write'] },
    });
    expect(key.statusCode).toBe(201);
    const { key: apiKey, id: keyId } = json<Envelope<{ key: string; id: string }>>(key).data;
    const check = () => h.request({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(apiKey), payload: { tool_name: 'search' } });
    expect(json(await check())).toMatchObject({ allowed: false, reason: 'sandbox_tier' });
    await h.request({ method: 'PUT', url: `/api/v1/admin/deployments/${deploymentId}`, headers: { 'x-admin-key': h.config.adminApiKey }, payload: { tier: 'launch' } });
    expect(json(await check())).toEqual({ allowed: true, credit_cost: 1, tier: 'launch', reason: null });
    const recorded = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(apiKey), payload: { tool_name: 'search' } });
    expect(json(recorded)).toMatchObject({ success: true, credits_used: 1, credits_remaining: 1999 });

    const revoked = await h.request({ method: 'DELETE', url: `/organizations/${orgId}/api-keys/${keyId}`, headers: ob });
    expect(revoked.statusCode).toBe(200);
    const refusedKey = await check();
    expect(refusedKey.statusCode).toBe(401);
    expect(json(refusedKey)).toMatchObject({ error: 'unauthorized', code: 'UNAUTHORIZED' });
  });
});
