import { formatAmount } from './invoices.js';
import type { CheckoutSessionObject, PortalSessionObject, SubscriptionObject } from './objects.js';
import type { StandInStateView } from './state.js';

/** Tiny hosted pages, so a person can try a purchase in a browser against the stand-in. */

function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function page(title: string, body: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(title)} · Stripe stand-in</title>
<style>body{font:16px system-ui,sans-serif;max-width:36rem;margin:3rem auto;padding:0 1rem}
button{font:inherit;padding:.4rem 1rem;margin:.2rem 0}form{display:inline}.muted{color:#666;font-size:.85rem}</style></head>
<body><p class="muted">Stripe stand-in (test mode, no real money)</p>${body}</body></html>`;
}

function button(action: string, label: string, fields: Record<string, string> = {}): string {
  const hidden = Object.entries(fields)
    .map(([name, value]) => `<input type="hidden" name="${escapeHtml(name)}" value="${escapeHtml(value)}">`)
    .join('');
  return `<form method="post" action="${escapeHtml(action)}">${hidden}<button>${escapeHtml(label)}</button></form>`;
}

export function checkoutPage(state: StandInStateView, session: Readonly<CheckoutSessionObject>): string {
  const order = state.checkoutOrders.get(session.id);
  const action = `/_stand-in/checkout/${session.id}/complete`;
  const cancel = session.cancel_url ? `<p><a href="${escapeHtml(session.cancel_url)}">Cancel and go back</a></p>` : '';
  if (session.mode === 'setup') {
    const head = '<h1>Save a card</h1><p>For later payments, made without you (auto top-up).</p>';
    if (session.status !== 'open') return page('Checkout', `${head}<p>This Checkout Session is <b>${session.status}</b>.</p>`);
    const save = `${button(action, 'Save card')} ${button(action, 'Save card (declines later)', { card: 'card_declined' })} ${button(action, 'Save card (needs authentication later)', { card: 'authentication_required' })}`;
    return page('Checkout', `${head}<p>${save} ${button(action, 'Decline card', { fail: 'true' })}</p>${cancel}`);
  }
  const price = order?.price ? state.prices.get(order.price) : undefined;
  const product = price ? state.products.get(price.product) : undefined;
  const what = `${order?.quantity ?? 1} × ${product?.name ?? 'item'}`;
  const every = price?.recurring ? ` / ${price.recurring.interval}` : '';
  const head = `<h1>${escapeHtml(what)}</h1><p>${escapeHtml(formatAmount(session.amount_total ?? 0, session.currency ?? 'usd'))}${every}</p>`;
  if (session.status !== 'open') return page('Checkout', `${head}<p>This Checkout Session is <b>${session.status}</b>.</p>`);
  const saved = order?.setupFutureUsage
    ? `<p class="muted">The card is saved for later payments. ${button(action, 'Pay (saved card declines later)', { card: 'card_declined' })}</p>`
    : '';
  return page(
    'Checkout',
    `${head}<p>${button(action, 'Pay')} ${button(action, 'Pay by bank debit (settles later)', { async_payment: 'true' })} ${button(action, 'Decline card', { fail: 'true' })}</p>${saved}${cancel}`,
  );
}

function subscriptionRow(state: StandInStateView, sub: Readonly<SubscriptionObject>, portalId: string): string {
  const item = sub.items.data[0];
  const product = item ? state.products.get(item.price.product) : undefined;
  const ends = item ? new Date(item.current_period_end * 1000).toISOString().slice(0, 10) : '?';
  const status = sub.cancel_at_period_end ? `${sub.status}, ends ${ends}` : `${sub.status}, renews ${ends}`;
  const action = `/_stand-in/subscriptions/${sub.id}`;
  const cancel = sub.cancel_at_period_end
    ? ''
    : `${button(`${action}/cancel`, 'Cancel at period end', { at_period_end: 'true', portal: portalId })} ${button(`${action}/cancel`, 'Cancel now', { portal: portalId })}`;
  const simulate = `${button(`${action}/advance`, 'Simulate: renew', { portal: portalId })} ${button(`${action}/fail-renewal`, 'Simulate: failed renewal', { portal: portalId })}`;
  return `<li><b>${escapeHtml(product?.name ?? sub.id)}</b> (${escapeHtml(status)})<br>${cancel}<br><span class="muted">${simulate}</span></li>`;
}

export function portalPage(state: StandInStateView, session: Readonly<PortalSessionObject>): string {
  const subs = [...state.subscriptions.values()].filter((s) => s.customer === session.customer && s.status !== 'canceled');
  const list = subs.length ? `<ul>${subs.map((s) => subscriptionRow(state, s, session.id)).join('')}</ul>` : '<p>No active subscriptions.</p>';
  const back = session.return_url ? `<p><a href="${escapeHtml(session.return_url)}">Return</a></p>` : '';
  return page('Billing portal', `<h1>Your subscriptions</h1>${list}${back}`);
}

export function invoicePage(state: StandInStateView, invoiceId: string): string | undefined {
  const invoice = state.invoices.get(invoiceId);
  if (!invoice) return undefined;
  const pay = invoice.status === 'open' ? button(`/_stand-in/invoices/${invoice.id}/pay`, 'Pay this invoice') : '';
  const amount = formatAmount(invoice.amount_due, invoice.currency);
  return page('Invoice', `<h1>Invoice ${escapeHtml(invoice.number ?? invoice.id)}</h1><p>${escapeHtml(amount)}: <b>${invoice.status}</b></p>${pay}`);
}

export function notFoundPage(what: string): string {
  return page('Not found', `<h1>No such ${escapeHtml(what)}</h1>`);
}
