import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { ctxOf, userOf } from '../../http/auth.js';
import { Envelope, envelopeErrors, ok, page, PageEnvelope, PageQuery, pageOf } from '../../http/envelope.js';
import { decodeCursor } from '../../http/envelope.js';
import { acceptInvitation, getInvitationByToken } from './accept.js';
import { inviteMember, listInvitations, revokeInvitation } from './invitations.js';
import {
  INVITE_CAPS_NOTE,
  InvitationCreatedSchema,
  InvitationListQuery,
  InvitationParams,
  InvitationSchema,
  InviteBody,
  MemberParams,
  MemberSchema,
  OrgParams,
  PublicInvitationSchema,
  security,
  TokenParams,
  UpdateMemberBody,
  userSecurity,
} from './schemas.js';
import { listMembers, removeMember, updateMember, viewMember } from './service.js';

const tags = ['Members'];

/** Members, invitations and per-user permissions (docs/accounts.md, docs/decisions-accounts.md). */
export async function memberRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/organizations/:id/users',
    {
      config: { auth: 'account' },
      schema: {
        tags,
        security,
        operationId: 'listMembers',
        summary: 'List members with their roles and permission overrides (members.read)',
        params: OrgParams,
        querystring: PageQuery,
        response: { 200: PageEnvelope(MemberSchema), ...envelopeErrors(400, 401, 403, 404) },
      },
    },
    async (request) => {
      const limit = request.query.limit ?? 20;
      const rows = await listMembers(ctxOf(request), request.params.id, { limit, cursor: decodeCursor(request.query.cursor) });
      const { items, next } = pageOf(rows, limit, (r) => r.joined_at);
      return page(items.map(viewMember), next);
    },
  );

  app.post(
    '/organizations/:id/users',
    {
      config: { auth: 'account' },
      schema: {
        tags,
        security,
        operationId: 'inviteMember',
        summary: 'Invite by email as admin, member or viewer (members.invite); the token is valid 7 days',
        description: INVITE_CAPS_NOTE,
        params: OrgParams,
        body: InviteBody,
        response: { 201: Envelope(InvitationCreatedSchema), ...envelopeErrors(400, 401, 403, 404, 409, 429) },
      },
    },
    async (request, reply) => {
      const created = await inviteMember(ctxOf(request), { organizationId: request.params.id, ...request.body });
      return reply.code(201).send(ok(created, 'Invitation sent'));
    },
  );

  app.put(
    '/organizations/:id/users/:userId',
    {
      config: { auth: 'account' },
      schema: {
        tags,
        security,
        operationId: 'updateMember',
        summary: 'Change a member\'s role and permission overrides (members.update; owners only for owners; never the last owner)',
        params: MemberParams,
        body: UpdateMemberBody,
        response: { 200: Envelope(MemberSchema), ...envelopeErrors(400, 401, 403, 404, 409) },
      },
    },
    async (request) => ok(await updateMember(ctxOf(request), request.params.id, request.params.userId, request.body), 'Member updated'),
  );

  app.delete(
    '/organizations/:id/users/:userId',
    {
      config: { auth: 'account' },
      schema: {
        tags,
        security,
        operationId: 'removeMember',
        summary: 'Remove a member (members.remove), or leave (your own user id); never the last owner',
        params: MemberParams,
        response: { 200: Envelope(Type.Null()), ...envelopeErrors(400, 401, 403, 404, 409) },
      },
    },
    async (request) => {
      await removeMember(ctxOf(request), request.params.id, request.params.userId);
      return ok(null, 'Member removed');
    },
  );

  app.get(
    '/organizations/:id/invitations',
    {
      config: { auth: 'account' },
      schema: {
        tags,
        security,
        operationId: 'listInvitations',
        summary: 'List invitations: open ones, or all with ?status=all (members.read)',
        params: OrgParams,
        querystring: InvitationListQuery,
        response: { 200: PageEnvelope(InvitationSchema), ...envelopeErrors(400, 401, 403, 404) },
      },
    },
    async (request) => {
      const limit = request.query.limit ?? 20;
      const { items, next } = await listInvitations(ctxOf(request), request.params.id, {
        limit,
        cursor: decodeCursor(request.query.cursor),
        status: request.query.status ?? 'pending',
      });
      return page(items, next);
    },
  );

  app.delete(
    '/organizations/:id/invitations/:invitationId',
    {
      config: { auth: 'account' },
      schema: {
        tags,
        security,
        operationId: 'revokeInvitation',
        summary: 'Revoke an invitation: its link stops working at once (members.invite)',
        params: InvitationParams,
        response: { 200: Envelope(InvitationSchema), ...envelopeErrors(400, 401, 403, 404, 409) },
      },
    },
    async (request) => ok(await revokeInvitation(ctxOf(request), request.params.id, request.params.invitationId), 'Invitation revoked'),
  );

  app.get(
    '/invitations/:token',
    {
      config: { auth: 'public', secretParams: ['token'] },
      schema: {
        tags,
        operationId: 'getInvitation',
        summary: 'What an invitation link is for: organization, role, inviter, expiry and status (no auth); a browser is sent to the console',
        params: TokenParams,
        response: {
          200: Envelope(PublicInvitationSchema),
          302: Type.Null({
            description: 'A browser (Accept: text/html) is sent to the console page of the invitation, /console/invitations/{token}',
          }),
          ...envelopeErrors(400, 404),
        },
      },
    },
    async (request, reply) => {
      // The accept_url mailed to people: a browser opening it gets the console's page, an API client the JSON.
      if (request.server.consoleBuilt && /\btext\/html\b/.test(request.headers.accept ?? '')) {
        return reply.redirect(`/console/invitations/${encodeURIComponent(request.params.token)}`, 302);
      }
      return ok(await getInvitationByToken(ctxOf(request), request.params.token));
    },
  );

  app.post(
    '/invitations/:token/accept',
    {
      config: { auth: 'user', secretParams: ['token'] },
      schema: {
        tags,
        security: userSecurity,
        operationId: 'acceptInvitation',
        summary: 'Accept an invitation as the signed-in user it was sent to; joins with the invited role',
        params: TokenParams,
        response: { 200: Envelope(MemberSchema), ...envelopeErrors(400, 401, 403, 404, 409) },
      },
    },
    async (request) => {
      const { ctx, userId } = userOf(request);
      return ok(await acceptInvitation(ctx, userId, request.params.token), 'Invitation accepted');
    },
  );
}
