import { HOUR } from '../../clock.js';
import { actorLabel, type Ctx } from '../../context.js';
import { AppError } from '../../errors.js';
import { AttemptLimiter } from '../../lib/attempt-limiter.js';
import type { Caches } from '../../lib/caches.js';
import { type Delivery, type MailTemplate, renderMail, sendMail } from '../../lib/mailer.js';
import { writeAudit } from '../audit/service.js';

/** Test sends per caller and per recipient in any hour: a mail relay for anyone signed in is a spam relay otherwise. */
export const EMAIL_TEST_LIMIT = 10;

/** One limiter per app instance (its caches object), in process like the login limiter. */
const limiters = new WeakMap<Caches, AttemptLimiter>();

function limiterOf(ctx: Ctx): AttemptLimiter {
  let limiter = limiters.get(ctx.caches);
  if (!limiter) {
    limiter = new AttemptLimiter(ctx.clock, EMAIL_TEST_LIMIT, HOUR);
    limiters.set(ctx.caches, limiter);
  }
  return limiter;
}

/**
 * POST /api/email/test: render a template and send it through the mailer (SMTP when SMTP_URL is set,
 * else the outbox). The outbox row and its audit row commit together; the answer says where it went.
 */
export async function sendTestEmail(
  ctx: Ctx,
  input: { to: string; template: MailTemplate },
): Promise<{ to: string; template: MailTemplate; delivered: Delivery }> {
  const limiter = limiterOf(ctx);
  for (const key of [`actor|${actorLabel(ctx.actor)}`, `to|${input.to.toLowerCase()}`]) {
    const hit = limiter.hit(key);
    if (!hit.allowed) {
      throw new AppError(
        'RATE_LIMITED',
        `Too many test emails; retry in ${hit.retryAfterSeconds} seconds`,
        {},
        { 'retry-after': String(hit.retryAfterSeconds) },
      );
    }
  }
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
