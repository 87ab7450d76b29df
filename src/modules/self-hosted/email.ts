import { HOUR } from '../../clock.js';
import { actorLabel, type Ctx } from '../../context.js';
import { hashedSubject, limitAttempt } from '../../lib/rate-limiter.js';
import { type Delivery, type MailTemplate, renderMail, sendMail } from '../../lib/mailer.js';
import { writeAudit } from '../audit/service.js';

/** Test sends per caller and per recipient in any hour: a mail relay for anyone signed in is a spam relay otherwise. */
export const EMAIL_TEST_LIMIT = 10;

/**
 * POST /api/email/test: render a template and send it through the mailer (SMTP when SMTP_URL is set,
 * else the outbox). The outbox row and its audit row commit together; the answer says where it went.
 */
export async function sendTestEmail(
  ctx: Ctx,
  input: { to: string; template: MailTemplate },
): Promise<{ to: string; template: MailTemplate; delivered: Delivery }> {
  // Both windows or neither: a refusal for one recipient does not use up the caller's allowance.
  await limitAttempt(
    ctx.limiter,
    [
      { subject: hashedSubject('email-test:actor', actorLabel(ctx.actor)), name: 'caller', limit: EMAIL_TEST_LIMIT, windowMs: HOUR },
      { subject: hashedSubject('email-test:to', input.to.toLowerCase()), name: 'recipient', limit: EMAIL_TEST_LIMIT, windowMs: HOUR },
    ],
    'test emails',
  );
  const organizationId = ctx.actor.type === 'api_key' ? ctx.actor.organizationId : null;
  const content = renderMail(input.template, { publicBaseUrl: ctx.config.publicBaseUrl });
  const { delivered } = await sendMail(ctx, { to: input.to, template: input.template, organizationId, ...content }, async (tx, queued) => {
    await writeAudit(tx, ctx, {
      organizationId,
      action: 'send',
      resourceType: 'email',
      resourceId: queued.id,
      metadata: { to: input.to, template: input.template },
    });
  });
  return { to: input.to, template: input.template, delivered };
}
