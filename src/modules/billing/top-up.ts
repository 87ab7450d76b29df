import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { HOUR } from '../../clock.js';
import type { Ctx } from '../../context.js';
import { AppError, upstreamDetailOf } from '../../errors.js';
import { ctxOf } from '../../http/auth.js';
import { hashedSubject, retryAfterSeconds } from '../../lib/rate-limiter.js';
import type { DeploymentRow } from '../deployments/service.js';
import { pricedCatalog } from './account-selling.js';
import { packCheckout } from './checkout.js';
import { requireStripe } from './stripe-client.js';
import { billingAvailable, readTopUpToken } from './top-up-link.js';

/**
 * The top-up page (docs/billing.md, "Top-up link"): the page a refusal for credits links to, for whoever
 * holds the link, without a console login. GET shows the credit packs with their prices and a form per
 * pack; POST from it makes a guest Checkout Session for the token's deployment and answers 303 to it.
 * Nothing of the organization, the deployment, its balance or its members is shown. A token that is
 * expired, altered, or names a deployment that is suspended, deleted or without billing is 410.
 */

/** Checkout Sessions one token may make per hour, and one deployment through all its tokens. */
export const TOP_UP_CHECKOUTS_PER_TOKEN = 10;
export const TOP_UP_CHECKOUTS_PER_DEPLOYMENT = 30;

const GONE = 'This top-up link has expired or is no longer valid. Retry the call that was refused to get a new link.\n';
const CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; frame-ancestors 'none'";

interface TopUpParams {
  token: string;
}

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function plain(reply: FastifyReply, status: number, message: string): FastifyReply {
  return reply.code(status).type('text/plain; charset=utf-8').send(message);
}

/** The deployment the token names, when billing is available for it; null → 410. */
async function deploymentOf(ctx: Ctx, token: string): Promise<DeploymentRow | null> {
  const deploymentId = readTopUpToken(ctx.config, token, ctx.clock.now());
  if (!deploymentId) return null;
  const rows = await ctx.db.query<DeploymentRow & { org_deleted: boolean }>(
    `SELECT d.*, o.deleted_at IS NOT NULL AS org_deleted
     FROM deployments d JOIN organizations o ON o.id = d.organization_id WHERE d.id = $1`,
    [deploymentId],
    'top_up_deployment',
  );
  const row = rows[0];
  return row && billingAvailable(ctx.config, row) ? row : null;
}

/** "5.00 USD" from Stripe's smallest currency unit. */
function formatPrice(amount: number, currency: string): string {
  try {
    const format = new Intl.NumberFormat('en', { style: 'currency', currency: currency.toUpperCase() });
    const digits = format.resolvedOptions().maximumFractionDigits ?? 2;
    return format.format(amount / 10 ** digits);
  } catch {
    return `${amount} ${currency.toUpperCase()}`;
  }
}

/**
 * The packs with their prices, read through the selling catalog's price cache (billing/account-selling.ts):
 * the page takes no token of the caller's, so loading it again and again must not become calls to
 * Stripe (each load read every pack's price, as fast as anyone holding a link asked).
 */
async function packList(ctx: Ctx): Promise<Array<{ pack: string; credits: number; price: string }>> {
  requireStripe(ctx);
  const catalog = await pricedCatalog(ctx);
  if (!catalog.prices_read) {
    throw new AppError('SERVICE_UNAVAILABLE', 'Stripe is not reachable (to read a price); try again shortly', {}, { 'retry-after': '5' });
  }
  return catalog.packs.map((p) => ({
    pack: p.pack,
    credits: p.credits,
    price: p.unit_amount !== null && p.currency !== null ? formatPrice(p.unit_amount, p.currency) : '',
  }));
}

