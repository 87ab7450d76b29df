import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { ctxOf } from '../../http/auth.js';
import { Envelope, envelopeErrors, ok } from '../../http/envelope.js';
import { inviteMember } from '../members/invitations.js';
import { ApiInviteBody, ApiOrgParams, EmailTestBody, EmailTestResult, INVITE_CAPS_NOTE, InvitationCreatedSchema, security } from '../members/schemas.js';
import { sendTestEmail } from './email.js';
import { usersMeRoute } from './users-me.js';

/** The self-hosted /api paths: /api/users/me, /api/email/test. */
export async function selfHostedRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  await usersMeRoute(fastify);

  app.post(
    '/api/organizations/:org_id/invitations',
    {
      config: { auth: 'account' },
      schema: {
        tags: ['Members'],
        security,
        operationId: 'createInvitation',
        summary: 'Invite by email (self-hosted path); role owner only when an owner invites',
        description: INVITE_CAPS_NOTE,
        params: ApiOrgParams,
        body: ApiInviteBody,
        response: { 201: Envelope(InvitationCreatedSchema), ...envelopeErrors(400, 401, 403, 404, 409, 429) },
      },
    },
    async (request, reply) => {
      const created = await inviteMember(ctxOf(request), { organizationId: request.params.org_id, ...request.body });
      return reply.code(201).send(ok(created, 'Invitation sent'));
    },
  );

  app.post(
    '/api/email/test',
    {
      config: { auth: 'account' },
      schema: {
        tags: ['Self-hosted'],
        security,
        operationId: 'sendTestEmail',
        summary: 'Send a template to an address through SMTP (SMTP_URL) or, without it, the local outbox',
        body: EmailTestBody,
        response: { 200: Envelope(EmailTestResult), ...envelopeErrors(400, 401, 429) },
      },
    },
    async (request) => {
      const result = await sendTestEmail(ctxOf(request), request.body);
      return ok(result, result.delivered === 'smtp' ? 'Sent by SMTP' : 'Kept in the outbox (no SMTP delivery)');
    },
  );
}
