import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { ctxOf, userOf } from '../../http/auth.js';
import { Envelope, envelopeErrors, ok } from '../../http/envelope.js';
import { Nullable, StoredUrl, StringEnum } from '../../http/schemas.js';
import { RESEND_LIMIT, resendVerification, verifyEmail } from './email-verification.js';
import { getProfile, login, logout, refresh, signup, updateProfile } from './service.js';
import { verifyPageRoute } from './verify-page.js';

const Email = Type.String({ format: 'email', maxLength: 320, description: 'Email address', examples: ['ada@example.com'] });
const Password = Type.String({
  minLength: 8,
  maxLength: 1024,
  description: '8 to 1,024 characters; not a common password, not the email address (or its part before @), and hard enough to guess (zxcvbn score 3 or more of 4, the email and name counted as known)',
  examples: ['correct horse battery staple'],
});

export const Profile = Type.Object({
  id: Type.String({ format: 'uuid' }),
  email: Type.String(),
  email_verified: Type.Boolean({ description: 'The address was proven by the mailed link; only then can the user accept invitations (unless the operator set EMAIL_VERIFICATION=off)' }),
  full_name: Nullable(Type.String()),
  avatar_url: Nullable(Type.String()),
  bio: Nullable(Type.String()),
  default_organization_id: Nullable(Type.String()),
  created_at: Type.String({ format: 'date-time' }),
  updated_at: Type.String({ format: 'date-time' }),
}, { title: 'User' });

const Tokens = Type.Object({
  access_token: Type.String({ description: 'JWT, 15 minutes' }),
  refresh_token: Type.String({ description: 'Opaque, 30 days, rotated on every refresh' }),
  token_type: Type.Literal('Bearer'),
  expires_in: Type.Integer({ examples: [900] }),
  user: Profile,
}, { title: 'AuthTokens' });

const tags = ['Auth'];
const bearer = [{ bearerAuth: [] }];

export async function authRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  await verifyPageRoute(fastify);

  app.post(
    '/auth/signup',
    {
      config: { auth: 'public' },
      schema: {
        tags,
        operationId: 'signUp',
        summary: 'Create an account (and its profile); signs in and mails a link to verify the address',
        body: Type.Object(
          { email: Email, password: Password, full_name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })) },
          { additionalProperties: false },
        ),
        response: { 201: Envelope(Tokens), ...envelopeErrors(400, 409, 429) },
      },
    },
    async (request, reply) => reply.code(201).send(ok(await signup(ctxOf(request), request.body), 'Account created')),
  );

  app.post(
    '/auth/login',
    {
      config: { auth: 'public' },
      schema: {
        tags,
        operationId: 'logIn',
        summary: 'Sign in (10 attempts per 15 minutes per IP and email)',
        body: Type.Object({ email: Email, password: Type.String({ minLength: 1, maxLength: 1024 }) }, { additionalProperties: false }),
        response: { 200: Envelope(Tokens), ...envelopeErrors(400, 401, 429) },
      },
    },
    async (request) => ok(await login(ctxOf(request), request.body), 'Signed in'),
  );

  app.post(
    '/auth/refresh',
    {
      config: { auth: 'public' },
      schema: {
        tags,
        operationId: 'refreshSession',
        summary: 'Trade a refresh token for a new pair (rotation; reuse revokes the session)',
        body: Type.Object({ refresh_token: Type.String({ minLength: 1, maxLength: 200 }) }, { additionalProperties: false }),
        response: { 200: Envelope(Tokens), ...envelopeErrors(400, 401) },
      },
    },
    async (request) => ok(await refresh(ctxOf(request), request.body.refresh_token), 'Refreshed'),
  );

  app.post(
    '/auth/logout',
    {
      config: { auth: 'user' },
      schema: {
        tags,
        security: bearer,
        operationId: 'logOut',
        summary: 'End the session: its access and refresh tokens stop working at once',
        response: { 200: Envelope(Type.Null()), ...envelopeErrors(401) },
      },
    },
    async (request) => {
      const { ctx, sessionId } = userOf(request);
      await logout(ctx, sessionId);
      return ok(null, 'Signed out');
    },
  );

  app.post(
    '/auth/verify-email',
    {
      config: { auth: 'public' },
      schema: {
        tags,
        operationId: 'verifyEmail',
        summary: 'Verify the email address with the token of the mailed link (valid 24 hours); again once verified is the same answer',
        body: Type.Object(
          {
            token: Type.String({
              minLength: 1,
              maxLength: 200,
              description: 'The token of the link (the part after #token=)',
              examples: ['cgev_4fT9aQ2xYz…'],
            }),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Envelope(Profile),
          ...envelopeErrors(400, 404, 409, 429),
        },
      },
    },
    async (request) => ok(await verifyEmail(ctxOf(request), request.body.token), 'Email address verified'),
  );

  app.post(
    '/auth/resend-verification',
    {
      config: { auth: 'user' },
      schema: {
        tags,
        security: bearer,
        operationId: 'resendVerification',
        summary: `Mail a fresh verification link (at most ${RESEND_LIMIT} per hour); 409 when already verified`,
        response: {
          200: Envelope(
            Type.Object({
              email: Type.String({ description: 'Where the link went', examples: ['ada@example.com'] }),
              expires_at: Type.String({ format: 'date-time', description: 'The link works until then' }),
              email_delivery: StringEnum(['smtp', 'outbox'], {
                description: 'smtp: handed to the mail server; outbox: kept in the outbox (no SMTP_URL, or the server refused it for now)',
              }),
            }),
          ),
          ...envelopeErrors(401, 409, 429),
        },
      },
    },
    async (request) => {
      const { ctx, userId } = userOf(request);
      return ok(await resendVerification(ctx, userId), 'Verification link sent');
    },
  );

  app.get(
    '/auth/me',
    {
      config: { auth: 'user' },
      schema: { tags, security: bearer, operationId: 'getProfile', summary: 'The signed-in user', response: { 200: Envelope(Profile), ...envelopeErrors(401) } },
    },
    async (request) => {
      const { ctx, userId } = userOf(request);
      return ok(await getProfile(ctx, userId));
    },
  );

  app.put(
    '/auth/me',
    {
      config: { auth: 'user' },
      schema: {
        tags,
        security: bearer,
        operationId: 'updateProfile',
        summary: "Update one's own profile",
        body: Type.Object(
          {
            full_name: Type.Optional(Nullable(Type.String({ maxLength: 200 }))),
            avatar_url: Type.Optional(Nullable(StoredUrl('Picture of the user'))),
            bio: Type.Optional(Nullable(Type.String({ maxLength: 2000 }))),
            default_organization_id: Type.Optional(Nullable(Type.String({ format: 'uuid' }))),
          },
          { additionalProperties: false },
        ),
        response: { 200: Envelope(Profile), ...envelopeErrors(400, 401) },
      },
    },
    async (request) => {
      const { ctx, userId } = userOf(request);
      return ok(await updateProfile(ctx, userId, request.body), 'Profile updated');
    },
  );
}