function page(packs: Array<{ pack: string; credits: number; price: string }>): string {
  const items = packs
    .map(
      (p) => `<li><form method="post"><input type="hidden" name="pack" value="${escapeHtml(p.pack)}">` +
        `<span class="name">${escapeHtml(p.pack)}</span> <span class="credits">${p.credits.toLocaleString('en')} credits</span> ` +
        `<span class="price">${escapeHtml(p.price)}</span> <button type="submit">Buy</button></form></li>`,
    )
    .join('\n');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer"><title>Top up credits</title>
<style>body{font-family:system-ui,sans-serif;max-width:32rem;margin:3rem auto;padding:0 1rem}ul{list-style:none;padding:0}li{margin:.75rem 0}.price{font-weight:600}</style>
</head><body><h1>Top up credits</h1><p>Choose a credit pack; payment is taken by Stripe Checkout.</p>
<ul>
${items}
</ul></body></html>
`;
}

function errorAnswer(reply: FastifyReply, error: unknown): FastifyReply {
  if (!(error instanceof AppError)) throw error;
  const upstream = upstreamDetailOf(error);
  if (upstream) reply.log.warn({ code: error.code, upstream }, 'an upstream refused: its words are for the operator');
  for (const [name, value] of Object.entries(error.headers ?? {})) reply.header(name, value);
  return plain(reply, error.status, `${error.message}\n`);
}

export async function topUpRoutes(fastify: FastifyInstance): Promise<void> {
  // The page's form posts application/x-www-form-urlencoded (this plugin only).
  fastify.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string', bodyLimit: 4096 }, (_request, body, done) => {
    done(null, Object.fromEntries(new URLSearchParams(body as string)));
  });
  // Every answer of the page, errors included: no Referer to Stripe or elsewhere, nothing kept in caches.
  fastify.addHook('onSend', async (_request, reply) => {
    reply.header('referrer-policy', 'no-referrer');
    reply.header('cache-control', 'no-store');
    reply.header('x-content-type-options', 'nosniff');
    reply.header('content-security-policy', CSP);
  });

  const config = { auth: 'public' as const, secretParams: ['token'], rateLimit: 'none' as const };
  const schema = { hide: true };

  fastify.get('/console/top-up/:token', { config, schema }, async (request: FastifyRequest, reply) => {
    const ctx = ctxOf(request);
    const { token } = request.params as TopUpParams;
    if (!(await deploymentOf(ctx, token))) return plain(reply, 410, GONE);
    try {
      return reply.code(200).type('text/html; charset=utf-8').send(page(await packList(ctx)));
    } catch (error) {
      return errorAnswer(reply, error);
    }
  });

  fastify.post('/console/top-up/:token', { config, schema }, async (request: FastifyRequest, reply) => {
    const ctx = ctxOf(request);
    const { token } = request.params as TopUpParams;
    const deployment = await deploymentOf(ctx, token);
    if (!deployment) return plain(reply, 410, GONE);
    const body = (request.body ?? {}) as Record<string, unknown>;
    const pack = typeof body.pack === 'string' ? body.pack : '';
    if (!Object.hasOwn(ctx.config.creditPacks, pack)) return plain(reply, 400, 'Choose one of the credit packs on the page.\n');
    const decision = await ctx.limiter.hit([
      { subject: hashedSubject('top-up-token', token), name: 'hour', limit: TOP_UP_CHECKOUTS_PER_TOKEN, windowMs: HOUR, exact: true },
      { subject: `top-up-dep:${deployment.id}`, name: 'hour', limit: TOP_UP_CHECKOUTS_PER_DEPLOYMENT, windowMs: HOUR, exact: true },
    ]);
    if (!decision.allowed) {
      const seconds = retryAfterSeconds(decision);
      return plain(reply.header('retry-after', String(seconds)), 429, `Too many checkouts from this link; retry in ${seconds} seconds.\n`);
    }
    try {
      const checkout = await packCheckout(ctx, deployment, pack, {}, undefined, { guest: true });
      return reply.redirect(checkout.url, 303);
    } catch (error) {
      return errorAnswer(reply, error);
    }
  });
}
